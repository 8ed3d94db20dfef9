"""Shared helpers for the mapper_impl suites (no conftest: plain functions and one fixture).

Test modules import ``stats_guard`` (an autouse fixture) so that every test proves it leaves
mapper_impl's process-wide stats as it found them: no mapping, view or heap buffer leaks.

The suites run on Linux and on Windows (the windows-mapper workflow, real kernel32): what is
POSIX-only is skipped with its reason, what legitimately differs (Windows refuses to replace,
rewrite, truncate or delete a mapped file) is a branch on ``WINDOWS``.
"""

from __future__ import annotations

import gc
import os
import random
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from mapper_impl import create_mapper, stats

REPO_ROOT = Path(__file__).resolve().parents[2]
WINDOWS = sys.platform == "win32"
#: What region views align to with the platform's mapper: the page size on POSIX, 64 KiB
#: (GetSystemInfo's dwAllocationGranularity) on Windows.
GRANULARITY = create_mapper().allocation_granularity

#: Win32 errors meaning "in use, refused": access denied, sharing violation, user-mapped file.
ERROR_ACCESS_DENIED = 5
ERROR_SHARING_VIOLATION = 32
ERROR_USER_MAPPED_FILE = 1224
REFUSED_WINERRORS = (ERROR_ACCESS_DENIED, ERROR_SHARING_VIOLATION, ERROR_USER_MAPPED_FILE)


def make_bytes(size: int, seed: int = 0) -> bytes:
    """Deterministic pseudo-random content (different seeds give different bytes)."""
    return random.Random(seed).randbytes(size)


def write_file(path: Path, size: int, seed: int = 0) -> bytes:
    """Write ``size`` deterministic bytes to ``path`` and return them."""
    data = make_bytes(size, seed)
    path.write_bytes(data)
    return data


def settled_stats():
    """Stats with cyclic garbage collected (only when something is live: a full collection
    per test would dominate the suite's run time)."""
    snapshot = stats()
    if not snapshot.is_clean():
        gc.collect()
        snapshot = stats()
    return snapshot


def assert_clean() -> None:
    """Nothing mapped, no views, no heap buffers, no deferred unmaps."""
    snapshot = settled_stats()
    assert snapshot.is_clean(), snapshot


def open_handle_count() -> int:
    """Open file descriptors (POSIX) or kernel handles (Windows) of this process.

    On Windows every Python lock of CPython < 3.13 owns a semaphore handle, and a lock caught
    in a reference cycle (an exception's traceback holding its own frame) lives until the
    cyclic GC runs: collect first, so only handles that are really leaked are counted."""
    if WINDOWS:
        import psutil

        gc.collect()
        return psutil.Process().num_handles()
    if os.path.isdir("/proc/self/fd"):
        return len(os.listdir("/proc/self/fd"))
    import psutil

    return psutil.Process().num_fds()


def symlink_or_skip(link: Path, target: Path) -> None:
    """``link`` -> ``target``; on Windows, skip the test when symlinks cannot be created
    (they need SeCreateSymbolicLinkPrivilege or Developer Mode). Elsewhere a failure fails."""
    try:
        link.symlink_to(target)
    except (OSError, NotImplementedError) as err:
        if not WINDOWS:
            raise
        pytest.skip(f"cannot create a symlink on this Windows host ({err})")


def is_refused_while_mapped(err: BaseException) -> bool:
    """Is ``err`` Windows refusing a write/replace/truncate/delete because the file is open
    with FILE_SHARE_READ only and mapped? (PermissionError for access denied and sharing
    violations; ERROR_USER_MAPPED_FILE maps to a plain OSError.)"""
    return isinstance(err, OSError) and (
        isinstance(err, PermissionError) or getattr(err, "winerror", None) in REFUSED_WINERRORS
    )


def assert_refused_while_mapped(action, *args) -> OSError:
    """Windows: ``action(*args)`` (os.replace, os.truncate, open for writing, os.remove on a
    mapped file) must fail because the mapping keeps writers out; returns the error."""
    with pytest.raises(OSError) as info:
        action(*args)
    assert is_refused_while_mapped(info.value), repr(info.value)
    return info.value


@pytest.fixture(autouse=True)
def stats_guard():
    """Every test must leave mapper_impl's stats no higher than it found them (lower is fine:
    a failed earlier test's objects may be freed meanwhile), so each leak fails its own test."""
    before = settled_stats().to_dict()
    yield
    after = settled_stats().to_dict()
    leaked = {key: (before[key], value) for key, value in after.items() if value > before[key]}
    assert not leaked, f"mapper stats leaked (before, after): {leaked}"


def child_env() -> dict:
    """Environment for a child interpreter that can import mapper_impl."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH")) if p)
    env.pop("PYTHONFAULTHANDLER", None)
    return env


def child_command(code: str) -> list[str]:
    return [sys.executable, "-c", textwrap.dedent(code)]


def run_child(code: str, *args: str, timeout: float = 30) -> subprocess.CompletedProcess:
    """Run ``code`` in a fresh interpreter (argv[1:] = args) and capture its output."""
    return subprocess.run(
        [*child_command(code), *args],
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
