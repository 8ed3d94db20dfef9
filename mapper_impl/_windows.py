"""Windows file mapper over kernel32 (ctypes): upstream's `WindowsFileMapper`, with its two
known weak spots fixed (paths are real wide strings, CreateFileMapping failure is NULL).

Sequence: CreateFileW (GENERIC_READ, FILE_SHARE_READ: while we hold the file, nobody can open
it for writing, truncate, rename or delete it), CreateFileMappingW (PAGE_READONLY, whole file),
MapViewOfFile (FILE_MAP_READ) per view. Every kernel32 function gets its ``argtypes`` and
``restype`` declared: handles and pointers are 64 bits, and ctypes' default ``int`` would cut
them to 32. The last error is read right after the failing call, before any cleanup call can
overwrite it. OS errors become domain errors here and nowhere else.

Lifetime: each view is a ctypes byte array over the view's address; a finalizer on it calls
UnmapViewOfFile when the last user (numpy array, memoryview) is gone. The file and mapping
handles (`_Handles`) are closed once close() was called AND every view is unmapped.

Long paths: a path whose absolute form has MAX_PATH (260) characters or more is passed as
``\\\\?\\C:\\...`` (``\\\\?\\UNC\\server\\share\\...`` for UNC); shorter paths are passed exactly
as given, so they resolve the way ``os.stat`` resolved them in `check_file`.
"""

from __future__ import annotations

import ctypes
import functools
import ntpath
import os
import sys
import threading
import weakref
from collections.abc import Callable

from ._base import FileMapper, MappedFile
from ._common import (
    U64_MAX,
    ClosedError,
    FileAccessError,
    FileCheckError,
    FileIdentity,
    FileMissingError,
    MappingError,
    PlatformUnavailableError,
    check_file,
    edge_hash,
)
from ._faults import FaultCursor
from ._stats import track

# Windows sizes on every platform (ctypes.wintypes.DWORD is c_ulong: 64 bits off Windows).
HANDLE = LPVOID = ctypes.c_void_p
DWORD = ctypes.c_uint32
WORD = ctypes.c_uint16
BOOL = ctypes.c_int32
SIZE_T = ctypes.c_size_t
LPCWSTR = ctypes.c_wchar_p
LARGE_INTEGER = ctypes.c_int64

INVALID_HANDLE_VALUE = ctypes.c_void_p(-1).value
GENERIC_READ = 0x80000000
FILE_SHARE_READ = 0x00000001
OPEN_EXISTING = 3
FILE_ATTRIBUTE_NORMAL = 0x80
PAGE_READONLY = 0x02
FILE_MAP_READ = 0x0004
MAX_PATH = 260

ERROR_FILE_NOT_FOUND = 2
ERROR_PATH_NOT_FOUND = 3
ERROR_ACCESS_DENIED = 5
ERROR_SHARING_VIOLATION = 32
ERROR_HANDLE_EOF = 38
ERROR_FILE_INVALID = 1006

#: 100 ns ticks between 1601-01-01 (FILETIME) and 1970-01-01 (Unix epoch).
_EPOCH_AS_FILETIME = 116_444_736_000_000_000


class FILETIME(ctypes.Structure):
    _fields_ = [("dwLowDateTime", DWORD), ("dwHighDateTime", DWORD)]


class BY_HANDLE_FILE_INFORMATION(ctypes.Structure):
    _fields_ = [("dwFileAttributes", DWORD), ("ftCreationTime", FILETIME),
                ("ftLastAccessTime", FILETIME), ("ftLastWriteTime", FILETIME),
                ("dwVolumeSerialNumber", DWORD), ("nFileSizeHigh", DWORD),
                ("nFileSizeLow", DWORD), ("nNumberOfLinks", DWORD),
                ("nFileIndexHigh", DWORD), ("nFileIndexLow", DWORD)]


class SYSTEM_INFO(ctypes.Structure):
    _fields_ = [("dwOemId", DWORD),  # a union with two WORDs: same size
                ("dwPageSize", DWORD), ("lpMinimumApplicationAddress", LPVOID),
                ("lpMaximumApplicationAddress", LPVOID), ("dwActiveProcessorMask", SIZE_T),
                ("dwNumberOfProcessors", DWORD), ("dwProcessorType", DWORD),
                ("dwAllocationGranularity", DWORD), ("wProcessorLevel", WORD),
                ("wProcessorRevision", WORD)]


class OVERLAPPED(ctypes.Structure):
    _fields_ = [("Internal", SIZE_T), ("InternalHigh", SIZE_T), ("Offset", DWORD),
                ("OffsetHigh", DWORD), ("hEvent", HANDLE)]


