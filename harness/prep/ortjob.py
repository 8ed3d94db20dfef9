"""Long ORT work of the preparation in a child process, so Ctrl-C and SIGTERM stop it at once."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from harness.contract.spawn import run_job, signal_name
from harness.core.errors import InputError

ORT_JOB_TIMEOUT_S = 3 * 3600.0  #: A job running longer is killed: minutes for the largest models, never hours.
POLL_S = 0.2  #: How often the waiting parent looks at the child (and can be interrupted).
SLOW_ENV = "HARNESS_TEST_ORT_JOB_SLOW_S"  #: Test hook: the child sleeps this many seconds before its work.


def run_ort_job(job: dict, label: str, on_status: Callable[[str], None] | None = None) -> dict:
    """Run ``job`` in a child; InputError for a failure, crash or timeout; Ctrl-C kills the child."""
    import subprocess
    import tempfile

    # ORT's log is not kept: a file as the child's stdout would be inherited by what the child starts
    # (Wine's explorer.exe, on ORT's DXGI probe) and outlive it, open: Windows would refuse to delete it
    with tempfile.TemporaryDirectory(prefix="ort-job-") as tmp:
        code, result = run_job(
            "harness.prep.ortchild",
            job,
            subprocess.DEVNULL,
            Path(tmp),
            timeout_s=ORT_JOB_TIMEOUT_S,
            poll_s=POLL_S,
            on_status=on_status,
        )
    if code is None:
        raise InputError(f"{label}: ONNX Runtime did not finish in {ORT_JOB_TIMEOUT_S:g} s (killed)")
    result = result if result is not None else {"ok": False, "error": _exit_text(code)}
    if not result.get("ok"):
        raise InputError(str(result.get("error") or f"{label}: ONNX Runtime failed"))
    return result


def _exit_text(code: int) -> str:
    if code < 0:
        name = signal_name(code)
        return f"ONNX Runtime's process was killed by {name}" + (
            " (out of memory? the model, its input shapes or --processes may need more than there is)"
            if name == "SIGKILL"
            else ""
        )
    return f"ONNX Runtime's process exited with code {code} without a result"
