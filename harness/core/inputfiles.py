"""Reading a file the user or a model names: regular files only, bounded (docs/running.md), content never quoted."""

from __future__ import annotations

import io
import json
import os
import re
import stat
from pathlib import Path
from typing import Any

from harness.core.errors import InputError

MiB = 1024**2
GATES_FILE_MAX_BYTES = 1 * MiB
JSON_MAX_BYTES = 16 * MiB
JSON_MAX_DEPTH = 200
NPY_MAX_BYTES = 2 * 1024 * MiB
ONNX_MAX_BYTES = 2 * 1024 * MiB
HISTORY_MAX_BYTES = 64 * MiB
HISTORY_MAX_ROWS = 200_000


def _where(label: str, path: Path | str) -> str:
    return f"{label} {path}".strip()


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def check_regular(path: Path | str, label: str, max_bytes: int | None = None) -> os.stat_result:
    """The ``stat`` of ``path`` if it is a regular file within ``max_bytes`` (stat never opens a FIFO)."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise InputError(f"{_where(label, path)}: no such file") from None
    except OSError as err:
        raise InputError(f"{_where(label, path)}: {err.strerror or err}") from None
    _check_stat(st, path, label, max_bytes)
    return st


def _check_stat(st: os.stat_result, path: Path | str, label: str, max_bytes: int | None) -> None:
    if not stat.S_ISREG(st.st_mode):
        raise InputError(f"{_where(label, path)}: {_kind(st.st_mode)}, not a regular file")
    if max_bytes is not None and st.st_size > max_bytes:
        raise InputError(f"{_where(label, path)}: {st.st_size} bytes, more than the {max_bytes} bytes allowed for it")


def open_regular(path: Path | str, label: str, max_bytes: int | None = None):
    """A binary file object over a regular file of at most ``max_bytes``, opened without blocking."""
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        raise InputError(f"{_where(label, path)}: no such file") from None
    except OSError as err:
        raise InputError(f"{_where(label, path)}: {err.strerror or err}") from None
    try:
        _check_stat(os.fstat(fd), path, label, max_bytes)
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_bytes_bounded(path: Path | str, label: str, max_bytes: int) -> bytes:
    """The whole content of a regular file, read no further than ``max_bytes``."""
    with open_regular(path, label, max_bytes) as handle:
        try:
            data = handle.read(max_bytes + 1)
        except OSError as err:
            raise InputError(f"{_where(label, path)}: {err.strerror or err}") from None
    if len(data) > max_bytes:
        raise InputError(f"{_where(label, path)}: grew past the {max_bytes} bytes allowed for it while being read")
    return data


def read_text_bounded(path: Path | str, label: str, max_bytes: int) -> str:
    """`read_bytes_bounded` as UTF-8 (BOM allowed); InputError for other bytes or a NUL."""
    data = read_bytes_bounded(path, label, max_bytes)
    if b"\0" in data:
        raise InputError(f"{_where(label, path)}: not a text file (it holds NUL bytes)")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise InputError(f"{_where(label, path)}: not a UTF-8 text file") from None


class _CappedRaw(io.RawIOBase):
    """A regular file read through a cap: past ``max_bytes`` or at a NUL byte, InputError."""

    def __init__(self, handle: Any, where: str, max_bytes: int) -> None:
        self._handle, self._where, self._max, self._left = handle, where, max_bytes, max_bytes

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        count = self._handle.readinto(buffer)
        if count:
            self._left -= count
            if self._left < 0:
                raise InputError(f"{self._where}: more than the {self._max} bytes allowed for it; not read further")
            if b"\0" in bytes(memoryview(buffer)[:count]):
                raise InputError(f"{self._where}: not a text file (it holds NUL bytes)")
        return count

    def close(self) -> None:
        self._handle.close()
        super().close()


def open_text_capped(path: Path | str, label: str, max_bytes: int) -> io.TextIOWrapper:
    """A streamed UTF-8 text handle (``newline=""``) capped at ``max_bytes``; a NUL is an InputError."""
    handle = open_regular(path, label, max_bytes)
    raw = _CappedRaw(handle, _where(label, path), max_bytes)
    return io.TextIOWrapper(io.BufferedReader(raw), encoding="utf-8-sig", newline="")


def parse_json_bounded(text: str, where: str, max_depth: int = JSON_MAX_DEPTH, *, allow_nan: bool = True) -> Any:
    """``json.loads`` with a nesting bound checked first; InputError naming ``where`` (NaN unless allowed)."""
    if json_nesting(text) > max_depth:
        raise InputError(f"{where}: nested more than {max_depth} levels deep")

    def no_constant(name: str) -> Any:
        raise InputError(f"{where}: {name} is not a JSON number")

    try:
        return json.loads(text) if allow_nan else json.loads(text, parse_constant=no_constant)
    except InputError:
        raise
    except (ValueError, RecursionError) as err:
        raise InputError(f"{where}: not valid JSON ({type(err).__name__})") from None


_JSON_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')  #: A JSON string (escapes included) and a bracket, for `json_nesting`.
_BRACKET = re.compile(r"[\[\]{}]")


def json_nesting(text: str) -> int:
    """The deepest bracket nesting of a JSON text, strings skipped (an upper bound)."""
    depth = deepest = 0
    for char in _BRACKET.findall(_JSON_STRING.sub("", text)):
        if char in "[{":
            depth += 1
            deepest = max(deepest, depth)
        else:
            depth -= 1
    return deepest


def read_json_bounded(path: Path | str, label: str, max_bytes: int = JSON_MAX_BYTES) -> Any:
    """A JSON file read with `read_text_bounded` and parsed with `parse_json_bounded`."""
    return parse_json_bounded(read_text_bounded(path, label, max_bytes), f"{label} {path}")


def load_npy_bounded(path: Path | str, label: str, max_bytes: int = NPY_MAX_BYTES) -> Any:
    """A ``.npy`` array (never pickled objects) whose header declares no more data than the bound and file."""
    import numpy as np
    from numpy.lib import format as npy

    with open_regular(path, label, max_bytes) as handle:
        size = os.fstat(handle.fileno()).st_size
        if size == 0:
            raise InputError(f"{_where(label, path)}: an empty file, not a .npy array")
        magic = handle.read(6)
        if magic.startswith(b"PK"):
            raise InputError(f"{_where(label, path)}: a .npz archive; give one array as a .npy file")
        if magic != b"\x93NUMPY":
            raise InputError(f"{_where(label, path)}: not a .npy file (no NumPy header)")
        handle.seek(0)
        try:
            version = npy.read_magic(handle)
            readers = {(1, 0): npy.read_array_header_1_0, (2, 0): npy.read_array_header_2_0}
            if version not in readers:
                raise ValueError(f"version {version}")
            shape, fortran, dtype = readers[version](handle)
        except (ValueError, OSError, EOFError, SyntaxError) as err:
            raise InputError(f"{_where(label, path)}: not a readable .npy header ({type(err).__name__})") from None
        if dtype.hasobject:
            raise InputError(f"{_where(label, path)}: holds Python objects, which the harness never unpickles")
        count = 1
        for dim in shape:
            count *= int(dim)
        need = count * dtype.itemsize
        have = size - handle.tell()
        if need > max_bytes or need > have:
            raise InputError(
                f"{_where(label, path)}: its header declares {count} elements ({need} bytes) but the file "
                f"holds {have} bytes of data (at most {max_bytes} allowed)"
            )
        try:
            data = np.fromfile(handle, dtype=dtype, count=count)
        except (ValueError, OSError) as err:
            raise InputError(f"{_where(label, path)}: cannot read its data ({type(err).__name__})") from None
    return data.reshape(shape, order="F" if fortran else "C")
