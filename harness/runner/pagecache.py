"""The page cache of the weights files: warm, evict (``posix_fadvise``) and verify (``mincore``)."""

from __future__ import annotations

import ctypes
import mmap
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from harness.core.errors import InputError
from harness.core.vocab import PageCache

COLD_RESIDENT_SHARE = 0.01  #: A group counts as cold when at most this share of its weights stayed resident.
_PROT_READ = 0x1
_MAP_SHARED = 0x01


@dataclass
class CacheState:
    state: PageCache
    resident_bytes: int | None  # weights bytes in the page cache (None: cannot tell on this OS)
    total_bytes: int
    note: str = ""


def check_cold_supported() -> None:
    """InputError when this OS cannot evict a file's pages without privileges."""
    if sys.platform == "win32":
        raise InputError(
            "--page-cache cold: Windows drops a file's cached pages only with administrator rights "
            "(SeProfileSingleProcessPrivilege); run with --page-cache warm"
        )
    if not hasattr(os, "posix_fadvise"):
        raise InputError(
            f"--page-cache cold: {sys.platform} has no posix_fadvise to evict a file's pages; "
            "run with --page-cache warm"
        )


def warm(path: Path) -> None:
    """Read a file once so both modes start from a warm page cache."""
    with open(path, "rb", buffering=0) as f:
        while f.read(16 * 1024**2):
            pass


def evict(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)  # dirty pages (a model just written) are not dropped
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def _libc():
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_ubyte)]
    return libc


def resident_bytes(path: Path) -> int | None:
    """Bytes of ``path`` in the page cache (``mincore``); None where that cannot be asked."""
    if not sys.platform.startswith(("linux", "darwin", "freebsd")):
        return None
    size = path.stat().st_size
    if size == 0:
        return 0
    page = mmap.PAGESIZE
    try:
        libc = _libc()
        fd = os.open(path, os.O_RDONLY)
        try:
            addr = libc.mmap(None, size, _PROT_READ, _MAP_SHARED, fd, 0)
        finally:
            os.close(fd)
        if addr in (None, ctypes.c_void_p(-1).value):
            return None
        try:
            pages = (size + page - 1) // page
            vec = (ctypes.c_ubyte * pages)()
            if libc.mincore(addr, size, vec) != 0:
                return None
            resident = sum(1 for b in bytes(vec) if b & 1)
        finally:
            libc.munmap(addr, size)
    except (OSError, AttributeError):
        return None
    return min(size, resident * page)


def measure(paths: list[Path], state: str) -> CacheState:
    total = sum(p.stat().st_size for p in paths)
    counts = [resident_bytes(p) for p in paths]
    resident = None if any(c is None for c in counts) else sum(c for c in counts if c is not None)
    return CacheState(state, resident, total)


def make_cold(paths: list[Path]) -> CacheState:
    """Evict every file's pages, then check; "cold-unverified" (with why) when pages stayed."""
    for path in paths:
        evict(path)
    result = measure(paths, PageCache.COLD)
    if result.resident_bytes is None:
        result.state, result.note = PageCache.COLD_UNVERIFIED, "this OS cannot report which pages are cached (mincore)"
    elif result.resident_bytes > COLD_RESIDENT_SHARE * max(result.total_bytes, 1):
        share = result.resident_bytes / max(result.total_bytes, 1)
        result.state = PageCache.COLD_UNVERIFIED
        result.note = (
            f"{share:.0%} of the weights stayed in the page cache after eviction (another process maps or reads them)"
        )
    return result
