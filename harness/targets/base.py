"""Creating a worker's M ORT sessions for each target, timed.

- cpu: weights loaded by `mapper_impl.load_weights` (mapped, or one private heap buffer per
  session) and handed to the CPU EP in place with `SessionOptions.add_initializer` over
  OrtValues that point into the buffer. Prepacking is off: it would copy every weight.
- ort-native: ORT loads the external-data file itself (it maps it when prepacking is off);
  heap mode gives ORT the file's bytes in memory, which ORT copies.
- qnn: the real QNN EP loads a compiled EPContext model, with the provider option
  `disable_file_mapped_weights` doing the work.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from harness.models import PreparedModel
from harness.runner.spec import WorkerRecord, WorkerSpec

_PATH_RANK = {"mapped": 0, "heap": 1, "fallback": 2}


@dataclass
class LiveSessions:
    """Sessions plus everything that must outlive them (weights, OrtValues)."""

    sessions: list = field(default_factory=list)
    keepalive: list = field(default_factory=list)
    weights: list = field(default_factory=list)

    def close(self) -> None:
        self.sessions.clear()
        self.keepalive.clear()
        for w in self.weights:
            w.close()
        self.weights.clear()


def _cpu_session_options():
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.add_session_config_entry("session.disable_prepacking", "1")
    so.log_severity_level = 2
    return so


def create_cpu(spec: WorkerSpec, model: PreparedModel, record: WorkerRecord) -> LiveSessions:
    import numpy as np
    import onnxruntime as ort

    from mapper_impl import FaultPlan, load_weights

    model.check_weights_file()  # truncated since the parent prepared it: a clear error, not a bad read
    faults = FaultPlan(map_failures=spec.map_failures) if spec.map_failures else None
    live = LiveSessions()
    record.load_s = record.create_s = 0.0
    record.map_attempts = 0
    for _ in range(spec.sessions):
        t0 = time.perf_counter()
        weights = load_weights(model.weights_path, disable_file_mapped_weights=spec.disable_flag,
                               max_attempts=spec.max_attempts, faults=faults)
        t1 = time.perf_counter()
        live.weights.append(weights)
        so = _cpu_session_options()
        for t in model.tensors:
            count = t.length // np.dtype(t.dtype).itemsize
            array = np.frombuffer(weights.buffer, dtype=t.dtype, count=count, offset=t.offset).reshape(t.shape)
            value = ort.OrtValue.ortvalue_from_numpy(array)
            live.keepalive.append(value)
            so.add_initializer(t.name, value)
        live.sessions.append(ort.InferenceSession(str(model.onnx_path), so, providers=["CPUExecutionProvider"]))
        t2 = time.perf_counter()
        record.load_s += t1 - t0
        record.create_s += t2 - t1
        record.map_attempts += weights.attempts
        record.map_errors.extend(weights.errors)
        if _PATH_RANK[weights.path_taken] >= _PATH_RANK.get(record.path_taken, -1):
            record.path_taken = weights.path_taken
    record.weights_bytes = model.weights_bytes
    return live


def create_ort_native(spec: WorkerSpec, model: PreparedModel, record: WorkerRecord) -> LiveSessions:
    import onnxruntime as ort

    from mapper_impl import load_weights

    model.check_weights_file()
    live = LiveSessions()
    record.load_s = record.create_s = 0.0
    for _ in range(spec.sessions):
        so = _cpu_session_options()
        t0 = time.perf_counter()
        if spec.mode == "heap":
            weights = load_weights(model.weights_path, disable_file_mapped_weights="1")
            t1 = time.perf_counter()
            so.add_external_initializers_from_files_in_memory(
                [model.weights_path.name], [weights.buffer], [weights.size])
            live.sessions.append(ort.InferenceSession(str(model.onnx_path), so, providers=["CPUExecutionProvider"]))
            weights.close()  # ORT copied it: the copy is the heap cost being measured
        else:
            t1 = t0
            live.sessions.append(ort.InferenceSession(str(model.onnx_path), so, providers=["CPUExecutionProvider"]))
        t2 = time.perf_counter()
        record.load_s += t1 - t0
        record.create_s += t2 - t1
    record.path_taken = "heap" if spec.mode == "heap" else "mapped"
    record.weights_bytes = model.weights_bytes
    return live


def create_qnn(spec: WorkerSpec, model: PreparedModel, record: WorkerRecord) -> LiveSessions:
    import onnxruntime as ort

    from harness.targets.qnn.ep import classify_ep_log, qnn_session_options

    live = LiveSessions()
    t0 = time.perf_counter()
    for _ in range(spec.sessions):
        so = qnn_session_options(disable_file_mapped_weights=spec.disable_flag,
                                 share_ep_contexts=spec.share_ep_contexts)
        live.sessions.append(ort.InferenceSession(spec.qnn_onnx, so))
    record.create_s = time.perf_counter() - t0
    record.load_s = 0.0  # the EP maps or reads the context binary inside session creation
    log_text = _read_text(spec.log_path)
    record.ep_file_mapping, record.ep_log_tail = classify_ep_log(
        log_text, disable_file_mapped_weights=spec.disable_flag)
    record.path_taken = {"active": "mapped", "retried": "fallback"}.get(record.ep_file_mapping, "heap")
    record.weights_bytes = spec.weights_bytes or model.weights_bytes
    return live


def _read_text(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        return ""


CREATORS = {"cpu": create_cpu, "ort-native": create_ort_native, "qnn": create_qnn}
