"""The floor under any mapped load: map the weights file(s) read-only and touch nothing (measured per worker)."""

from __future__ import annotations

import mmap
import os
import time


def map_floor_s(models: list) -> float | None:
    """Seconds to open and map every model's ``weights.bin`` (None when one has none or cannot be mapped)."""
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
