"""Windows memory figures through ctypes, as psutil's ``_pswindows`` reads them.

Why not psutil: the peak sampler reads its process's private bytes a thousand times a second
and must not allocate per read; ``psutil.Process().memory_info()`` builds a named tuple each
time. Here one ``PROCESS_MEMORY_COUNTERS_EX`` is allocated once and ``GetProcessMemoryInfo``
fills it in place. ``GetPerformanceInfo`` gives the system's commit charge and commit limit:
what a load on Windows fails against (a heap load commits every copied byte; a read-only file
view commits nothing).

The structures and functions are declared in the project's one Windows bindings module,
`mapper_impl._winapi`, with fixed-width types (DWORD = c_uint32, SIZE_T = c_size_t), so
their layout is checkable anywhere: the tests compare their sizes with the Windows SDK's
(64-bit: 80 and 104 bytes) under Linux's ctypes. The calls themselves run only on Windows; the
parent's sequence (OpenProcess with these rights, GetProcessMemoryInfo into the structures
`blank` prepares, `choose_counters`, `split`, GetPerformanceInfo) is checked under Wine's kernel32
and psapi by ``suites/mapper/test_wine_winmem.py``, which also lists where Wine deviates.
"""

from __future__ import annotations

import ctypes
import sys
from collections.abc import Callable
from dataclasses import dataclass

# The declarations live in the project's one Windows bindings module (re-exported here: the
# tests and the Wine probe read them as winmem's).
from mapper_impl._winapi import (  # noqa: F401
    DWORD,
    PERFORMANCE_INFORMATION,
    PROCESS_MEMORY_COUNTERS_EX,
    PROCESS_MEMORY_COUNTERS_EX2,
    PROCESS_QUERY_LIMITED_INFORMATION,
    PROCESS_VM_READ,
    SIZE_T,
    last_error,
    load,
)

#: OpenProcess rights psutil asks for to read another process's memory counters.
OPEN_ACCESS = PROCESS_QUERY_LIMITED_INFORMATION | PROCESS_VM_READ
OPEN_INHERIT = 0  # bInheritHandle: the handle stays the parent's

#: What PrivateWorkingSetSize holds before the first call. A kernel may accept EX2's size and
#: write only the older fields: Wine fills PROCESS_MEMORY_COUNTERS alone (cb 72) and succeeds;
#: a zero left there would make the whole working set look shared.
_UNWRITTEN = SIZE_T(-1).value


def blank(kind: type[ctypes.Structure]) -> ctypes.Structure:
    """A structure as it goes into GetProcessMemoryInfo: zeroed, cb its size, and the fields a
    kernel may leave unwritten (PrivateUsage, EX2's private working set) set to a value no call
    writes."""
    counters = kind()
    counters.cb = ctypes.sizeof(counters)
    counters.PrivateUsage = _UNWRITTEN
    if kind is PROCESS_MEMORY_COUNTERS_EX2:
        counters.PrivateWorkingSetSize = _UNWRITTEN
    return counters


def choose_counters(fill: Callable[[ctypes.Structure], bool]) -> ctypes.Structure:
    """The structure to read into from now on: EX2 where ``fill`` (one GetProcessMemoryInfo)
    succeeds with it and writes the private working set, else EX (``split`` then has no shared
    figure). Checking the field, not only the return, covers a kernel that takes EX2's size and
    fills less (Wine does)."""
    counters = blank(PROCESS_MEMORY_COUNTERS_EX2)
    if fill(counters) and counters.PrivateWorkingSetSize != _UNWRITTEN:
        return counters
    return blank(PROCESS_MEMORY_COUNTERS_EX)


def split(counters: ctypes.Structure) -> tuple[int, int | None]:
    """(private bytes, shared resident bytes: working set - private working set, None where
    the structure has no private working set). Private bytes are PrivateUsage, or where the
    kernel left it unwritten (Wine writes only PROCESS_MEMORY_COUNTERS) PagefileUsage, which
    Microsoft documents as the same value: never the 0 or garbage an unwritten field holds."""
    private_ws = getattr(counters, "PrivateWorkingSetSize", None)
    shared = max(0, int(counters.WorkingSetSize) - int(private_ws)) if private_ws is not None else None
    private = int(counters.PrivateUsage)
    return (int(counters.PagefileUsage) if private == _UNWRITTEN else private), shared


def _psapi():
    """(psapi, kernel32), every function declared (`mapper_impl._winapi.load`; Windows only)."""
    return load("psapi"), load("kernel32")


class ProcessCounters:
    """A process's counters, read into one preallocated structure (the `harness.runner.procmem`
    reader interface: ``read_split()``, ``kernel_peaks()``, ``close()``): this process's (the
    worker's own phase-change samples) or, given a pid, another's (the parent's peak watch),
    through a handle opened once, as psutil opens it (PROCESS_QUERY_LIMITED_INFORMATION |
    PROCESS_VM_READ) and closed by ``close()``."""

    def __init__(self, pid: int | None = None) -> None:
        if sys.platform != "win32":
            raise OSError("GetProcessMemoryInfo exists on Windows only")
        self._psapi, self._kernel32 = _psapi()
        self._owned = pid is not None
        if pid is None:
            self._process = self._kernel32.GetCurrentProcess()  # a pseudo handle: nothing to close
        else:
            self._process = self._kernel32.OpenProcess(OPEN_ACCESS, OPEN_INHERIT, pid)
            if not self._process:
                raise OSError(last_error(), f"OpenProcess({pid}) failed")
        self.counters: ctypes.Structure = choose_counters(self._fill)

    def _fill(self, counters: ctypes.Structure) -> bool:
        return bool(self._psapi.GetProcessMemoryInfo(self._process, ctypes.byref(counters), counters.cb))

    def _call(self) -> bool:
        return self._fill(self.counters)

    def read(self):
        if not self._call():
            raise OSError(last_error(), "GetProcessMemoryInfo failed")
        return self.counters

    def read_split(self) -> tuple[int, int | None]:
        """`split` of a fresh read."""
        return split(self.read())

    def kernel_peaks(self) -> tuple[int | None, int | None]:
        """(PeakPagefileUsage: the private peak, PeakWorkingSetSize: the RSS peak)."""
        try:
            c = self.read()
        except OSError:
            return None, None
        return int(c.PeakPagefileUsage), int(c.PeakWorkingSetSize)

    def close(self) -> None:
        if self._owned and self._process:
            self._kernel32.CloseHandle(self._process)
            self._process = None


@dataclass
class CommitFigures:
    """The system's commit charge and limit and its available physical memory, in bytes."""

    commit_total: int
    commit_limit: int
    physical_available: int


def performance_info() -> CommitFigures | None:
    """``GetPerformanceInfo`` in bytes (None off Windows or when the call fails)."""
    if sys.platform != "win32":
        return None
    psapi, _ = _psapi()
    info = PERFORMANCE_INFORMATION()
    info.cb = ctypes.sizeof(info)
    if not psapi.GetPerformanceInfo(ctypes.byref(info), info.cb):
        return None
    return commit_figures(info)


def commit_figures(info: PERFORMANCE_INFORMATION) -> CommitFigures:
    """The structure's page counts in bytes."""
    page = int(info.PageSize)
    return CommitFigures(int(info.CommitTotal) * page, int(info.CommitLimit) * page, int(info.PhysicalAvailable) * page)
