"""The project's one set of Windows bindings, fixed-width so a fake kernel32 sees what Windows gets."""

from __future__ import annotations

import ctypes
import functools
import ntpath
import sys
from collections.abc import Callable, Mapping

from ._common import U64_MAX, FileIdentity, file_edges

HANDLE = LPVOID = ctypes.c_void_p  # Windows sizes everywhere (ctypes.wintypes.DWORD is 64 bits off Windows).
DWORD = ctypes.c_uint32
WORD = ctypes.c_uint16
BOOL = ctypes.c_int32
SIZE_T = ctypes.c_size_t
LPCWSTR = ctypes.c_wchar_p
LARGE_INTEGER = ctypes.c_int64

INVALID_HANDLE_VALUE = ctypes.c_void_p(-1).value
GENERIC_READ = 0x80000000
FILE_SHARE_READ = 0x00000001
FILE_SHARE_WRITE = 0x00000002
FILE_SHARE_DELETE = 0x00000004
#: Share mode of the short identity reads: never in a writer's or renamer's way.
FILE_SHARE_ALL = FILE_SHARE_READ | FILE_SHARE_WRITE | FILE_SHARE_DELETE
OPEN_EXISTING = 3
FILE_ATTRIBUTE_NORMAL = 0x80
PAGE_READONLY = 0x02
FILE_MAP_READ = 0x0004
MAX_PATH = 260
FILE_ID_INFO_CLASS = 18  # FILE_INFO_BY_HANDLE_CLASS.FileIdInfo

ERROR_FILE_NOT_FOUND = 2
ERROR_PATH_NOT_FOUND = 3
ERROR_ACCESS_DENIED = 5
ERROR_SHARING_VIOLATION = 32
ERROR_HANDLE_EOF = 38
ERROR_INVALID_PARAMETER = 87
ERROR_FILE_INVALID = 1006
ERROR_USER_MAPPED_FILE = 1224

_EPOCH_AS_FILETIME = 116_444_736_000_000_000  #: 100 ns ticks between 1601-01-01 (FILETIME) and 1970-01-01 (Unix epoch).


class FILETIME(ctypes.Structure):
    _fields_ = [("dwLowDateTime", DWORD), ("dwHighDateTime", DWORD)]


class BY_HANDLE_FILE_INFORMATION(ctypes.Structure):
    _fields_ = [
        ("dwFileAttributes", DWORD),
        ("ftCreationTime", FILETIME),
        ("ftLastAccessTime", FILETIME),
        ("ftLastWriteTime", FILETIME),
        ("dwVolumeSerialNumber", DWORD),
        ("nFileSizeHigh", DWORD),
        ("nFileSizeLow", DWORD),
        ("nNumberOfLinks", DWORD),
        ("nFileIndexHigh", DWORD),
        ("nFileIndexLow", DWORD),
    ]


class FILE_ID_INFO(ctypes.Structure):
    """A file's documented unique identity (the 64-bit index is not unique on ReFS)."""

    _fields_ = [("VolumeSerialNumber", ctypes.c_uint64), ("FileId", ctypes.c_ubyte * 16)]


class SYSTEM_INFO(ctypes.Structure):
    _fields_ = [
        ("dwOemId", DWORD),  # a union with two WORDs: same size
        ("dwPageSize", DWORD),
        ("lpMinimumApplicationAddress", LPVOID),
        ("lpMaximumApplicationAddress", LPVOID),
        ("dwActiveProcessorMask", SIZE_T),
        ("dwNumberOfProcessors", DWORD),
        ("dwProcessorType", DWORD),
        ("dwAllocationGranularity", DWORD),
        ("wProcessorLevel", WORD),
        ("wProcessorRevision", WORD),
    ]


class OVERLAPPED(ctypes.Structure):
    _fields_ = [
        ("Internal", SIZE_T),
        ("InternalHigh", SIZE_T),
        ("Offset", DWORD),
        ("OffsetHigh", DWORD),
        ("hEvent", HANDLE),
    ]


