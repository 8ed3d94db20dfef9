"""The QNN EP's log: capture it at fd level, then classify how the EP treated file mapping.

Why fd-level: ORT's default log sink writes to ``std::cerr`` inside the C++ library, so swapping
Python's ``sys.stderr`` object catches nothing; fd 2 itself must point at a file while sessions
are created. Why the log at all: outside Windows ARM64 the EP turns the feature off and says so
only as a warning; the harness must report that ("unavailable"), not pretend the two option
values differ. Texts matched (WARNING unless noted; "seen" = printed here by onnxruntime-qnn
2.7.0 / QNN SDK 2.51; the rest read in onnxruntime/onnxruntime-qnn@003edc9f,
qnn_execution_provider.cc and builder/qnn_backend_manager.cc):
- gate (seen): "File mapped weights feature is only available on Windows arm64 devices for QNN
  API versions >= 2.32. Feature will be disabled by default"; option "1" (seen): "User specified
  disable_file_mapped_weights: 1"
- retry: "Failed to create context with file mapping enabled. Error: <e>, Code : <n>. Retrying
  with feature disabled." (shared-VTCM path: "<error>. Retrying with feature disabled."), later
  "... file mapping has been disabled, possibly due to an error in a previous request."
- EP-side disable: "... incompatible with embedded EP contexts ...", "Node <n> is using an
  embedded cache. Disabling file mapping for this node.", "Context binary of <n> is <v>. File
  mapping is only supported for versions >= 3.3.3. Disabling file mapping for this node."
- mapping at work (INFO, hence log_severity 1): "Mapping DMA data for request: ...".
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

OPTION_VALUES = ("0", "1")  # disable_file_mapped_weights: "1" turns the feature off
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_TIMESTAMP = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+\s+")
_LOC = re.compile(r"^\[[^\]]*\]\s*")  # "[W:onnxruntime:, qnn_execution_provider.cc:933 QnnEp] "
_GATE = re.compile(r"File mapped weights feature is only available on", re.I)
_RETRY = re.compile(r"Retrying with feature disabled|Failed to create context with file mapping"
                    r"|file mapping has been disabled, possibly due to an error", re.I)
_EP_DISABLED = re.compile(r"incompatible with embedded EP contexts"
                          r"|Disabling file mapping for this node", re.I)
_USER_OFF = re.compile(r"User specified disable_file_mapped_weights: 1")
_OTHER = re.compile(r"User specified disable_file_mapped_weights|Mapping DMA data for request"
                    r"|Created DMA data mapping", re.I)  # context for the evidence


def _flush_python_stderr() -> None:
    """Flush Python's buffered stderr so its text lands on the fd it was meant for."""
    try:
        sys.stderr.flush()
    except (AttributeError, OSError, ValueError):  # closed or replaced by something odd
        pass


def _writes_to_fd2(stream: object) -> bool:
    try:
        return stream.fileno() == 2  # type: ignore[attr-defined]
    except (AttributeError, OSError, ValueError):
        return False


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
    py_prev = sys.stderr
    try:
        os.dup2(log_fd, 2)
        win_prev = _set_win32_stderr_handle(2)
        if not _writes_to_fd2(py_prev):  # e.g. pytest's capture object: route Python text too
            sys.stderr = open(2, "w", encoding="utf-8", errors="replace", closefd=False,
                              buffering=1)

        def read_captured() -> str:
            _flush_python_stderr()
            try:
                return path.read_text(encoding="utf-8", errors="replace")
            except OSError:
                return ""

        yield read_captured
    finally:
        _flush_python_stderr()
        if sys.stderr is not py_prev:
            sys.stderr.close()  # closefd=False: fd 2 itself stays open
            sys.stderr = py_prev
        _restore_win32_stderr_handle(win_prev)
        os.dup2(saved_fd, 2)
        os.close(saved_fd)
        os.close(log_fd)


def check_disable_flag(value: object) -> str:
    """The provider option is a string "0"/"1"; anything else would be silently misread by the EP."""
    if not isinstance(value, str) or value not in OPTION_VALUES:
        raise ValueError(f'disable_file_mapped_weights must be the string "0" (feature on) or "1" '
                         f"(feature off), got {value!r}")
    return value


def _clean(line: str) -> str:
    return _TIMESTAMP.sub("", _ANSI.sub("", line)).strip()[:300]


def classify_ep_log(text: str, *, disable_file_mapped_weights: str) -> tuple[str, str]:
    """How the EP treated file mapping, from its log: (state, evidence).

    Precedence: "unavailable" (platform gate logged) > "retried" (mapping failed, EP fell back
    to reading the .bin) > "disabled" (option "1", or the EP switched mapping off for an embedded
    or too-old context binary) > "active". Evidence is the last 3 relevant lines, without colour
    codes and timestamps.
    """
    value = check_disable_flag(disable_file_mapped_weights)
    lines = [_clean(ln) for ln in _ANSI.sub("", text or "").splitlines()]
    relevant = [ln for ln in lines
                if any(p.search(ln) for p in (_GATE, _RETRY, _EP_DISABLED, _OTHER))]
    # one log may hold many sessions: keep the last 3 *distinct* messages, oldest first
    distinct = {_LOC.sub("", ln): ln for ln in reversed(relevant)}  # first seen = latest
    evidence = "\n".join(reversed(list(distinct.values())[:3]))
    if any(_GATE.search(ln) for ln in relevant):
        state = "unavailable"
    elif any(_RETRY.search(ln) for ln in relevant):
        state = "retried"
    elif value == "1" or any(_EP_DISABLED.search(ln) for ln in relevant):
        state = "disabled"
        if value == "1" and "QnnEp" in (text or "") and not _USER_OFF.search(text or ""):
            evidence = (evidence + "\n" if evidence else "") + "note: the EP did not confirm option 1"
    else:
        state = "active"
    if not evidence:
        evidence = ("no file-mapping line in the EP log" if "qnn" in (text or "").lower()
                    else "no QNN EP log captured")
    return state, evidence
