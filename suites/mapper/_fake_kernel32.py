"""A fake kernel32 for WindowsFileMapper tests: runs anywhere, checks what real ctypes would not.

It backs "files" with real files and views with real memory (an mmap of the file, so
addresses are real, readable, and a sparse 5 GiB file costs nothing). It records every call,
refuses calls whose ``argtypes``/``restype`` were not declared with 64-bit-safe types (its
handles do not fit in 32 bits, so a truncating declaration fails loudly), clobbers the last
error in CloseHandle, and fails any API on demand with a given last-error code.

File identities: BY_HANDLE_FILE_INFORMATION carries the low 32 bits of ``st_dev`` and the
64-bit ``st_ino``; FILE_ID_INFO (GetFileInformationByHandleEx, FileIdInfo) carries the whole
``st_dev`` as the 64-bit volume serial and ``st_ino`` as the 128-bit id, unless a test set an
override in ``ids`` (path -> (volume serial, 128-bit id, 64-bit index)) to play ReFS, where
two files can share a 64-bit index.

Windows rules it models, each checked against Wine's kernel32 by the differential tests
(`test_wine_differential.py`, scenarios in `wine_scenarios.py`): share modes between open
handles (ERROR_SHARING_VIOLATION, 32; a closed handle no longer counts, even while its view
lives), SetEndOfFile / MoveFileExW / DeleteFileW on a file with a live view (1224, 5, 5),
MapViewOfFile offsets (not a multiple of the granularity: 1132; at or past the end: 87; a view
running past the end: 5), ReadFile at the end (38), an unmapped address (487), a zero-byte
mapping (1006), and an unprefixed path of MAX_PATH UTF-16 units or more (3).
"""

from __future__ import annotations

import ctypes
import mmap
import os
from collections.abc import Callable

import numpy as np
from _fake_files import FakeFile, FakeMapping, FileRules
from mapper_support import write_file

from mapper_impl import _windows as win
from mapper_impl._windows import split_u64

GRANULARITY = 64 * 1024
INVALID = ctypes.c_void_p(-1).value
HANDLE_BASE = 0x7FF0_0000_0000  # above 32 bits: a truncating declaration loses the handle
_UNSET = object()

# Parameter kinds of each API, as the fake checks them.
KINDS = {
    "CreateFileW": (("wstr", "dword", "dword", "ptr", "dword", "dword", "handle"), "handle"),
    "GetFileSizeEx": (("handle", "out"), "bool"),
    "GetFileInformationByHandle": (("handle", "out"), "bool"),
    "GetFileInformationByHandleEx": (("handle", "enum", "ptr", "dword"), "bool"),
    "ReadFile": (("handle", "ptr", "dword", "out", "out"), "bool"),
    "CreateFileMappingW": (("handle", "ptr", "dword", "dword", "dword", "wstr"), "handle"),
    "MapViewOfFile": (("handle", "dword", "dword", "dword", "size"), "handle"),
    "UnmapViewOfFile": (("ptr",), "bool"),
    "CloseHandle": (("handle",), "bool"),
    "GetSystemInfo": (("out",), None),
    # Not called by the mapper: what the differential scenarios' "other process" does.
    "SetEndOfFile": (("handle",), "bool"),
    "MoveFileExW": (("wstr", "wstr", "dword"), "bool"),
    "DeleteFileW": (("wstr",), "bool"),
}
#: ctypes declarations of the functions only the scenarios call (the mapper declares its own).
EXTRA_SIGNATURES = {
    "SetEndOfFile": ((ctypes.c_void_p,), ctypes.c_int32),
    "MoveFileExW": ((ctypes.c_wchar_p, ctypes.c_wchar_p, ctypes.c_uint32), ctypes.c_int32),
    "DeleteFileW": ((ctypes.c_wchar_p,), ctypes.c_int32),
}
FAILED = {"CreateFileW": INVALID, "CreateFileMappingW": None, "MapViewOfFile": None}


def _unsigned_of_size(t: type, size: int) -> bool:
    return issubclass(t, ctypes._SimpleCData) and ctypes.sizeof(t) == size and t(-1).value == (1 << (8 * size)) - 1


def type_is_safe(kind: str | None, t: object) -> bool:
    """Is the declared ctypes type right for this parameter kind on a 64-bit process?"""
    if kind is None:
        return t is None
    if not isinstance(t, type):
        return False
    return {
        "handle": lambda: issubclass(t, ctypes.c_void_p),
        "ptr": lambda: issubclass(t, ctypes.c_void_p),
        "dword": lambda: _unsigned_of_size(t, 4),
        "enum": lambda: issubclass(t, ctypes._SimpleCData) and ctypes.sizeof(t) == 4 and t(-1).value == -1,
        "size": lambda: _unsigned_of_size(t, ctypes.sizeof(ctypes.c_void_p)),
        "wstr": lambda: t is ctypes.c_wchar_p,
        "out": lambda: issubclass(t, ctypes._Pointer),
        "bool": lambda: issubclass(t, ctypes._SimpleCData) and ctypes.sizeof(t) == 4,
    }[kind]()


