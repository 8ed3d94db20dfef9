"""``python -m harness cache info|clear``: where the model cache is, what it holds, emptying it."""

from __future__ import annotations

import os

from harness.cache import SCRATCH_PREFIX, cache_entries, clear_cache


def _entry(folder, name, size):
    path = folder / name
    path.mkdir(parents=True)
    (path / "weights.bin").write_bytes(b"\0" * size)
    (path / "model.onnx").write_bytes(b"x" * 10)
    return path


def test_info_and_clear(tmp_path, run_harness):
    cache = tmp_path / "cache"
    _entry(cache, "matmul-chain-a", 3 * 1024 * 1024)
    _entry(cache, "qdq-chain-b", 1024 * 1024)
    live = cache / f"{SCRATCH_PREFIX}building-{os.getpid()}-abcd"  # a build in progress (our pid)
    live.mkdir()

    assert [e.path.name for e in cache_entries(cache)] == ["matmul-chain-a", "qdq-chain-b"]
    info = run_harness("cache", "info", "--cache-dir", str(cache))
    assert info.returncode == 0
    assert f"cache: {cache} (2 entries, 4.0 MiB)" in info.stdout
    assert "3.0 MiB" in info.stdout and "matmul-chain-a" in info.stdout and SCRATCH_PREFIX not in info.stdout

    cleared = run_harness("cache", "clear", "--cache-dir", str(cache))
    assert cleared.returncode == 0, cleared.stdout + cleared.stderr
    assert "removed 2 entries (4.0 MiB)" in cleared.stdout
    assert sorted(p.name for p in cache.iterdir()) == [live.name]  # the live build is left alone


def test_clear_keeps_a_build_in_progress_and_removes_dead_scratch(tmp_path):
    cache = tmp_path / "cache"
    _entry(cache, "entry", 100)
    dead = cache / f"{SCRATCH_PREFIX}entry-999999999-dead"  # no such pid: left by a killed build
    dead.mkdir()
    removed, kept = clear_cache(cache)
    assert [e.path.name for e in removed] == ["entry"] and kept == []
    assert not dead.exists()


def test_info_on_a_missing_cache_and_the_environment_variable(tmp_path, run_harness):
    missing = tmp_path / "nowhere"
    info = run_harness("cache", "info", env={"HARNESS_CACHE_DIR": str(missing)})
    assert info.returncode == 0 and f"cache: {missing} (0 entries, 0 B) - does not exist yet" in info.stdout
    assert run_harness("cache", "bogus").returncode == 2
