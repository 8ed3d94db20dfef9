"""Reading a file the user (or a model) names: regular files only, never more than a stated size.

Why: a path on the command line or in a model may be ``/dev/zero`` (reads forever), a FIFO
(``open`` blocks until a writer comes, forever), a folder or a file of gigabytes. Every input
file is therefore opened with ``O_NONBLOCK`` (a FIFO opens at once instead of hanging), checked
with ``fstat`` on the open descriptor (what is read is what was checked: no swap between a
check and the open), refused unless it is a regular file, and read with a bound. Each kind of
file has its bound, stated in docs/running.md ("Paths a model names, and input files"):

- a gates file: `GATES_FILE_MAX_BYTES` (1 MiB);
- a JSON configuration (``genai_config.json``...): `JSON_MAX_BYTES` (16 MiB), nested at most
  `JSON_MAX_DEPTH` levels;
- an ``--input NAME=FILE.npy`` array: `NPY_MAX_BYTES` (2 GiB), the data its header declares
  present in the file;
- an ONNX file: `ONNX_MAX_BYTES` (2 GiB, protobuf's own limit for one message);
- a ``--history`` CSV: `HISTORY_MAX_BYTES` (256 MiB, about a million runs).

Every refusal is an `InputError` (one line, exit 2) naming the file and the label it was given
under (``--gates-file``, ``--input x``...).
"""

from __future__ import annotations

import json
import os
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
HISTORY_MAX_BYTES = 256 * MiB


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
    """The ``stat`` of ``path`` (links followed) if it is a regular file within ``max_bytes``;
    InputError otherwise. ``stat`` never opens the file, so a FIFO cannot hang here."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise InputError(f"{label} {path}: no such file") from None
    except OSError as err:
        raise InputError(f"{label} {path}: {err.strerror or err}") from None
    _check_stat(st, path, label, max_bytes)
    return st


def _check_stat(st: os.stat_result, path: Path | str, label: str, max_bytes: int | None) -> None:
    if not stat.S_ISREG(st.st_mode):
        raise InputError(f"{label} {path}: {_kind(st.st_mode)}, not a regular file")
    if max_bytes is not None and st.st_size > max_bytes:
        raise InputError(f"{label} {path}: {st.st_size} bytes, more than the {max_bytes} bytes allowed for it")


def open_regular(path: Path | str, label: str, max_bytes: int | None = None):
    """A binary file object over ``path``, opened without blocking and checked with ``fstat``
    to be a regular file of at most ``max_bytes``; InputError otherwise."""
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        raise InputError(f"{label} {path}: no such file") from None
    except OSError as err:
        raise InputError(f"{label} {path}: {err.strerror or err}") from None
    try:
        _check_stat(os.fstat(fd), path, label, max_bytes)
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_bytes_bounded(path: Path | str, label: str, max_bytes: int) -> bytes:
    """The whole content of a regular file of at most ``max_bytes`` (read no further than the
    bound even if the file grows meanwhile)."""
    with open_regular(path, label, max_bytes) as handle:
        try:
            data = handle.read(max_bytes + 1)
        except OSError as err:
            raise InputError(f"{label} {path}: {err.strerror or err}") from None
    if len(data) > max_bytes:
        raise InputError(f"{label} {path}: grew past the {max_bytes} bytes allowed for it while being read")
    return data


def read_text_bounded(path: Path | str, label: str, max_bytes: int) -> str:
    """`read_bytes_bounded` decoded as UTF-8 (a byte-order mark allowed); InputError for other bytes."""
    try:
        return read_bytes_bounded(path, label, max_bytes).decode("utf-8-sig")
    except UnicodeDecodeError:
        raise InputError(f"{label} {path}: not a UTF-8 text file") from None


def parse_json_bounded(text: str, where: str, max_depth: int = JSON_MAX_DEPTH) -> Any:
    """``json.loads`` with a nesting bound (checked before parsing: the parser itself would
    recurse into a RecursionError); InputError naming ``where`` for anything unparseable."""
    if _nesting(text) > max_depth:
        raise InputError(f"{where}: nested more than {max_depth} levels deep")
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as err:
        raise InputError(f"{where}: not valid JSON ({type(err).__name__})") from None


def _nesting(text: str) -> int:
    """The deepest bracket nesting of a JSON text, strings skipped (an upper bound is enough)."""
    depth = deepest = 0
    in_string = escaped = False
    for char in text:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in "]}":
            depth -= 1
    return deepest


def read_json_bounded(path: Path | str, label: str, max_bytes: int = JSON_MAX_BYTES) -> Any:
    """A JSON file read with `read_text_bounded` and parsed with `parse_json_bounded`."""
    return parse_json_bounded(read_text_bounded(path, label, max_bytes), f"{label} {path}")


def load_npy_bounded(path: Path | str, label: str, max_bytes: int = NPY_MAX_BYTES) -> Any:
    """A ``.npy`` array (never pickled objects): the header is read first and must declare
    no more data than the bound and than the file holds; InputError, one line, otherwise
    (an ``.npz`` archive, an empty or cut file, a header of 1e15 elements)."""
    import numpy as np
    from numpy.lib import format as npy

    with open_regular(path, label, max_bytes) as handle:
        size = os.fstat(handle.fileno()).st_size
        if size == 0:
            raise InputError(f"{label} {path}: an empty file, not a .npy array")
        magic = handle.read(6)
        if magic.startswith(b"PK"):
            raise InputError(f"{label} {path}: a .npz archive; give one array as a .npy file")
        if magic != b"\x93NUMPY":
            raise InputError(f"{label} {path}: not a .npy file (no NumPy header)")
        handle.seek(0)
        try:
            version = npy.read_magic(handle)
            readers = {(1, 0): npy.read_array_header_1_0, (2, 0): npy.read_array_header_2_0}
            if version not in readers:
                raise ValueError(f"version {version}")
            shape, fortran, dtype = readers[version](handle)
        except (ValueError, OSError, EOFError, SyntaxError) as err:
            raise InputError(f"{label} {path}: not a readable .npy header ({type(err).__name__})") from None
        if dtype.hasobject:
            raise InputError(f"{label} {path}: holds Python objects, which the harness never unpickles")
        count = 1
        for dim in shape:
            count *= int(dim)
        need = count * dtype.itemsize
        have = size - handle.tell()
        if need > max_bytes or need > have:
            raise InputError(
                f"{label} {path}: its header declares {count} elements ({need} bytes) but the file "
                f"holds {have} bytes of data (at most {max_bytes} allowed)"
            )
        try:
            data = np.fromfile(handle, dtype=dtype, count=count)
        except (ValueError, OSError) as err:
            raise InputError(f"{label} {path}: cannot read its data ({type(err).__name__})") from None
    return data.reshape(shape, order="F" if fortran else "C")
