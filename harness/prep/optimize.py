"""ORT's graph optimizations once, offline, before externalising (so no add_initializer value is stale)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from harness.core.errors import InputError

from .sessions import SessionSettings, cpu_session_options

OFFLINE_LEVEL = "all"  #: Level the offline pass runs at (the sessions' default), and the one the sessions then use.
SESSION_LEVEL_AFTER = "disabled"


def optimize_offline(
    src: Path,
    out_dir: Path,
    settings: SessionSettings,
    *,
    min_external_bytes: int,
    label: str,
    on_status: Callable[[str], None] | None = None,
) -> Path:
    """Save ORT's optimized ``src`` into ``out_dir`` (``optimized.onnx`` + ``optimized.data``), in a child."""
    out = Path(out_dir) / "optimized.onnx"
    save_optimized(
        src,
        out,
        level=OFFLINE_LEVEL,
        settings=settings,
        config={
            "session.optimized_model_external_initializers_file_name": "optimized.data",
            "session.optimized_model_external_initializers_min_size_in_bytes": str(min_external_bytes),
        },
        label=label,
        on_status=on_status,
    )
    return out


def save_optimized(
    src: Path,
    out: Path,
    *,
    level: str,
    settings: SessionSettings | None = None,
    config: dict[str, str] | None = None,
    label: str,
    on_status: Callable[[str], None] | None = None,
) -> None:
    """ORT's optimizations at ``level`` applied to ``src`` once and saved at ``out``, in a child."""
    from .ortjob import run_ort_job

    job = {
        "kind": "optimize",
        "src": str(src),
        "out": str(out),
        "level": level,
        "settings": settings.to_dict() if settings is not None else None,
        "config": dict(config or {}),
        "label": label,
    }
    run_ort_job(job, label, on_status)


def optimize_in_process(job: dict) -> dict:
    """The child's side of `save_optimized` (`harness.prep.ortchild`)."""
    import onnxruntime as ort

    from harness.contract.spawn import tell_status as status
    from harness.prep.onnxfile import ort_reason
    from harness.prep.sessions import ort_level

    if job.get("settings") is not None:
        so = cpu_session_options(SessionSettings.from_dict(job["settings"]), level=job["level"])
    else:
        so = ort.SessionOptions()
        so.graph_optimization_level = ort_level(job["level"])
    so.log_severity_level = 4  # a failure is reported in one line, not as ORT's log lines
    so.optimized_model_filepath = job["out"]
    for key, value in job["config"].items():
        so.add_session_config_entry(key, value)
    status(job, f"optimizing {Path(job['src']).name} with ONNX Runtime (level {job['level']}, once)")
    try:
        ort.InferenceSession(job["src"], so, providers=["CPUExecutionProvider"])
    except Exception as err:  # ORT raises its own exception types
        raise InputError(f"{job['label']}: ONNX Runtime cannot load it: {ort_reason(err)}") from None
    return {}