#: name -> (argtypes, restype) of every kernel32 function this module calls.
SIGNATURES: dict[str, tuple[tuple[type, ...], type | None]] = {
    "CreateFileW": ((LPCWSTR, DWORD, DWORD, LPVOID, DWORD, DWORD, HANDLE), HANDLE),
    "GetFileSizeEx": ((HANDLE, ctypes.POINTER(LARGE_INTEGER)), BOOL),
    "GetFileInformationByHandle": ((HANDLE, ctypes.POINTER(BY_HANDLE_FILE_INFORMATION)), BOOL),
    "ReadFile": ((HANDLE, LPVOID, DWORD, ctypes.POINTER(DWORD), ctypes.POINTER(OVERLAPPED)), BOOL),
    "CreateFileMappingW": ((HANDLE, LPVOID, DWORD, DWORD, DWORD, LPCWSTR), HANDLE),
    "MapViewOfFile": ((HANDLE, DWORD, DWORD, DWORD, SIZE_T), LPVOID),
    "UnmapViewOfFile": ((LPVOID,), BOOL),
    "CloseHandle": ((HANDLE,), BOOL),
    "GetSystemInfo": ((ctypes.POINTER(SYSTEM_INFO),), None),
}


def split_u64(value: int) -> tuple[int, int]:
    """(high, low) DWORDs of a 64-bit offset, as MapViewOfFile and OVERLAPPED take it."""
    if not 0 <= value <= U64_MAX:
        raise ValueError(f"offset {value} does not fit in 64 bits")
    return value >> 32, value & 0xFFFFFFFF


def filetime_to_unix_ns(high: int, low: int) -> int:
    """FILETIME (100 ns ticks since 1601) to ns since the Unix epoch, as os.stat computes it."""
    return (((high << 32) | low) - _EPOCH_AS_FILETIME) * 100


def win32_path(path: str) -> str:
    """The string handed to CreateFileW: ``path`` itself, or its ``\\\\?\\`` form when its
    absolute form is too long for the Win32 path parser (MAX_PATH)."""
    if path.startswith(("\\\\?\\", "\\\\.\\")):
        return path
    full = ntpath.abspath(path)  # GetFullPathNameW on Windows: the resolution CreateFileW does
    if len(full) < MAX_PATH:
        return path
    if full.startswith("\\\\"):
        return "\\\\?\\UNC\\" + full[2:]
    return "\\\\?\\" + full


class Win32Error(Exception):
    """A failed kernel32 call, with the last error read right after it (internal only)."""

    def __init__(self, api: str, code: int, detail: str = "") -> None:
        self.api = api
        self.code = code
        text = detail or _format_error(code)
        super().__init__(f"{api} failed: Windows error {code}" + (f" ({text})" if text else ""))


def _format_error(code: int) -> str:
    format_error = getattr(ctypes, "FormatError", None)  # Windows only
    return format_error(code).strip() if format_error is not None else ""


def _open_error(err: Win32Error, path: str) -> FileCheckError:
    if err.code in (ERROR_FILE_NOT_FOUND, ERROR_PATH_NOT_FOUND):
        return FileMissingError(path, f"no such file ({err})")
    if err.code == ERROR_SHARING_VIOLATION:
        return FileAccessError(path, f"open for writing by another process ({err})")
    if err.code == ERROR_ACCESS_DENIED:
        return FileAccessError(path, f"permission denied ({err})")
    return FileAccessError(path, f"cannot open ({err})")


def _mapping_error(err: Win32Error, path: str) -> MappingError:
    return MappingError(f"cannot map {path}: {err}", os_error=err.code)


