"""The heap path (upstream's "direct read"): one private buffer per load; every failure is a HeapReadError."""

from __future__ import annotations

import os

from ._common import FileAccessError, HeapReadError, check_file
from ._faults import FaultCursor
from ._stats import track


class HeapBuffer(bytearray):
    """A bytearray that can be weak-referenced, so the stats see when it is really freed."""


def read_into_heap(path: str, faults: FaultCursor | None = None) -> HeapBuffer:
    """Read the whole file into one new private buffer (HeapReadError, or FileCheckError)."""
    if os.name == "nt":  # long paths need the \\?\ form unless the system enables them
        from ._windows import win32_path

        path = win32_path(os.fsdecode(path))
    check_file(path)
    try:
        with open(path, "rb", buffering=0) as f:
            size = os.fstat(f.fileno()).st_size
            if faults is not None:
                faults.before_heap_read()
            try:
                buf = HeapBuffer(size)
            except MemoryError as err:  # no Python frame can free 4 GiB: report, keep context
                raise HeapReadError(f"cannot read {path}: no memory for a {size}-byte copy") from err
            view = memoryview(buf)
            try:
                filled = 0
                while filled < size:
                    n = f.readinto(view[filled:])
                    if not n:
                        raise HeapReadError(f"{path}: file shrank while being read ({filled} of {size} bytes)")
                    filled += n
            finally:
                view.release()
    except PermissionError as err:
        raise FileAccessError(path, "permission denied") from err
    except OSError as err:
        raise HeapReadError(f"cannot read {path}: {err}") from err
    track(buf, "heap_buffers", "heap_bytes", size)
    return buf
