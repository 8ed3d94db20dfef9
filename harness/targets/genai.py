"""The genai target: onnxruntime-genai, the runtime LLM apps really use, as the generate workload's
peer (``--peer genai``, measured mapped only, as ``--peer ort-native`` is for init): each session is
an ``og.Model`` over the decoder's own folder (its genai_config.json), run by genai's own greedy loop
(``og.Generator``: ``append_tokens``, ``generate_next_token``), timed and checked as the harness's."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.core.errors import InputError
from harness.core.vocab import PathTaken, Workload
from harness.prep.decoder import Generation
from harness.prep.pipeline import GENAI_CONFIG

from .base import LiveSessions, Prepared, Target


@dataclass
class GenaiGeneration(Generation):
    """genai's loop: its generator (and KV cache) stays alive in ``kv``; the bytes are its present tensors'."""

    kv_nbytes: int = 0

    @property
    def kv_bytes(self) -> int:
        return self.kv_nbytes


def genai_generate(
    model: Any, prompt: list[int], new_tokens: int, present: list[str] = (), after_prefill: Any = None
) -> GenaiGeneration:
    """Greedy ``new_tokens`` after ``prompt`` with genai's own loop: ``append_tokens`` (the prefill)
    then ``generate_next_token``, whose first call picks from the prefill's logits (the TTFT);
    ``after_prefill()`` once the first token is out (untimed)."""
    import onnxruntime_genai as og

    params = og.GeneratorParams(model)
    params.set_search_options(max_length=len(prompt) + new_tokens, do_sample=False)
    generator = og.Generator(model, params)
    out = GenaiGeneration(kv={"generator": generator})
    t0 = time.perf_counter()
    generator.append_tokens(prompt)
    while len(out.ids) < new_tokens and not generator.is_done():
        generator.generate_next_token()
        out.ids.append(int(generator.get_next_tokens()[0]))
        now = time.perf_counter()
        if len(out.ids) > 1:
            out.step_s.append(now - t0)
        else:
            out.ttft_s = now - t0
            if after_prefill is not None:
                after_prefill()
            now = time.perf_counter()
        t0 = now
    out.kv_nbytes = sum(int(generator.get_output(name).nbytes) for name in present)
    return out


class GenaiTarget(Target):
    name = "genai"
    summary = "onnxruntime-genai's own generate loop over the decoder's folder (--peer of --workload generate)"

    def check(self, opts) -> None:
        if opts.target == self.name:
            raise InputError("--target genai: onnxruntime-genai has no heap mode to compare: use it as --peer genai")
        if opts.workload != Workload.GENERATE:
            raise InputError("--peer genai runs onnxruntime-genai's generate loop: add --workload generate")
        try:
            import onnxruntime_genai  # noqa: F401
        except ImportError as err:
            raise InputError(f"--peer genai: onnxruntime-genai is not installed ({err}); pip install it") from None
        onnx = _decoder(opts)
        if onnx is not None and not (onnx.parent / GENAI_CONFIG).is_file():
            raise InputError(f"--peer genai: no {GENAI_CONFIG} beside {onnx}: onnxruntime-genai needs one to load it")

    def prepare(self, opts, progress) -> Prepared:
        """The run target's prepared decoder (reference, inputs), loaded by genai from the folder
        with its genai_config.json: the generated decoder's, or the user's own."""
        from harness.prep.models import prepare_cpu_models
        from harness.prep.onnxfile import external_data_files, load_onnx

        from .cpu import prepared_cpu_models

        prepared = prepared_cpu_models(prepare_cpu_models(opts, progress), opts)
        onnx = _decoder(opts) or prepared.model.onnx_path
        files = [onnx, *external_data_files(onnx, load_onnx(onnx, external_data=False))]
        prepared.worker_options = {"genai_folder": str(onnx.parent), "genai_files": [str(f) for f in files]}
        prepared.warm_files = files
        prepared.source = f"onnxruntime-genai over {onnx.parent}"
        return prepared

    def versions(self) -> dict[str, str | None]:
        try:
            import onnxruntime_genai

            return {"onnxruntime_genai": onnxruntime_genai.__version__}
        except ImportError:
            return {"onnxruntime_genai": None}

    def version_keys(self) -> dict[str, str]:
        return {"onnxruntime_genai": "onnxruntime-genai"}

    def create_sessions(self, spec, models, record) -> LiveSessions:
        import onnxruntime_genai as og

        from harness.contract import phases

        from .ort_native import mapped_by_ort

        live = LiveSessions()
        files = [Path(f) for f in spec.options["genai_files"]]
        data = files[1:]
        record.weights_bytes = sum(f.stat().st_size for f in data) or sum(m.weights_bytes for m in models)
        before = _private_bytes()
        phases.mark("create")  # genai opens the model, ORT maps or reads its external data
        t0 = time.perf_counter()
        for _ in range(spec.sessions):
            live.add_group([og.Model(spec.options["genai_folder"])])
        record.create_s, record.load_s = time.perf_counter() - t0, 0.0
        grown = _private_bytes() - before if before is not None else None
        # mapped: every data file in this process's maps and no private copy of half the weights or
        # more made while the sessions were created (ORT's prepacking copies what it maps)
        copied = not data or (grown is not None and grown >= record.weights_bytes / 2)
        record.path_taken = PathTaken.HEAP if copied else mapped_by_ort(data)
        return live

    def generate(self, group: list, models: list, settings, after_prefill=None) -> GenaiGeneration:
        present = [name for name in models[0].outputs if name.startswith("present")]
        return genai_generate(group[0], settings.prompt_ids, settings.new_tokens, present, after_prefill)


def _private_bytes() -> int | None:
    """This process's private memory (USS), None where psutil cannot read it."""
    try:
        import psutil

        return int(psutil.Process().memory_full_info().uss)
    except Exception:  # psutil raises several types (AccessDenied, NotImplementedError...)
        return None


def _decoder(opts) -> Path | None:
    """The user's decoder file (None: the generated one)."""
    from harness.prep.pipeline import resolve_models

    return resolve_models(opts.models).paths[0] if opts.models else None


TARGET = GenaiTarget()
