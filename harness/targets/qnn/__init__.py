"""The qnn target: the real QNN EP from onnxruntime-qnn loading a compiled EPContext model, with
the provider option ``disable_file_mapped_weights`` doing the work ("0" mapped, "1" heap).

On Linux x86_64 the HTP backend runs in a simulator and the EP reports the feature unavailable
(it needs Windows on ARM64): the EP's own log says so and every row records it. Modules:
`ep` (register, session options, output comparison), `compile` (models and compilation),
`eplog` (what the EP's log says about file mapping).
"""

from __future__ import annotations

import time
from pathlib import Path

from harness.core.schema import disable_flag
from harness.targets.base import LiveSessions, Prepared, Target, TargetOption

from .ep import BACKEND_TYPES


def _embed_mode(text: str) -> int:
    if text not in ("0", "1"):
        raise ValueError("must be 0 or 1")
    return int(text)


def _backend(text: str) -> str:
    if text not in BACKEND_TYPES:
        raise ValueError(f"backends are {','.join(BACKEND_TYPES)}")
    return text


class QnnTarget(Target):
    name = "qnn"
    summary = "the real QNN EP from onnxruntime-qnn (HTP simulator on Linux x86_64)"
    options = (
        TargetOption("embed_mode", "--embed-mode", 0, "0 = context in an external .bin (mappable), 1 = inside "
                     "the ONNX file", parse=_embed_mode, choices=(0, 1)),
        TargetOption("share_ep_contexts", "--share-ep-contexts", False,
                     "the M sessions of one process share their QNN contexts (ep.share_ep_contexts)"),
        TargetOption("backend_type", "--backend-type", "htp", "the QNN backend (provider option backend_type)",
                     parse=_backend, choices=BACKEND_TYPES),
    )

    def prepare(self, opts, progress) -> Prepared:
        from .compile import prepare_qnn

        model, compiled = prepare_qnn(opts)
        onnx_path = compiled.onnx_path
        return Prepared(model, int(compiled.context_bytes), [onnx_path, *compiled.bin_paths],
                        worker_options={"onnx": str(onnx_path)}, source=model.source)

    def notes(self, opts) -> list[str]:
        return ["The reference output is the un-compiled model's output on ORT's CPU EP; the QNN EP "
                "quantizes every activation, so outputs are compared by cosine similarity and "
                "quantization steps, not element by element."]

    def versions(self) -> dict[str, str | None]:
        from .ep import qnn_versions

        return qnn_versions()

    def create_sessions(self, spec, model, record) -> LiveSessions:
        import onnxruntime as ort

        from .ep import qnn_session_options
        from .eplog import classify_ep_log

        options = spec.options
        live = LiveSessions()
        t0 = time.perf_counter()
        for _ in range(spec.sessions):
            so = qnn_session_options(disable_file_mapped_weights=disable_flag(spec.mode),
                                     share_ep_contexts=bool(options.get("share_ep_contexts")),
                                     backend_type=options.get("backend_type", "htp"))
            live.sessions.append(ort.InferenceSession(options["onnx"], so))
        record.create_s = time.perf_counter() - t0
        record.load_s = 0.0  # the EP maps or reads the context binary inside session creation
        record.ep_file_mapping, record.ep_log_tail = classify_ep_log(
            _read_text(spec.log_path), disable_file_mapped_weights=disable_flag(spec.mode))
        record.path_taken = {"active": "mapped", "retried": "fallback"}.get(record.ep_file_mapping, "heap")
        record.weights_bytes = spec.weights_bytes or model.weights_bytes
        return live

    def check_output(self, outputs: list, reference: dict, model) -> tuple[bool, str]:
        """The QNN EP quantizes every activation: compare by cosine and quantization steps."""
        from .ep import compare_outputs

        for name, got in zip(model.outputs, outputs, strict=False):
            result = compare_outputs(got, reference[name], quant_step=model.extra.get("quant_step"))
            if not result["ok"]:
                return False, f"{name}: {result}"
        return True, ""


def _read_text(path: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


TARGET = QnnTarget()
