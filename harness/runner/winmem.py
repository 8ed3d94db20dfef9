"""Windows memory figures through ctypes, as psutil's ``_pswindows`` reads them.

Why not psutil: the peak sampler reads its process's private bytes a thousand times a second
and must not allocate per read; ``psutil.Process().memory_info()`` builds a named tuple each
time. Here one ``PROCESS_MEMORY_COUNTERS_EX`` is allocated once and ``GetProcessMemoryInfo``
fills it in place. ``GetPerformanceInfo`` gives the system's commit charge and commit limit:
what a load on Windows fails against (a heap load commits every copied byte; a read-only file
view commits nothing).

The structures are declared with fixed-width types (DWORD = c_uint32, SIZE_T = c_size_t), so
their layout is checkable anywhere: the tests compare their sizes with the Windows SDK's
(64-bit: 80 and 104 bytes) under Linux's ctypes. The calls themselves run only on Windows.
"""

from __future__ import annotations

import ctypes
import sys
from dataclasses import dataclass

DWORD = ctypes.c_uint32
SIZE_T = ctypes.c_size_t


class PROCESS_MEMORY_COUNTERS_EX(ctypes.Structure):  # noqa: N801 - the SDK's name
    _fields_ = [
        ("cb", DWORD),
        ("PageFaultCount", DWORD),
        ("PeakWorkingSetSize", SIZE_T),
        ("WorkingSetSize", SIZE_T),
        ("QuotaPeakPagedPoolUsage", SIZE_T),
        ("QuotaPagedPoolUsage", SIZE_T),
        ("QuotaPeakNonPagedPoolUsage", SIZE_T),
        ("QuotaNonPagedPoolUsage", SIZE_T),
        ("PagefileUsage", SIZE_T),
        ("PeakPagefileUsage", SIZE_T),
        ("PrivateUsage", SIZE_T),
    ]


class PERFORMANCE_INFORMATION(ctypes.Structure):  # noqa: N801 - the SDK's name
    _fields_ = [
        ("cb", DWORD),
        ("CommitTotal", SIZE_T),  # pages
        ("CommitLimit", SIZE_T),
        ("CommitPeak", SIZE_T),
        ("PhysicalTotal", SIZE_T),
        ("PhysicalAvailable", SIZE_T),
        ("SystemCache", SIZE_T),
        ("KernelTotal", SIZE_T),
        ("KernelPaged", SIZE_T),
        ("KernelNonpaged", SIZE_T),
        ("PageSize", SIZE_T),
        ("HandleCount", DWORD),
        ("ProcessCount", DWORD),
        ("ThreadCount", DWORD),
    ]


def _psapi():
    """psapi's functions with their prototypes (Windows only: WinDLL exists nowhere else)."""
    psapi = ctypes.WinDLL("psapi", use_last_error=True)  # type: ignore[attr-defined]
    kernel32 = ctypes.WinDLL("kernel32", use_last_error=True)  # type: ignore[attr-defined]
    psapi.GetProcessMemoryInfo.argtypes = [ctypes.c_void_p, ctypes.c_void_p, DWORD]
    psapi.GetProcessMemoryInfo.restype = ctypes.c_int
    psapi.GetPerformanceInfo.argtypes = [ctypes.c_void_p, DWORD]
    psapi.GetPerformanceInfo.restype = ctypes.c_int
    kernel32.GetCurrentProcess.restype = ctypes.c_void_p
    return psapi, kernel32


class ProcessCounters:
    """The calling process's counters, read into one preallocated structure (the peak
    sampler's Windows reader: ``private()`` and ``kernel_peaks()``)."""

    def __init__(self) -> None:
        if sys.platform != "win32":
            raise OSError("GetProcessMemoryInfo exists on Windows only")
        self._psapi, kernel32 = _psapi()
        self._process = kernel32.GetCurrentProcess()  # a pseudo handle: nothing to close
        self.counters = PROCESS_MEMORY_COUNTERS_EX()
        self.counters.cb = ctypes.sizeof(self.counters)
        self._ref = ctypes.byref(self.counters)

    def read(self) -> PROCESS_MEMORY_COUNTERS_EX:
        if not self._psapi.GetProcessMemoryInfo(self._process, self._ref, self.counters.cb):
            raise OSError(ctypes.get_last_error(), "GetProcessMemoryInfo failed")  # type: ignore[attr-defined]
        return self.counters

    def private(self) -> int:
        return int(self.read().PrivateUsage)

    def kernel_peaks(self) -> tuple[int | None, int | None]:
        """(PeakPagefileUsage: the private peak, PeakWorkingSetSize: the RSS peak)."""
        try:
            c = self.read()
        except OSError:
            return None, None
        return int(c.PeakPagefileUsage), int(c.PeakWorkingSetSize)

    def close(self) -> None:
        pass


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
    page = int(info.PageSize)
    return CommitFigures(int(info.CommitTotal) * page, int(info.CommitLimit) * page, int(info.PhysicalAvailable) * page)
