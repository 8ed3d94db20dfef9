"""``python -m harness cache info|clear``: where the model cache is, what it holds, emptying it."""

from __future__ import annotations

import os

from harness.cache import SCRATCH_PREFIX, cache_entries, clear_cache, record_entry


def _entry(folder, name, size):
    """An entry as `cached_build` publishes it: its files and their record."""
    path = folder / name
    path.mkdir(parents=True)
    (path / "weights.bin").write_bytes(b"\0" * size)
    (path / "model.onnx").write_bytes(b"x" * 10)
    record_entry(path)
    return path


def test_info_and_clear(tmp_path, run_harness):
    cache = tmp_path / "cache"
    _entry(cache, "matmul-chain-a", 3 * 1024 * 1024)
    _entry(cache, "qdq-chain-b", 1024 * 1024)
    live = cache / f"{SCRATCH_PREFIX}building-{os.getpid()}-abcd1234"  # a build in progress (our pid)
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
    dead = cache / f"{SCRATCH_PREFIX}entry-999999999-deadbeef"  # no such pid: left by a killed build
    dead.mkdir()
    removed, kept = clear_cache(cache)
    assert [e.path.name for e in removed] == ["entry"] and kept == []
    assert not dead.exists()


def test_info_on_a_missing_cache_and_the_environment_variable(tmp_path, run_harness):
    missing = tmp_path / "nowhere"
    info = run_harness("cache", "info", env={"HARNESS_CACHE_DIR": str(missing)})
    assert info.returncode == 0 and f"cache: {missing} (0 entries, 0 B) - does not exist yet" in info.stdout
    assert run_harness("cache", "bogus").returncode == 2


def test_a_cache_folder_set_to_a_home_folder_by_mistake_loses_nothing(tmp_path, run_harness):
    """`--cache-dir ~` (or HARNESS_CACHE_DIR=$HOME): only entries of this cache (folders holding
    the record a build writes), our scratch and the QNN children's logs are listed or cleared.
    Before, every folder there was an "entry": `cache clear` deleted .ssh and Documents, and
    any `.build-*` folder counted as a killed build's scratch."""
    home = tmp_path / "home"
    for name in (".ssh", "Documents", ".build-tools", "logs"):
        (home / name).mkdir(parents=True)
        (home / name / "keep.txt").write_text("the user's\n")
    (home / "logs" / "app-compile.log").write_text("the user's own log\n")
    _entry(home, "matmul-chain-a", 1024)
    ours = home / "logs" / "model_em0-htp-0123456789abcdef-compile.log"
    ours.write_text("the QNN compiler's log\n")
    info = run_harness("cache", "info", "--cache-dir", str(home))
    assert info.returncode == 0 and f"cache: {home} (1 entry," in info.stdout, info.stdout
    assert ".ssh" not in info.stdout and "Documents" not in info.stdout
    cleared = run_harness("cache", "clear", "--cache-dir", str(home))
    assert cleared.returncode == 0 and "removed 1 entry" in cleared.stdout, cleared.stdout + cleared.stderr
    assert not (home / "matmul-chain-a").exists() and not ours.exists()
    for name in (".ssh", "Documents", ".build-tools", "logs"):
        assert (home / name / "keep.txt").read_text() == "the user's\n", name
    assert (home / "logs" / "app-compile.log").exists()
