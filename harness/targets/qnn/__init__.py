"""The qnn target: the real QNN EP from onnxruntime-qnn loading a compiled EPContext model, with
the provider option ``disable_file_mapped_weights`` doing the work ("0" mapped, "1" heap).

On Linux x86_64 the HTP backend runs in a simulator and the EP reports the feature unavailable
(it needs Windows on ARM64): the EP's own log says so and every row records it. Modules:
`ep` (register, session options, output comparison), `compile` (models and compilation),
`eplog` (what the EP's log says about file mapping).
"""

from __future__ import annotations

import time

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
        """M sessions, each with its own EP verdict read from its own slice of the worker's log
        (the log file the parent pointed stderr at): how many sessions took each path, not
        only the worst."""
        import onnxruntime as ort

        from .ep import qnn_session_options
        from .eplog import LogSegment, aggregate, classify_session

        options = spec.options
        flag = disable_flag(spec.mode)
        ort.set_default_logger_severity(1)  # some EP lines go through ORT's default logger
        live = LiveSessions()
        verdicts = []
        t0 = time.perf_counter()
        for _ in range(spec.sessions):
            so = qnn_session_options(disable_file_mapped_weights=flag,
                                     share_ep_contexts=bool(options.get("share_ep_contexts")),
                                     backend_type=options.get("backend_type", "htp"))
            with LogSegment(spec.log_path) as segment:
                live.sessions.append(ort.InferenceSession(options["onnx"], so))
            verdicts.append(classify_session(segment.text(), disable_file_mapped_weights=flag))
        record.create_s = time.perf_counter() - t0
        record.load_s = 0.0  # the EP maps or reads the context binary inside session creation
        worker = aggregate(verdicts)
        record.ep_file_mapping, record.ep_log_tail = worker.state, worker.evidence or worker.reason
        record.ep_sessions, record.ep_reason = worker.counts_text(), worker.reason
        record.path_taken = path_taken(worker.state, worker.counts)
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


def path_taken(state: str, counts: dict[str, int]) -> str:
    """How the weights were loaded, from the EP's own verdicts: "mapped" only when every
    session was active, "fallback" when any retried with a direct read, "unknown" without
    evidence, "heap" otherwise (option 1, platform gate, the EP's own policy)."""
    if counts.get("retried"):
        return "fallback"
    if state == "active":
        return "mapped"
    if state == "unknown":
        return "unknown"
    return "heap"


TARGET = QnnTarget()
