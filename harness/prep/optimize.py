"""ORT's graph optimizations applied once, offline, before the weights are externalised.

Why: the cpu target hands ORT its weights with ``SessionOptions.add_initializer``, and ORT binds
such an OrtValue by NAME when it finalizes the session, AFTER the graph optimizers ran
(``SaveInitializedTensors`` in session_state_utils.cc; it checks the device, not the shape).
An optimizer that rewrites an initializer in place keeps its name: ORT's layout-agnostic
TransposeOptimizer (level 1) pushes the NHWC input transpose of Yahoo's open_nsfw through the
graph and transposes a single-use [1,1,1,256] Sub constant into [1,256,1,1]. The handed-over
original then replaces the rewritten tensor, and the Sub fails to broadcast (28 by 256); with
square dimensions it would have silently computed the wrong numbers.

So the harness lets ORT optimize the model once, at the level the sessions would use, saves
the optimized graph (``optimized_model_filepath``), externalises THOSE initializers, and the
sessions load that model with graph optimizations disabled (what ORT's own offline mode
recommends): no optimizer runs again, so nothing handed over can be rewritten, and every
weight, folded and transposed ones included, is in the mapped file instead of being a private
copy in each session. Level "all" includes the CPU's NCHWc layout: the result is specific to
this machine's CPU and ORT version, which the cache key covers.
"""

from __future__ import annotations

from pathlib import Path

from harness.core.errors import InputError

from .sessions import SessionSettings, cpu_session_options

#: Level the offline pass runs at (the sessions' default), and the one the sessions then use.
OFFLINE_LEVEL = "all"
SESSION_LEVEL_AFTER = "disabled"


def optimize_offline(
    src: Path, out_dir: Path, settings: SessionSettings, *, min_external_bytes: int, label: str
) -> Path:
    """Save ORT's optimized version of ``src`` into ``out_dir`` (graph ``optimized.onnx``,
    initializers of at least ``min_external_bytes`` in ``optimized.data``); returns its path."""
    import onnxruntime as ort

    from harness.prep.onnxfile import ort_reason

    out = out_dir / "optimized.onnx"
    so = cpu_session_options(settings, level=OFFLINE_LEVEL)
    so.log_severity_level = 4  # a failure is reported in one line, not as ORT's log lines
    so.optimized_model_filepath = str(out)
    so.add_session_config_entry("session.optimized_model_external_initializers_file_name", "optimized.data")
    so.add_session_config_entry(
        "session.optimized_model_external_initializers_min_size_in_bytes", str(min_external_bytes)
    )
    try:
        ort.InferenceSession(str(src), so, providers=["CPUExecutionProvider"])
    except Exception as err:  # ORT raises its own exception types
        raise InputError(f"{label}: ONNX Runtime cannot load it: {ort_reason(err)}") from None
    return out