#: name -> (argtypes, restype) of every kernel32 function the mapper calls (`Kernel32`).
SIGNATURES: dict[str, tuple[tuple[type, ...], type | None]] = {
    "CreateFileW": ((LPCWSTR, DWORD, DWORD, LPVOID, DWORD, DWORD, HANDLE), HANDLE),
    "GetFileSizeEx": ((HANDLE, ctypes.POINTER(LARGE_INTEGER)), BOOL),
    "GetFileInformationByHandle": ((HANDLE, ctypes.POINTER(BY_HANDLE_FILE_INFORMATION)), BOOL),
    "GetFileInformationByHandleEx": ((HANDLE, ctypes.c_int, LPVOID, DWORD), BOOL),
    "ReadFile": ((HANDLE, LPVOID, DWORD, ctypes.POINTER(DWORD), ctypes.POINTER(OVERLAPPED)), BOOL),
    "CreateFileMappingW": ((HANDLE, LPVOID, DWORD, DWORD, DWORD, LPCWSTR), HANDLE),
    "MapViewOfFile": ((HANDLE, DWORD, DWORD, DWORD, SIZE_T), LPVOID),
    "UnmapViewOfFile": ((LPVOID,), BOOL),
    "CloseHandle": ((HANDLE,), BOOL),
    "GetSystemInfo": ((ctypes.POINTER(SYSTEM_INFO),), None),
}


PROCESS_QUERY_LIMITED_INFORMATION = 0x1000  #: OpenProcess rights psutil asks for to read another process's counters.
PROCESS_VM_READ = 0x0010
JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE = 0x2000
JOB_OBJECT_EXTENDED_LIMIT_INFORMATION_CLASS = 9  # JOBOBJECTINFOCLASS.JobObjectExtendedLimitInformation
JOB_OBJECT_ASSOCIATE_COMPLETION_PORT_INFORMATION_CLASS = 7  # JobObjectAssociateCompletionPortInformation
JOB_OBJECT_LIMIT_JOB_MEMORY = 0x0200
JOB_OBJECT_MSG_JOB_MEMORY_LIMIT = 10  # a completion-port message: lpOverlapped is the process id


class PROCESS_MEMORY_COUNTERS_EX(ctypes.Structure):
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


class PROCESS_MEMORY_COUNTERS_EX2(ctypes.Structure):
    """EX plus the private working set (Windows 10 22H2+, 11 22H2); absent from mingw's psapi.h."""

    _fields_ = [
        *PROCESS_MEMORY_COUNTERS_EX._fields_,
        ("PrivateWorkingSetSize", SIZE_T),
        ("SharedCommitUsage", ctypes.c_uint64),
    ]


class PERFORMANCE_INFORMATION(ctypes.Structure):
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


class IO_COUNTERS(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_uint64)
        for name in (
            "ReadOperationCount",
            "WriteOperationCount",
            "OtherOperationCount",
            "ReadTransferCount",
            "WriteTransferCount",
            "OtherTransferCount",
        )
    ]


class JOBOBJECT_BASIC_LIMIT_INFORMATION(ctypes.Structure):
    _fields_ = [
        ("PerProcessUserTimeLimit", LARGE_INTEGER),
        ("PerJobUserTimeLimit", LARGE_INTEGER),
        ("LimitFlags", DWORD),
        ("MinimumWorkingSetSize", SIZE_T),
        ("MaximumWorkingSetSize", SIZE_T),
        ("ActiveProcessLimit", DWORD),
        ("Affinity", SIZE_T),  # ULONG_PTR
        ("PriorityClass", DWORD),
        ("SchedulingClass", DWORD),
    ]


class JOBOBJECT_EXTENDED_LIMIT_INFORMATION(ctypes.Structure):
    _fields_ = [
        ("BasicLimitInformation", JOBOBJECT_BASIC_LIMIT_INFORMATION),
        ("IoInfo", IO_COUNTERS),
        ("ProcessMemoryLimit", SIZE_T),
        ("JobMemoryLimit", SIZE_T),
        ("PeakProcessMemoryUsed", SIZE_T),
        ("PeakJobMemoryUsed", SIZE_T),
    ]


class JOBOBJECT_ASSOCIATE_COMPLETION_PORT(ctypes.Structure):
    _fields_ = [("CompletionKey", LPVOID), ("CompletionPort", HANDLE)]


