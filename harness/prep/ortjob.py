"""Long ONNX Runtime work of the preparation, in a child process (``python -m harness.prep.ortchild
JOB.json``): the parent's side, and the status the child reports.

Why a child: ORT's offline optimisation of a large model (100 000 initializers took minutes) and
the reference runs are one long native call each. In the harness's own process Python runs no
signal handler until that call returns, so Ctrl-C and SIGTERM (a CI timeout, ``kill``) were
ignored for minutes. In a child the parent only waits, in short steps: a Ctrl-C or SIGTERM
interrupts the wait at once and the child is killed (and dies with the parent in any case:
``PR_SET_PDEATHSIG``). The child says what it is doing in a status file the parent passes to the
progress display; ORT's own log lines go to a log file, not the terminal. The same pattern as
the QNN compile child (`harness.targets.qnn.child`).

Jobs (run by `harness.prep.ortchild`):
- ``optimize``: `harness.prep.optimize.optimize_in_process` (ORT's optimized model saved);
- ``reference``: `harness.prep.reference.reference_in_process` (the reference runs and archive);
- ``generate``: `harness.prep.decoder.generate_in_process` (the generate workload's reference ids).

The result (``ok``, ``error`` or the job's own fields) goes to the job's ``result`` JSON file.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness.core.errors import InputError

#: A job still running after this long is killed: minutes for the largest models, never hours.
ORT_JOB_TIMEOUT_S = 3 * 3600.0
#: How often the waiting parent looks at the child (and can be interrupted).
POLL_S = 0.2
#: Test hook: the child sleeps this many seconds before its work (an interruptible stand-in for
#: a long native call); never set by the harness itself.
SLOW_ENV = "HARNESS_TEST_ORT_JOB_SLOW_S"


def run_ort_job(job: dict, label: str, on_status: Callable[[str], None] | None = None) -> dict:
    """Run ``job`` in a child and return its result; InputError (one line naming ``label``) for
    a job that failed, crashed or ran past `ORT_JOB_TIMEOUT_S`. KeyboardInterrupt (Ctrl-C, or
    SIGTERM turned into one by the command line) kills the child and propagates."""
    import subprocess
    import tempfile

    from harness.contract.spawn import python_child

    with tempfile.TemporaryDirectory(prefix="ort-job-") as tmp:
        job = dict(job, result=str(Path(tmp) / "result.json"), status=str(Path(tmp) / "status.txt"))
        job_path = Path(tmp) / "job.json"
        job_path.write_text(json.dumps(job), encoding="utf-8")
        command, env = python_child("harness.prep.ortchild", str(job_path))
        with open(Path(tmp) / "ort.log", "wb") as log:
            proc = subprocess.Popen(
                command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, cwd=tmp, env=env
            )
            try:
                code = _wait(proc, Path(job["status"]), on_status)
            finally:
                if proc.poll() is None:  # interrupted (or past the deadline): the child goes too
                    proc.kill()
                    proc.wait()
        if code is None:
            raise InputError(f"{label}: ONNX Runtime did not finish in {ORT_JOB_TIMEOUT_S:g} s (killed)")
        try:
            result = json.loads(Path(job["result"]).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            result = {"ok": False, "error": _exit_text(code)}
    if not result.get("ok"):
        raise InputError(str(result.get("error") or f"{label}: ONNX Runtime failed"))
    return result


def _wait(proc: Any, status: Path, on_status: Callable[[str], None] | None) -> int | None:
    """The child's exit code, passing each new status line on; None past the deadline."""
    import subprocess

    deadline, said = time.monotonic() + ORT_JOB_TIMEOUT_S, ""
    while time.monotonic() < deadline:
        try:
            return proc.wait(timeout=POLL_S)
        except subprocess.TimeoutExpired:
            pass
        if on_status is not None:
            try:
                text = status.read_text(encoding="utf-8", errors="replace").strip()[:200]
            except OSError:
                continue
            if text and text != said:
                said = text
                on_status(text)
    return None


def _exit_text(code: int) -> str:
    if code < 0:
        import signal

        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"ONNX Runtime's process was killed by {name}" + (
            " (out of memory? the model, its input shapes or --processes may need more than there is)"
            if name == "SIGKILL"
            else ""
        )
    return f"ONNX Runtime's process exited with code {code} without a result"


# ----------------------------------------------------------------------------- the child's side


def status(job: dict, text: str) -> None:
    """Tell the parent what this child is doing now (its progress line shows it)."""
    try:
        Path(job["status"]).write_text(text, encoding="utf-8")
    except (OSError, KeyError):
        pass  # progress only