class _Kernel32:
    """kernel32 with every signature declared; failed calls raise Win32Error."""

    def __init__(self, dll: object, get_last_error: Callable[[], int]) -> None:
        self._fn: dict[str, Callable] = {}
        for name, (argtypes, restype) in SIGNATURES.items():
            fn = getattr(dll, name)
            fn.argtypes = argtypes
            fn.restype = restype
            self._fn[name] = fn
        self._get_last_error = get_last_error

    def _failed(self, api: str) -> Win32Error:
        """Call this first thing after a failure: any later kernel32 call may reset the error."""
        return Win32Error(api, self._get_last_error())

    def allocation_granularity(self) -> int:
        info = SYSTEM_INFO()
        self._fn["GetSystemInfo"](ctypes.byref(info))
        return info.dwAllocationGranularity

    def open_file(self, native_path: str) -> int:
        handle = self._fn["CreateFileW"](native_path, GENERIC_READ, FILE_SHARE_READ, None,
                                         OPEN_EXISTING, FILE_ATTRIBUTE_NORMAL, None)
        if handle is None or handle == INVALID_HANDLE_VALUE:  # documented failure: INVALID
            raise self._failed("CreateFileW")
        return handle

    def identity(self, handle: int) -> FileIdentity:
        """Volume serial + file index, as os.stat reported them before Python 3.12 (3.12+
        reads FileIdInfo, whose volume serial is 64 bits: the registry compares the two)."""
        size = LARGE_INTEGER()
        if not self._fn["GetFileSizeEx"](handle, ctypes.byref(size)):
            raise self._failed("GetFileSizeEx")
        info = BY_HANDLE_FILE_INFORMATION()
        if not self._fn["GetFileInformationByHandle"](handle, ctypes.byref(info)):
            raise self._failed("GetFileInformationByHandle")
        written = info.ftLastWriteTime
        return FileIdentity(
            device=info.dwVolumeSerialNumber,
            inode=(info.nFileIndexHigh << 32) | info.nFileIndexLow,
            size=size.value,
            mtime_ns=filetime_to_unix_ns(written.dwHighDateTime, written.dwLowDateTime),
            edge_hash=edge_hash(lambda offset, n: self.read_at(handle, offset, n), size.value),
        )

    def read_at(self, handle: int, offset: int, n: int) -> bytes:
        """Positional read of the open handle (OVERLAPPED offset on a synchronous handle):
        hashes the file we hold, not whatever the path names now, and needs no file pointer."""
        buf = ctypes.create_string_buffer(n)
        got = 0
        while got < n:
            overlapped = OVERLAPPED()
            overlapped.OffsetHigh, overlapped.Offset = split_u64(offset + got)
            done = DWORD(0)
            ok = self._fn["ReadFile"](handle, ctypes.addressof(buf) + got, n - got,
                                      ctypes.byref(done), ctypes.byref(overlapped))
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

    def map_view(self, mapping: int, offset: int, length: int) -> int:
        high, low = split_u64(offset)
        address = self._fn["MapViewOfFile"](mapping, FILE_MAP_READ, high, low, length)
        if not address:
            raise self._failed("MapViewOfFile")
        return address

    def unmap(self, address: int) -> bool:
        return bool(self._fn["UnmapViewOfFile"](address))

    def close(self, handle: int) -> bool:
        return bool(self._fn["CloseHandle"](handle))


class _Handles:
    """File + mapping handles, closed when the last holder lets go: the mapped file (until
    close() or garbage collection) and each live view hold one reference. The file handle
    must outlive every view: its share mode is what keeps writers out."""

    def __init__(self, api: _Kernel32, file: int, mapping: int) -> None:
        self.api = api
        self.file = file
        self.mapping = mapping
        self._refs = 1
        self._lock = threading.Lock()  # held only over int updates: no GC can run inside

    def retain(self) -> bool:
        """One more holder; False if the handles are already closed."""
        with self._lock:
            if self._refs == 0:
                return False
            self._refs += 1
            return True

    def release(self) -> None:
        with self._lock:
            self._refs -= 1
            last = self._refs == 0
        if last:  # kernel32 calls outside the lock: finalizers may run here
            self.api.close(self.mapping)
            self.api.close(self.file)


def _unmap_view(api: _Kernel32, address: int, handles: _Handles) -> None:
    try:
        api.unmap(address)  # a failure here has nobody to report to; the handles still close
    finally:
        handles.release()


def _finalizer(obj: object, func: Callable, *args: object) -> weakref.finalize:
    """A finalizer that does not run at interpreter exit: unmapping memory that a daemon
    thread or a late destructor may still read would crash; the OS unmaps at exit anyway."""
    fin = weakref.finalize(obj, func, *args)
    fin.atexit = False
    return fin


@functools.lru_cache(maxsize=64)
def _view_type(length: int) -> type:
    """A ``c_ubyte * length`` subclass that, unlike plain ctypes arrays, can be weak-referenced
    (the unmap finalizer needs it) and hashed by identity (ctypes arrays refuse hash())."""
    return type("MappedView", (ctypes.c_ubyte * length,), {"__hash__": object.__hash__})


