"""Where one session's lines are in a worker's log: the log file's offsets around each session creation."""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path


def flush_streams() -> None:
    """Python's buffered streams and C stdio (the QNN libraries print through it) to their fds."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(AttributeError, OSError, ValueError):
            stream.flush()
    if os.name == "posix":
        import ctypes

        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None).fflush(None)


def log_offset(path: str | os.PathLike) -> int:
    """Bytes in the log file now, after flushing what this process has buffered."""
    flush_streams()
    try:
        return os.stat(path).st_size
    except OSError:
        return 0


def stderr_offset() -> int:
    """Bytes written so far to fd 2 when it is a file (0 for a pipe or a tty)."""
    flush_streams()
    try:
        return os.fstat(2).st_size
    except OSError:
        return 0


def read_log_segment(path: str | os.PathLike, start: int, end: int | None = None) -> str:
    """The text between two offsets of a log file ('' when unreadable)."""
    try:
        with open(path, "rb") as f:
            f.seek(start)
            data = f.read(-1 if end is None else max(0, end - start))
    except OSError:
        return ""
    from harness.core.logtext import decode_log  # Windows: ORT's lines are UTF-16LE there

    return decode_log(data)


class LogSegment:
    """Offsets of one session's lines in the log file fd 2 writes to: wrap each session creation in one."""

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)
        self.start = self.end = 0

    def __enter__(self) -> LogSegment:
        self.start = log_offset(self.path)
        self.end = self.start
        return self

    def __exit__(self, *exc: object) -> None:
        self.end = log_offset(self.path)

    def text(self) -> str:
        return read_log_segment(self.path, self.start, self.end)
