"""The file rules of the fake kernel32 (`_fake_kernel32`): which file a handle names, share
modes between open handles, and what a live view forbids (truncating, replacing, deleting).
A mixin, so the fake's own module stays about the calls and their declarations; every rule
here is checked against Wine's kernel32 by `test_wine_differential.py`."""

from __future__ import annotations

import ctypes
import ntpath
import os
from dataclasses import dataclass

from mapper_impl import _windows as win

GENERIC_WRITE = 0x40000000
DELETE = 0x00010000
INVALID = ctypes.c_void_p(-1).value


@dataclass
class FakeFile:
    fd: int
    path: str
    access: int
    share: int
    key: tuple[int, int] = (0, 0)  # (st_dev, st_ino): which file, whatever the path


@dataclass
class FakeMapping:
    fd: int  # the mapping keeps the file object alive, as on Windows
    size: int
    key: tuple[int, int] = (0, 0)


_READ_WRITE_DELETE = ((0x80000000, 0x1), (GENERIC_WRITE, 0x2), (DELETE, 0x4))


def _shares(held: FakeFile, access: int, share: int) -> bool:
    """Windows' share check between an open handle and a new open: each side's access must be
    allowed by the other side's share mode."""
    return all(
        (not access & bit or held.share & allow) and (not held.access & bit or share & allow)
        for bit, allow in _READ_WRITE_DELETE
    )


def _local(path: str) -> str:
    """The POSIX path a Windows path of the fake names (the long-path form of a POSIX path
    is the prefix + ``ntpath.abspath``)."""
    if path.startswith("\\\\?\\") and os.name != "nt":
        return path[4:].replace("\\", "/")
    return path


class FileRules:
    """CreateFileW and the calls an \"other process\" makes in the scenarios."""

    handles: dict
    view_keys: dict
    last_error: int

    def _too_long(self, path: str) -> bool:
        """An unprefixed path of MAX_PATH UTF-16 units or more: the Win32 parser refuses it."""
        return not path.startswith("\\\\?\\") and win.utf16_units(ntpath.abspath(path)) >= win.MAX_PATH

    def _CreateFileW(self, path, access, share, security, disposition, flags, template):
        if self._too_long(path):
            self.last_error = 3  # ERROR_PATH_NOT_FOUND
            return INVALID
        mode = os.O_RDWR if access & GENERIC_WRITE else os.O_RDONLY
        try:
            fd = os.open(_local(path), mode | getattr(os, "O_BINARY", 0))
        except FileNotFoundError:  # ERROR_PATH_NOT_FOUND when a folder on the way is missing
            self.last_error = 2 if os.path.isdir(os.path.dirname(_local(path))) else 3
            return INVALID
        except PermissionError:
            self.last_error = 5  # ERROR_ACCESS_DENIED
            return INVALID
        st = os.fstat(fd)
        key = (st.st_dev, st.st_ino)
        if not all(_shares(held, access, share) for held in self._open_files(key)):
            os.close(fd)
            self.last_error = 32  # ERROR_SHARING_VIOLATION
            return INVALID
        return self._handle(FakeFile(fd, path, access, share, key))

    def _open_files(self, key: tuple[int, int]) -> list[FakeFile]:
        return [h for h in self.handles.values() if isinstance(h, FakeFile) and h.key == key]

    def _mapped(self, path: str) -> tuple[int, int] | None:
        """The file's key when a live view of it exists, else None (also when it is missing)."""
        try:
            st = os.stat(_local(path))
        except OSError:
            return None
        key = (st.st_dev, st.st_ino)
        return key if key in self.view_keys.values() else None

    def _SetEndOfFile(self, handle) -> int:
        file = self._get(handle, FakeFile)
        if file is None:
            return 0
        if not file.access & GENERIC_WRITE:
            self.last_error = 5
            return 0
        if file.key in self.view_keys.values():
            self.last_error = 1224  # ERROR_USER_MAPPED_FILE
            return 0
        os.ftruncate(file.fd, os.lseek(file.fd, 0, os.SEEK_CUR))
        return 1

    def _MoveFileExW(self, source, target, flags) -> int:
        if self._mapped(target) or self._mapped(source):
            self.last_error = 5  # a mapped file cannot be replaced (or moved away)
            return 0
        if os.path.exists(_local(target)) and not flags & 1:  # MOVEFILE_REPLACE_EXISTING
            self.last_error = 183  # ERROR_ALREADY_EXISTS
            return 0
        os.replace(_local(source), _local(target))
        return 1

    def _DeleteFileW(self, path) -> int:
        key = self._mapped(path)
        if key is not None:
            self.last_error = 5  # ERROR_ACCESS_DENIED: the mapped section cannot be deleted
            return 0
        try:
            st = os.stat(_local(path))
        except FileNotFoundError:
            self.last_error = 2
            return 0
        if not all(_shares(held, DELETE, 7) for held in self._open_files((st.st_dev, st.st_ino))):
            self.last_error = 32
            return 0
        os.unlink(_local(path))
        return 1