class WindowsMappedFile(MappedFile):
    """A read-only mapping of a whole file; handles stay open while anything is mapped."""

    def __init__(self, path: str, api: _Kernel32, handles: _Handles, identity: FileIdentity,
                 granularity: int) -> None:
        self._api = api
        self._handles: _Handles | None = handles
        self._drop_handles = _finalizer(self, handles.release)  # also if never closed
        try:
            super().__init__(path, identity.size, identity, granularity)
        except BaseException:
            self._release_handles()
            raise

    def _map_view(self, aligned_offset: int, length: int) -> object:
        handles = self._handles
        if handles is None or not handles.retain():
            raise MappingError(f"cannot map {self.path}: file is closed")
        try:
            address = self._api.map_view(handles.mapping, aligned_offset, length)
        except BaseException as err:  # the last error is already read: now the cleanup
            handles.release()
            if isinstance(err, Win32Error):
                raise _mapping_error(err, self.path) from err
            raise
        try:
            view = _view_type(length).from_address(address)
        except BaseException:
            _unmap_view(self._api, address, handles)
            raise
        # Unmaps even if the view is dropped before it is tracked; tracking calls it first.
        view._unmap = _finalizer(view, _unmap_view, self._api, address, handles)
        return view

    def _track(self, owner: object, count_key: str, bytes_key: str, nbytes: int) -> None:
        track(owner, count_key, bytes_key, nbytes, on_release=owner._unmap).atexit = False

    def _track_whole_view(self, owner: object) -> None:
        self._track(owner, "live_mappings", "mapped_bytes", self.size)

    def _track_region_view(self, owner: object, length: int) -> None:
        self._track(owner, "live_views", "view_bytes", length)

    def current_identity(self) -> FileIdentity:
        handles = self._handles
        if handles is None or not handles.retain():
            raise ClosedError(f"mapping of {self.path} is closed")
        try:
            return self._api.identity(handles.file)
        except Win32Error as err:
            raise _mapping_error(err, self.path) from err
        finally:
            handles.release()

    def _release_handles(self) -> None:
        self._handles = None
        self._drop_handles()  # runs once; the handles close when the last view is unmapped


class WindowsFileMapper(FileMapper):
    """CreateFileW + CreateFileMappingW + MapViewOfFile: pages come from the system cache,
    shared by every process that maps the same file.

    ``kernel32`` and ``get_last_error`` are for tests (a fake kernel32 on any OS); by default
    ``ctypes.WinDLL("kernel32", use_last_error=True)`` and ``ctypes.get_last_error``."""

    name = "windows-kernel32"

    def __init__(
        self, kernel32: object | None = None, get_last_error: Callable[[], int] | None = None
    ) -> None:
        if kernel32 is None:
            if sys.platform != "win32":
                raise PlatformUnavailableError("kernel32 file mapping is only available on Windows")
            kernel32 = ctypes.WinDLL("kernel32", use_last_error=True)
        if get_last_error is None:
            get_last_error = getattr(ctypes, "get_last_error", None)
            if get_last_error is None:
                raise TypeError("get_last_error is required with an injected kernel32 off Windows")
        self._api = _Kernel32(kernel32, get_last_error)
        granularity = self._api.allocation_granularity()
        if granularity <= 0 or granularity & (granularity - 1):
            raise PlatformUnavailableError(f"GetSystemInfo: bad allocation granularity {granularity}")
        self.allocation_granularity = granularity

    def identity_of_path(self, path: str) -> FileIdentity:
        """Through the same handle API as a mapping: ``os.stat`` on Python 3.12+ reports a
        64-bit volume serial where GetFileInformationByHandle gives 32 bits, so mixing the two
        would make every load look like a changed file."""
        api = self._api
        try:
            handle = api.open_file(win32_path(os.fsdecode(path)))
        except Win32Error as err:
            raise _open_error(err, path) from err
        try:
            return api.identity(handle)
        except Win32Error as err:
            raise _mapping_error(err, path) from err
        finally:
            api.close(handle)

    def map_file(self, path: str, faults: FaultCursor | None = None) -> WindowsMappedFile:
        if faults is not None and faults.platform_unavailable:
            raise PlatformUnavailableError("file mapping unavailable on this platform (injected)")
        check_file(win32_path(os.fsdecode(path)) if os.name == "nt" else path)  # long paths: \\?\ form
        api = self._api
        try:
            file = api.open_file(win32_path(os.fsdecode(path)))
        except Win32Error as err:
            raise _open_error(err, path) from err
        try:
            if faults is not None:
                faults.before_map()
            identity = api.identity(file)
            if identity.size == 0:  # emptied between check and open
                raise Win32Error("GetFileSizeEx", ERROR_FILE_INVALID, "file became empty")
            mapping = api.create_mapping(file)
        except Win32Error as err:
            api.close(file)
            raise _mapping_error(err, path) from err
        except OSError as err:  # injected by the FaultCursor
            api.close(file)
            raise MappingError(f"cannot map {path}: {err}", os_error=err.errno) from err
        except BaseException:
            api.close(file)
            raise
        handles = _Handles(api, file, mapping)  # owns both handles from here on
        return WindowsMappedFile(path, api, handles, identity, self.allocation_granularity)
