"""Windows memory figures through ctypes without allocating per read (declarations: `mapper_impl._winapi`)."""

from __future__ import annotations

import ctypes
import sys
from collections.abc import Callable
from dataclasses import dataclass

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

OPEN_ACCESS = PROCESS_QUERY_LIMITED_INFORMATION | PROCESS_VM_READ  #: OpenProcess rights psutil asks for.
OPEN_INHERIT = 0  # bInheritHandle: the handle stays the parent's

_UNWRITTEN = SIZE_T(-1).value  #: PrivateWorkingSetSize before the first call (Wine fills only the base structure).


def blank(kind: type[ctypes.Structure]) -> ctypes.Structure:
    """A structure for GetProcessMemoryInfo: zeroed, cb set, possibly unwritten fields set to a sentinel."""
    counters = kind()
    counters.cb = ctypes.sizeof(counters)
    counters.PrivateUsage = _UNWRITTEN
    if kind is PROCESS_MEMORY_COUNTERS_EX2:
        counters.PrivateWorkingSetSize = _UNWRITTEN
    return counters


def choose_counters(fill: Callable[[ctypes.Structure], bool]) -> ctypes.Structure:
    """EX2 where a call fills its private working set, else EX (Wine takes EX2's size and fills less)."""
    counters = blank(PROCESS_MEMORY_COUNTERS_EX2)
    if fill(counters) and counters.PrivateWorkingSetSize != _UNWRITTEN:
        return counters
    return blank(PROCESS_MEMORY_COUNTERS_EX)


def split(counters: ctypes.Structure) -> tuple[int, int | None]:
    """(private bytes, shared resident or None): PrivateUsage, else PagefileUsage where it stayed unwritten."""
    private_ws = getattr(counters, "PrivateWorkingSetSize", None)
    shared = max(0, int(counters.WorkingSetSize) - int(private_ws)) if private_ws is not None else None
    private = int(counters.PrivateUsage)
    return (int(counters.PagefileUsage) if private == _UNWRITTEN else private), shared


def _psapi():
    """(psapi, kernel32), every function declared (`mapper_impl._winapi.load`; Windows only)."""
    return load("psapi"), load("kernel32")


class ProcessCounters:
    """A process's counters read into one preallocated structure, through a handle opened once."""

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
