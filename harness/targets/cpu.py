"""The cpu target (the default): weights loaded by `mapper_impl` and handed to ORT's CPU EP in
place.

Mapped mode maps the weights file once per process (`disable_file_mapped_weights=0`); heap mode
reads one private buffer per session (`=1`), as the EP does. Either way the sessions get
OrtValues that point into that buffer (`SessionOptions.add_initializer`), so the figures
measure the mapping, not a copy ORT makes. Weight prepacking is off: it would copy every weight.
"""

from __future__ import annotations

import sys
import time

from harness.core.schema import disable_flag
from harness.models import PreparedModel, cpu_session_options, prepare_cpu_model

from .base import CORRECTNESS_GATE, LiveSessions, Prepared, Target, TargetOption


def _count(text: str) -> int:
    value = int(text)
    if value < 0:
        raise ValueError("must be >= 0")
    return value


def _attempts(text: str) -> int:
    value = int(text)
    if value < 1:
        raise ValueError("must be >= 1")
    return value


# Default gates, each with the physics that sets its threshold. A worker's own overhead O
# (Python + numpy + onnxruntime + one session) measured ~26 MiB of USS and ~34 MiB of PSS on
# Linux x86_64 (2026-11); the weights W are shared in mapped mode and copied per session in heap
# mode. Measured there with W=256 MiB, N=4: USS ratio 0.09, PSS ratio 0.33, init ratio
# 0.02-0.07. The saving gates only apply once W clearly exceeds O (W >= 128 MiB) and, for
# memory, once two processes share the file: below that the ratios are honest but small.
# system_delta_ratio gets no gate: the machine's available memory moves with everything else
# running (it even went negative between repeats), so it is reported, not judged.
DEFAULT_GATES: tuple[tuple[str, str], ...] = (
    CORRECTNESS_GATE,
    (
        "fallback_workers==0",
        "The cpu target maps a local file on a healthy disk: a fall-back to the heap means the "
        "mapping path broke (not judged for runs that inject mapping failures).",
    ),
    (
        "mapped_uss_ratio<=0.5 if processes>=2 and weights_bytes>=128MiB",
        "Once two processes share the mapping its pages leave every worker's USS, so the ratio "
        "is about O/(O+W): ~0.17 at W=128 MiB, O=26 MiB. Above 0.5 the weights are not shared.",
    ),
    (
        "mapped_pss_ratio<=0.8 if processes>=2 and weights_bytes>=128MiB",
        "PSS charges a shared page 1/N to each of N sharers: the ratio is (W/N+O)/(W+O), about "
        "0.6 at N=2, W=128 MiB, O=34 MiB; 0.8 leaves room for noise and still catches no "
        "sharing (~1.0).",
    ),
    (
        "init_ratio<=0.5 if weights_bytes>=128MiB",
        "Mapping costs the same whatever the weights size while the heap path reads every byte "
        "(256 MiB took ~0.5 s per worker vs ~15 ms mapped); session creation is common to both "
        "and workers contend for the disk, hence 0.5 rather than ~0.",
    ),
)

#: Windows has no PSS; private bytes (commit charge) leave out read-only file views entirely.
WINDOWS_PRIVATE_GATE = (
    "mapped_private_ratio<=0.6 if processes>=2 and weights_bytes>=128MiB",
    "Windows private bytes exclude shared read-only file views, so mapped workers keep only their "
    "overhead O: the ratio is about O/(O+W), 0.3-0.45 for O = 60-100 MiB at W = 128 MiB. A sample "
    "of the wrong process (the venv launcher) or copied weights give ~1.0.",
)

_PATH_RANK = {"mapped": 0, "heap": 1, "fallback": 2}


class CpuTarget(Target):
    name = "cpu"
    summary = "mapper_impl + ORT CPU EP, weights handed over in place (default)"
    options = (
        TargetOption("map_failures", "--map-failures", 0, "the first K mapping attempts in each worker fail "
                     "(mapper_impl's FaultPlan)", parse=_count, metavar="K"),
        TargetOption("max_attempts", "--max-attempts", 3, "mapping attempts before falling back to the heap",
                     parse=_attempts, metavar="N"),
    )

    def prepare(self, opts, progress) -> Prepared:
        model = prepare_cpu_model(opts, progress)
        return Prepared(model, model.weights_bytes, [model.weights_path], source=model.source)

    def mapped_may_copy(self, opts) -> bool:
        o = opts.target_options
        return o.get("map_failures", 0) >= o.get("max_attempts", 3)

    def default_gates(self, opts) -> list[tuple[str, str]]:
        if opts.target_options.get("map_failures"):
            return [CORRECTNESS_GATE]  # fall-backs are expected: correctness only
        if sys.platform == "win32":  # no PSS on Windows: a PSS gate would always be "not measured"
            return [WINDOWS_PRIVATE_GATE if expr.startswith("mapped_pss_ratio") else (expr, why)
                    for expr, why in DEFAULT_GATES]
        return list(DEFAULT_GATES)

    def create_sessions(self, spec, model: PreparedModel, record) -> LiveSessions:
        import numpy as np
        import onnxruntime as ort

        from mapper_impl import FaultPlan, load_weights

        model.check_weights_file()  # truncated since the parent prepared it: a clear error, not a bad read
        map_failures = spec.options.get("map_failures", 0)
        faults = FaultPlan(map_failures=map_failures) if map_failures else None
        live = LiveSessions()
        record.load_s = record.create_s = 0.0
        record.map_attempts = 0
        record.private_copy_bytes = 0
        for _ in range(spec.sessions):
            t0 = time.perf_counter()
            weights = load_weights(model.weights_path, disable_file_mapped_weights=disable_flag(spec.mode),
                                   max_attempts=spec.options.get("max_attempts", 3), faults=faults)
            t1 = time.perf_counter()
            live.closers.append(weights.close)
            so = cpu_session_options()
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
            if weights.path_taken != "mapped":  # a private buffer, every byte written by the read
                record.private_copy_bytes += weights.size
            if _PATH_RANK[weights.path_taken] >= _PATH_RANK.get(record.path_taken, -1):
                record.path_taken = weights.path_taken
        record.weights_bytes = model.weights_bytes
        return live


TARGET = CpuTarget()
