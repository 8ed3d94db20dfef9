"""Windows memory figures through ctypes, as psutil's ``_pswindows`` reads them.

Why not psutil: the peak sampler reads its process's private bytes a thousand times a second
and must not allocate per read; ``psutil.Process().memory_info()`` builds a named tuple each
time. Here one ``PROCESS_MEMORY_COUNTERS_EX`` is allocated once and ``GetProcessMemoryInfo``
fills it in place. ``GetPerformanceInfo`` gives the system's commit charge and commit limit:
what a load on Windows fails against (a heap load commits every copied byte; a read-only file
view commits nothing).

The structures are declared with fixed-width types (DWORD = c_uint32, SIZE_T = c_size_t), so
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


class PROCESS_MEMORY_COUNTERS_EX2(ctypes.Structure):  # noqa: N801 - the SDK's name
    """Adds the private working set, so working set minus it is the shared (file-backed) part a
    mapped weights file is resident in. Microsoft documents it from Windows 10 22H2 with the
    September 2023 update (Windows 11 22H2 likewise); what an older kernel does with its size is
    undocumented, so `choose_counters` checks that the field was written, not only the return."""

    _fields_ = [
        *PROCESS_MEMORY_COUNTERS_EX._fields_,
        ("PrivateWorkingSetSize", SIZE_T),
        ("SharedCommitUsage", ctypes.c_uint64),
    ]


#: OpenProcess rights psutil asks for to read another process's memory counters.
PROCESS_QUERY_LIMITED_INFORMATION = 0x1000
PROCESS_VM_READ = 0x0010
OPEN_ACCESS = PROCESS_QUERY_LIMITED_INFORMATION | PROCESS_VM_READ
OPEN_INHERIT = 0  # bInheritHandle: the handle stays the parent's

#: What PrivateWorkingSetSize holds before the first call. A kernel may accept EX2's size and
#: write only the older fields: Wine fills PROCESS_MEMORY_COUNTERS alone (cb 72) and succeeds;
#: a zero left there would make the whole working set look shared.
_UNWRITTEN = SIZE_T(-1).value


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


def blank(kind: type[ctypes.Structure]) -> ctypes.Structure:
    """A structure as it goes into GetProcessMemoryInfo: zeroed, cb its size, and EX2's private
    working set set to a value no call writes."""
    counters = kind()
    counters.cb = ctypes.sizeof(counters)
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
    the structure has no private working set)."""
    private_ws = getattr(counters, "PrivateWorkingSetSize", None)
    shared = max(0, int(counters.WorkingSetSize) - int(private_ws)) if private_ws is not None else None
    return int(counters.PrivateUsage), shared


def _psapi():
    """psapi's functions with their prototypes (Windows only: WinDLL exists nowhere else)."""
    psapi = ctypes.WinDLL("psapi", use_last_error=True)  # type: ignore[attr-defined]
    kernel32 = ctypes.WinDLL("kernel32", use_last_error=True)  # type: ignore[attr-defined]
    psapi.GetProcessMemoryInfo.argtypes = [ctypes.c_void_p, ctypes.c_void_p, DWORD]
    psapi.GetProcessMemoryInfo.restype = ctypes.c_int
    psapi.GetPerformanceInfo.argtypes = [ctypes.c_void_p, DWORD]
    psapi.GetPerformanceInfo.restype = ctypes.c_int
    kernel32.GetCurrentProcess.restype = ctypes.c_void_p
    kernel32.OpenProcess.argtypes = [DWORD, ctypes.c_int, DWORD]
    kernel32.OpenProcess.restype = ctypes.c_void_p
    kernel32.CloseHandle.argtypes = [ctypes.c_void_p]
    kernel32.CloseHandle.restype = ctypes.c_int
    return psapi, kernel32


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
                raise OSError(ctypes.get_last_error(), f"OpenProcess({pid}) failed")  # type: ignore[attr-defined]
        self.counters: ctypes.Structure = choose_counters(self._fill)

    def _fill(self, counters: ctypes.Structure) -> bool:
        return bool(self._psapi.GetProcessMemoryInfo(self._process, ctypes.byref(counters), counters.cb))

    def _call(self) -> bool:
        return self._fill(self.counters)

    def read(self):
        if not self._call():
            raise OSError(ctypes.get_last_error(), "GetProcessMemoryInfo failed")  # type: ignore[attr-defined]
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
