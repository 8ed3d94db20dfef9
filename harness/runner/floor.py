"""The floor under any mapped load: map the weights file(s) read-only and touch nothing.

A worker measures it just before its own load (`harness.runner.worker`), in the same process
and page-cache state, so the bench can show how far the mapped load (mapper_impl + session
creation), ORT's own mapped load (the peer) and the heap path each are from it (issue 32). It
opens, maps and closes each file with nothing else: no identity check, no registration, no
session. The mappings are released at once; no page is read.
"""

from __future__ import annotations

import mmap
import os
import time


def map_floor_s(models: list) -> float | None:
    """Seconds to open and map every model's ``weights.bin`` read-only (None when a model has
    none, e.g. a QNN context binary measured as it is, or a file cannot be mapped)."""
    paths = [m.weights_path for m in models]
    if not paths or not all(p.is_file() for p in paths):
        return None
    maps = []
    try:
        t0 = time.perf_counter()
        for path in paths:
            fd = os.open(path, os.O_RDONLY | getattr(os, "O_BINARY", 0))
            try:
                maps.append(mmap.mmap(fd, 0, access=mmap.ACCESS_READ))
            finally:
                os.close(fd)
        return time.perf_counter() - t0
    except (OSError, ValueError):
        return None
    finally:
        for view in maps:
            view.close()
