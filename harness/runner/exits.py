"""How a worker ended, in words: its exit (code, signal, timeout) and the tail of its log."""

from __future__ import annotations

from harness.core.logtext import decode_log

STDERR_TAIL_LINES = 5
STDERR_TAIL_BYTES = 64 * 1024  #: How much of the end of a worker's log is read for those lines.


def stderr_tail(path: str, lines: int = STDERR_TAIL_LINES) -> str:
    try:  # the end of the log only: a worker (ORT at verbose level) may log gigabytes
        with open(path, "rb") as handle:
            handle.seek(max(0, handle.seek(0, 2) - STDERR_TAIL_BYTES))
            text = decode_log(handle.read(STDERR_TAIL_BYTES))  # Windows: ORT's lines are UTF-16LE
    except OSError:
        return ""
    tail = [line.strip() for line in text.strip().splitlines()[-lines:]]
    return " | ".join(line for line in tail if line)


def describe_exit(code: int | None, timed_out: bool, timeout_s: float) -> str:
    if timed_out:
        return f"timed out after {timeout_s:g} s and was killed"
    if code is None:
        return "still running"
    if code < 0:
        from harness.contract.spawn import signal_name

        return f"killed by {signal_name(code)}"
    return f"exited with code {code}"
