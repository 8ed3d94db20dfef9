"""Shared helpers for the mapper_impl suites (no conftest: plain functions and one fixture).

Test modules import ``stats_guard`` (an autouse fixture) so that every test proves it leaves
mapper_impl's process-wide stats as it found them: no mapping, view or heap buffer leaks.
"""

from __future__ import annotations

import gc
import mmap
import os
import random
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from mapper_impl import stats

REPO_ROOT = Path(__file__).resolve().parents[2]
GRANULARITY = mmap.ALLOCATIONGRANULARITY


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


def fd_count() -> int:
    """Open file descriptors of this process."""
    return len(os.listdir("/proc/self/fd"))


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
