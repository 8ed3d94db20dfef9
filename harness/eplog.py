"""Capture what native code (ONNX Runtime, the QNN EP, the QNN SDK) writes to the process's stderr.

Why fd-level: ORT's default log sink writes to ``std::cerr`` inside the C++ library, so swapping
Python's ``sys.stderr`` object catches nothing. The only reliable way to read the EP's warnings
(for example the file-mapping platform gate or the "Retrying with feature disabled" fallback) is
to point file descriptor 2 itself at a file for the duration of session creation.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path


def _flush_python_stderr() -> None:
    """Flush Python's buffered stderr so its text lands on the fd it was meant for."""
    try:
        sys.stderr.flush()
    except (AttributeError, OSError, ValueError):  # closed or replaced by something odd
        pass


def _set_win32_stderr_handle(fd: int) -> int | None:
    """On Windows, also repoint the Win32 STD_ERROR_HANDLE (native code may write to it directly).

    Returns the previous handle so it can be restored; None elsewhere or when unavailable.
    """
    if sys.platform != "win32":
        return None
    try:
        import ctypes
        import msvcrt

        kernel32 = ctypes.windll.kernel32  # type: ignore[attr-defined]
        std_error_handle = -12
        previous = kernel32.GetStdHandle(std_error_handle)
        kernel32.SetStdHandle(std_error_handle, msvcrt.get_osfhandle(fd))
        return int(previous)
    except (ImportError, OSError, AttributeError):
        return None


def _restore_win32_stderr_handle(previous: int | None) -> None:
    if previous is None or sys.platform != "win32":
        return
    try:
        import ctypes

        ctypes.windll.kernel32.SetStdHandle(-12, previous)  # type: ignore[attr-defined]
    except (OSError, AttributeError):
        pass


@contextmanager
def capture_native_stderr(path: Path) -> Iterator[Callable[[], str]]:
    """dup2 the process's fd 2 into `path` (native code — ORT/QNN — logs there, Python's
    sys.stderr too), restore it on exit; the yielded callable returns the text captured so far.

    The file is truncated first, so one capture holds one step's log. The file stays on disk after
    the block (workers keep it as the run's EP log). Nesting works: the outer target is saved and
    restored, which also keeps pytest's own fd capture intact.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    _flush_python_stderr()
    saved_fd = os.dup(2)
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_BINARY", 0)
    log_fd = os.open(path, flags, 0o644)
    win_prev: int | None = None
    try:
        os.dup2(log_fd, 2)
        win_prev = _set_win32_stderr_handle(2)

        def read_captured() -> str:
            _flush_python_stderr()
            try:
                return path.read_text(encoding="utf-8", errors="replace")
            except OSError:
                return ""

        yield read_captured
    finally:
        _flush_python_stderr()
        _restore_win32_stderr_handle(win_prev)
        os.dup2(saved_fd, 2)
        os.close(saved_fd)
        os.close(log_fd)