#: kernel32's process and job functions the harness calls (the job memory limit's included).
PROCESS_SIGNATURES: dict[str, tuple[tuple[type, ...], type | None]] = {
    "GetCurrentProcess": ((), HANDLE),
    "OpenProcess": ((DWORD, BOOL, DWORD), HANDLE),
    "CreateJobObjectW": ((LPVOID, LPCWSTR), HANDLE),
    "SetInformationJobObject": ((HANDLE, ctypes.c_int, LPVOID, DWORD), BOOL),
    "AssignProcessToJobObject": ((HANDLE, HANDLE), BOOL),
    "QueryInformationJobObject": ((HANDLE, ctypes.c_int, LPVOID, DWORD, ctypes.POINTER(DWORD)), BOOL),
    "CreateIoCompletionPort": ((HANDLE, HANDLE, SIZE_T, DWORD), HANDLE),
    "GetQueuedCompletionStatus": (
        (HANDLE, ctypes.POINTER(DWORD), ctypes.POINTER(SIZE_T), ctypes.POINTER(LPVOID), DWORD),
        BOOL,
    ),
}
#: psapi's functions the harness calls (the peak watch and the system's commit charge).
PSAPI_SIGNATURES: dict[str, tuple[tuple[type, ...], type | None]] = {
    "GetProcessMemoryInfo": ((HANDLE, LPVOID, DWORD), BOOL),
    "GetPerformanceInfo": ((LPVOID, DWORD), BOOL),
}
#: Every DLL the project calls and the functions it declares there.
DLL_SIGNATURES: dict[str, Mapping[str, tuple[tuple[type, ...], type | None]]] = {
    "kernel32": {**SIGNATURES, **PROCESS_SIGNATURES},
    "psapi": PSAPI_SIGNATURES,
}


def declare(dll: object, signatures: Mapping[str, tuple[tuple[type, ...], type | None]]) -> dict[str, Callable]:
    """Each function of ``signatures`` on ``dll`` with argtypes and restype set (never ctypes' ``int``)."""
    functions = {}
    for name, (argtypes, restype) in signatures.items():
        fn = getattr(dll, name)
        fn.argtypes = argtypes
        fn.restype = restype
        functions[name] = fn
    return functions


@functools.cache
def load(name: str):
    """DLL ``name`` with every signature declared (Windows only)."""
    if sys.platform != "win32":
        raise OSError(f"{name}.dll exists on Windows only")
    dll = ctypes.WinDLL(name, use_last_error=True)  # type: ignore[attr-defined]
    declare(dll, DLL_SIGNATURES[name])
    return dll


def last_error() -> int:
    """The calling thread's last error of a function called through `load` (0 off Windows)."""
    get = getattr(ctypes, "get_last_error", None)
    return get() if get is not None else 0


def wine_version() -> str | None:
    """Wine's version when this Windows is Wine, else None."""
    if sys.platform != "win32":
        return None
    ntdll = ctypes.WinDLL("ntdll")  # type: ignore[attr-defined]
    get = getattr(ntdll, "wine_get_version", None)
    if get is None:
        return None
    get.argtypes = ()
    get.restype = ctypes.c_char_p
    return get().decode("ascii", "replace")


def split_u64(value: int) -> tuple[int, int]:
    """(high, low) DWORDs of a 64-bit offset, as MapViewOfFile and OVERLAPPED take it."""
    if not 0 <= value <= U64_MAX:
        raise ValueError(f"offset {value} does not fit in 64 bits")
    return value >> 32, value & 0xFFFFFFFF


def filetime_to_unix_ns(high: int, low: int) -> int:
    """FILETIME (100 ns ticks since 1601) to ns since the Unix epoch, as os.stat computes it."""
    return (((high << 32) | low) - _EPOCH_AS_FILETIME) * 100


def utf16_units(text: str) -> int:
    """Length in UTF-16 code units (the unit of MAX_PATH)."""
    return len(text.encode("utf-16-le", "surrogatepass")) // 2


def win32_path(path: str) -> str:
    """``path``, or its ``\\\\?\\`` form when its absolute form reaches MAX_PATH."""
    if path.startswith(("\\\\?\\", "\\\\.\\")):
        return path
    full = ntpath.abspath(path)  # GetFullPathNameW on Windows: the resolution CreateFileW does
    if utf16_units(full) < MAX_PATH:
        return path
    if full.startswith("\\\\"):
        return "\\\\?\\UNC\\" + full[2:]
    return "\\\\?\\" + full


class Win32Error(Exception):
    """A failed kernel32 call, with the last error read right after it (internal only)."""

    def __init__(self, api: str, code: int, detail: str = "") -> None:
        self.api = api
        self.code = code
        self.detail = detail or _format_error(code)
        super().__init__(f"{api} failed: Windows error {code}" + (f" ({self.detail})" if self.detail else ""))

    def __reduce__(self) -> tuple:  # rebuilt from its arguments, not its message (survives pickling)
        return type(self), (self.api, self.code, self.detail), self.__dict__


def _format_error(code: int) -> str:
    format_error = getattr(ctypes, "FormatError", None)  # Windows only
    return format_error(code).strip() if format_error is not None else ""


