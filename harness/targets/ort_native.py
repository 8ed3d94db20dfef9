"""The ort-native peer: ORT maps the external data itself; heap mode hands it the bytes, which it copies."""

from __future__ import annotations

import time

from harness.core.vocab import Mode, PathTaken
from harness.prep.folder import PreparedModel
from harness.prep.sessions import cpu_session_options

from .base import LiveSessions, Prepared, Target


class OrtNativeTarget(Target):
    name = "ort-native"
    summary = "ORT maps the external data itself (the peer baseline)"
    has_control = True

    def prepare(self, opts, progress) -> Prepared:
        from harness.prep.models import prepare_cpu_models

        from .cpu import prepared_cpu_models

        return prepared_cpu_models(prepare_cpu_models(opts, progress, target=self.name), opts)

    def create_sessions(self, spec, models: list[PreparedModel], record) -> LiveSessions:
        import onnxruntime as ort

        from harness.contract import phases
        from mapper_impl import load_weights

        for model in models:
            model.check_weights_file()
        settings = spec.session_settings()
        live = LiveSessions()
        record.load_s = record.create_s = 0.0
        for _ in range(spec.sessions):
            group = []
            for model in models:
                so = cpu_session_options(settings, level=model.session_level)
                onnx = str(model.onnx_path)  # the caller's input, as the cpu target's
                phases.mark("load")  # the observer's phase changes, as the cpu target's
                t0 = time.perf_counter()
                if spec.mode == Mode.HEAP:
                    weights = load_weights(model.weights_path, disable_file_mapped_weights="1")
                    t1 = time.perf_counter()
                    phases.mark("create")
                    so.add_external_initializers_from_files_in_memory(
                        [model.weights_path.name], [weights.buffer], [weights.size]
                    )
                    group.append(ort.InferenceSession(onnx, so, providers=["CPUExecutionProvider"]))
                    weights.close()  # ORT copied it: the copy is the heap cost being measured
                else:
                    t1 = t0
                    phases.mark("create")  # inside the clock, as the cpu target's create stage marks it
                    group.append(ort.InferenceSession(onnx, so, providers=["CPUExecutionProvider"]))
                t2 = time.perf_counter()
                record.load_s += t1 - t0
                record.create_s += t2 - t1
            live.add_group(group)
        record.path_taken = (
            PathTaken.HEAP if spec.mode == Mode.HEAP else mapped_by_ort([m.weights_path for m in models])
        )
        record.weights_bytes = sum(m.weights_bytes for m in models)
        return live

    def weightless_work(self, spec, models: list[PreparedModel]) -> None:
        if spec.mode != Mode.HEAP:
            mapped_by_ort([m.weights_path for m in models])


def mapped_by_ort(paths: list) -> str:
    """ "mapped" only when this process's maps show every weights file mapped, "unknown" when they cannot be read."""
    import os

    try:
        seen = _mapped_paths()
    except Exception:  # the maps cannot be read here: no evidence either way
        return PathTaken.UNKNOWN
    wanted = {os.path.normcase(str(p.resolve())) for p in paths}
    return PathTaken.MAPPED if wanted <= seen else PathTaken.UNKNOWN


def _mapped_paths() -> set[str]:
    """The files this process maps: /proc/self/maps where it exists (psutil parses smaps, whose
    text keeps ~1-2 MiB of the worker's heap: it showed as a weight copy), else psutil."""
    import os

    if os.path.exists("/proc/self/maps"):
        with open("/proc/self/maps", encoding="utf-8", errors="surrogateescape") as f:
            return {parts[5].rstrip("\n") for parts in (line.split(None, 5) for line in f) if len(parts) == 6}
    import psutil

    return {os.path.normcase(m.path) for m in psutil.Process().memory_maps(grouped=True)}


TARGET = OrtNativeTarget()