def _pread(fd: int, n: int, offset: int) -> bytes:
    if hasattr(os, "pread"):
        return os.pread(fd, n, offset)
    os.lseek(fd, offset, os.SEEK_SET)  # Windows: the fake is single-threaded
    return os.read(fd, n)


def weights(path, size: int, seed: int = 0) -> bytes:
    """A test file whose mtime has FILETIME resolution (100 ns), as on NTFS, so the fake's
    BY_HANDLE_FILE_INFORMATION carries it exactly."""
    data = write_file(path, size, seed)
    st = os.stat(path)
    os.utime(path, ns=(st.st_atime_ns // 100 * 100, st.st_mtime_ns // 100 * 100))
    return data


def _target(arg: object) -> object:
    """What an out-parameter points at (byref(x), pointer(x) or x itself)."""
    if type(arg).__name__ == "CArgObject":
        return arg._obj
    return arg.contents if isinstance(arg, ctypes._Pointer) else arg


class FakeFunction:
    """Stands for a ctypes function pointer: settable argtypes/restype, checked on each call."""

    def __init__(self, fake: FakeKernel32, name: str) -> None:
        self.name = name
        self.argtypes = None
        self.restype = _UNSET
        self._fake = fake
        self._kinds, self._ret_kind = KINDS[name]

    def declared_safely(self) -> bool:
        return (
            self.argtypes is not None
            and self.restype is not _UNSET
            and len(self.argtypes) == len(self._kinds)
            and all(map(type_is_safe, self._kinds, self.argtypes))
            and type_is_safe(self._ret_kind, self.restype)
        )

    def __call__(self, *args: object) -> object:
        assert self.declared_safely(), f"{self.name}: argtypes/restype missing or not 64-bit safe"
        assert len(args) == len(self._kinds), f"{self.name}: {len(args)} arguments"
        kinds = self._kinds
        values = [self._convert(*each) for each in zip(kinds, self.argtypes, args, strict=True)]
        fake = self._fake
        logged = ("<out>" if k == "out" else v for k, v in zip(kinds, values, strict=True))
        fake.calls.append((self.name, tuple(logged)))
        plan = fake.failures.get(self.name)
        if plan and plan[0] > 0:
            plan[0] -= 1
            fake.last_error = plan[1]
            result = plan[2] if plan[2] is not _UNSET else FAILED.get(self.name, 0)
        else:
            result = getattr(fake, "_" + self.name)(*values)
        if fake.observer is not None:
            fake.observer(self.name, values, result)
        return None if self.restype is None else self.restype(result).value  # as ctypes does

    def _convert(self, kind: str, t: type, arg: object) -> object:
        if kind == "out":
            return _target(arg)
        if kind == "wstr":
            assert arg is None or type(arg) is str, f"{self.name}: {arg!r} is not a str"
            return arg
        if kind == "dword":
            assert isinstance(arg, int) and 0 <= arg <= 0xFFFFFFFF, f"{self.name}: DWORD {arg!r}"
        if kind == "enum":
            assert isinstance(arg, int) and -(2**31) <= arg < 2**31, f"{self.name}: enum {arg!r}"
        assert arg is None or isinstance(arg, int), f"{self.name}: {arg!r} is not an int"
        return t(arg).value  # what the declared type lets through


class FakeKernel32(FileRules):
    """The kernel32 surface WindowsFileMapper uses, over real files and real memory."""

    def __init__(self, granularity: int = GRANULARITY) -> None:
        self.granularity = granularity
        self.calls: list[tuple[str, tuple]] = []
        self.last_error = 0
        self.handles: dict[int, FakeFile | FakeMapping] = {}
        self.views: dict[int, mmap.mmap] = {}
        self.unmapped: list[mmap.mmap] = []  # kept readable: a use after unmap reads stale data
        self.failures: dict[str, list] = {}
        self.ids: dict[str, tuple[int, int, int]] = {}  # path -> (serial64, id128, index64)
        self.view_keys: dict[int, tuple[int, int]] = {}  # view address -> which file
        #: Called after each call as (name, converted arguments, result): the differential
        #: executor reads outcomes (bytes read, sizes, ids) there, as the C probe does.
        self.observer: Callable[[str, list, object], None] | None = None
        self._next_handle = HANDLE_BASE
        self.functions = {name: FakeFunction(self, name) for name in KINDS}

    def __getattr__(self, name: str) -> FakeFunction:  # the same object each time, like ctypes
        functions = self.__dict__.get("functions", {})
        if name not in functions:
            raise AttributeError(f"function '{name}' not found")
        return functions[name]

    def get_last_error(self) -> int:
        self.calls.append(("get_last_error", ()))
        return self.last_error

    def fail(self, api: str, code: int, *, times: int = 1, result: object = _UNSET) -> None:
        """The next ``times`` calls of ``api`` fail with ``code`` as the last error."""
        self.failures[api] = [times, code, result]

    def names(self) -> list[str]:
        return [name for name, _ in self.calls]

    def args(self, api: str) -> list[tuple]:
        return [args for name, args in self.calls if name == api]

    def assert_error_read_first(self, api: str) -> None:
        """The last failing ``api`` call is followed at once by get_last_error, before any
        other kernel32 call (CloseHandle would clobber the error)."""
        names = self.names()
        i = max(j for j, name in enumerate(names) if name == api)
        assert names[i + 1] == "get_last_error", names[i:]

    def assert_all_closed(self) -> None:
        assert not self.handles, f"open handles: {self.handles}"
        assert not self.views, f"mapped views: {list(self.views)}"

    def _handle(self, obj: FakeFile | FakeMapping) -> int:
        self._next_handle += 4
        self.handles[self._next_handle] = obj
        return self._next_handle

    def _get(self, handle: int, kind: type) -> FakeFile | FakeMapping | None:
        obj = self.handles.get(handle)
        if not isinstance(obj, kind):
            self.last_error = 6  # ERROR_INVALID_HANDLE
            return None
        return obj

    # -- the APIs ---------------------------------------------------------------------------
    def _GetSystemInfo(self, info: win.SYSTEM_INFO) -> None:
        info.dwPageSize = 4096
        info.dwAllocationGranularity = self.granularity

    def _GetFileSizeEx(self, handle, size) -> int:
        file = self._get(handle, FakeFile)
        if file is None:
            return 0
        size.value = os.fstat(file.fd).st_size
        return 1

    def _ids(self, file: FakeFile) -> tuple[int, int, int]:
        st = os.fstat(file.fd)
        return self.ids.get(file.path, (st.st_dev, st.st_ino, st.st_ino & 0xFFFFFFFFFFFFFFFF))

    def _GetFileInformationByHandle(self, handle, info) -> int:
        file = self._get(handle, FakeFile)
        if file is None:
            return 0
        st = os.fstat(file.fd)
        serial, _, index = self._ids(file)
        ticks = st.st_mtime_ns // 100 + 116_444_736_000_000_000
        info.ftLastWriteTime.dwHighDateTime, info.ftLastWriteTime.dwLowDateTime = split_u64(ticks)
        info.dwVolumeSerialNumber = serial & 0xFFFFFFFF
        info.nFileIndexHigh, info.nFileIndexLow = split_u64(index)
        info.nFileSizeHigh, info.nFileSizeLow = split_u64(st.st_size)
        return 1

    def _GetFileInformationByHandleEx(self, handle, info_class, address, size) -> int:
        file = self._get(handle, FakeFile)
        if file is None:
            return 0
        if info_class != win.FILE_ID_INFO_CLASS:
            self.last_error = 87  # ERROR_INVALID_PARAMETER: the only class the mapper asks for
            return 0
        if size < ctypes.sizeof(win.FILE_ID_INFO):
            self.last_error = 24  # ERROR_BAD_LENGTH
            return 0
        serial, file_id, _ = self._ids(file)
        info = win.FILE_ID_INFO.from_address(address)
        info.VolumeSerialNumber = serial
        ctypes.memmove(info.FileId, file_id.to_bytes(16, "little"), 16)
        return 1

    def _ReadFile(self, handle, address, n, done, overlapped) -> int:
        file = self._get(handle, FakeFile)
        if file is None:
            return 0
        data = _pread(file.fd, n, (overlapped.OffsetHigh << 32) | overlapped.Offset)
        if not data:
            self.last_error = 38  # ERROR_HANDLE_EOF
            return 0
        ctypes.memmove(address, data, len(data))
        done.value = len(data)
        return 1

    def _CreateFileMappingW(self, handle, security, protect, high, low, name):
        file = self._get(handle, FakeFile)
        if file is None:
            return None
        size = os.fstat(file.fd).st_size
        if size == 0:
            self.last_error = 1006  # ERROR_FILE_INVALID
            return None
        return self._handle(FakeMapping(os.dup(file.fd), size, file.key))

    def _MapViewOfFile(self, handle, access, high, low, length):
        mapping = self._get(handle, FakeMapping)
        if mapping is None:
            return None
        offset = (high << 32) | low
        if offset % self.granularity:
            self.last_error = 1132  # ERROR_MAPPED_ALIGNMENT
            return None
        if offset >= mapping.size:
            self.last_error = 87  # ERROR_INVALID_PARAMETER: no byte of the file there
            return None
        length = length or mapping.size - offset
        if offset + length > mapping.size:
            self.last_error = 5  # ERROR_ACCESS_DENIED: a view past the end of the mapping
            return None
        view = mmap.mmap(mapping.fd, length, access=mmap.ACCESS_READ, offset=offset)
        array = np.frombuffer(view, dtype=np.uint8)
        address = array.__array_interface__["data"][0]
        del array
        self.views[address] = view
        self.view_keys[address] = mapping.key
        return address

    def _UnmapViewOfFile(self, address) -> int:
        view = self.views.pop(address, None)
        self.view_keys.pop(address, None)
        if view is None:
            self.last_error = 487  # ERROR_INVALID_ADDRESS
            return 0
        self.unmapped.append(view)
        return 1

    def _CloseHandle(self, handle) -> int:
        obj = self.handles.pop(handle, None)
        if obj is None:
            self.last_error = 6
            return 0
        os.close(obj.fd)
        self.last_error = 0  # clobbers the error of any earlier failed call
        return 1