class Kernel32:
    """kernel32 with every signature declared; failed calls raise Win32Error."""

    def __init__(self, dll: object, get_last_error: Callable[[], int]) -> None:
        self._fn: dict[str, Callable] = declare(dll, SIGNATURES)
        self._get_last_error = get_last_error

    def _failed(self, api: str) -> Win32Error:
        """Call this first thing after a failure: any later kernel32 call may reset the error."""
        return Win32Error(api, self._get_last_error())

    def allocation_granularity(self) -> int:
        info = SYSTEM_INFO()
        self._fn["GetSystemInfo"](ctypes.byref(info))
        return info.dwAllocationGranularity

    def open_file(self, native_path: str, share: int = FILE_SHARE_READ) -> int:
        handle = self._fn["CreateFileW"](
            native_path, GENERIC_READ, share, None, OPEN_EXISTING, FILE_ATTRIBUTE_NORMAL, None
        )
        if handle is None or handle == INVALID_HANDLE_VALUE:  # documented failure: INVALID
            raise self._failed("CreateFileW")
        return handle

    def identity(self, handle: int) -> FileIdentity:
        """FILE_ID_INFO identity (GetFileInformationByHandle's where unsupported), size, mtime and edges."""
        size = LARGE_INTEGER()
        if not self._fn["GetFileSizeEx"](handle, ctypes.byref(size)):
            raise self._failed("GetFileSizeEx")
        info = BY_HANDLE_FILE_INFORMATION()
        if not self._fn["GetFileInformationByHandle"](handle, ctypes.byref(info)):
            raise self._failed("GetFileInformationByHandle")
        device = info.dwVolumeSerialNumber
        inode = (info.nFileIndexHigh << 32) | info.nFileIndexLow
        ids = self.file_id_info(handle)
        if ids is not None:
            device, inode = ids
        written = info.ftLastWriteTime
        return FileIdentity(
            device=device,
            inode=inode,
            size=size.value,
            mtime_ns=filetime_to_unix_ns(written.dwHighDateTime, written.dwLowDateTime),
            edges=file_edges(lambda offset, n: self.read_at(handle, offset, n), size.value),
        )

    def file_id_info(self, handle: int) -> tuple[int, int] | None:
        """(volume serial, 128-bit file id) from FileIdInfo, or None where unsupported."""
        ids = FILE_ID_INFO()
        ok = self._fn["GetFileInformationByHandleEx"](
            handle, FILE_ID_INFO_CLASS, ctypes.addressof(ids), ctypes.sizeof(ids)
        )
        if not ok:
            self._failed("GetFileInformationByHandleEx")  # read the error now; not reported
            return None
        return ids.VolumeSerialNumber, int.from_bytes(bytes(ids.FileId), "little")

    def read_at(self, handle: int, offset: int, n: int) -> bytes:
        """Positional read of the open handle (OVERLAPPED offset)."""
        buf = ctypes.create_string_buffer(n)
        got = 0
        while got < n:
            overlapped = OVERLAPPED()
            overlapped.OffsetHigh, overlapped.Offset = split_u64(offset + got)
            done = DWORD(0)
            ok = self._fn["ReadFile"](
                handle, ctypes.addressof(buf) + got, n - got, ctypes.byref(done), ctypes.byref(overlapped)
            )
            if not ok:
                err = self._failed("ReadFile")
                if err.code == ERROR_HANDLE_EOF:
                    break
                raise err
            if done.value == 0:
                break
            got += done.value
        return buf.raw[:got]

    def create_mapping(self, file: int) -> int:
        # NULL on failure (upstream compares with INVALID_HANDLE_VALUE and misses it).
        mapping = self._fn["CreateFileMappingW"](file, None, PAGE_READONLY, 0, 0, None)
        if not mapping:
            raise self._failed("CreateFileMappingW")
        return mapping

    def map_view(self, mapping: int, offset: int = 0, length: int = 0) -> int:
        """A read-only view; the defaults (offset 0, length 0) map the whole file."""
        high, low = split_u64(offset)
        address = self._fn["MapViewOfFile"](mapping, FILE_MAP_READ, high, low, length)
        if not address:
            raise self._failed("MapViewOfFile")
        return address

    def unmap(self, address: int) -> bool:
        return bool(self._fn["UnmapViewOfFile"](address))

    def close(self, handle: int) -> bool:
        return bool(self._fn["CloseHandle"](handle))
