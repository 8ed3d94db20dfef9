"""Caches keyed by content, end to end.

- New external weights beside an unchanged graph are a new entry with a new reference (before:
  the key hashed only the .onnx, so the old weights were measured and called correct).
- A build killed half-way leaves only scratch, which the next run removes (before: a half-built
  entry stayed for good).
- An entry whose files changed since it was built (a corrupt manifest, a model.onnx or a
  weights.bin overwritten with other bytes of the same size, a missing record) is detected and
  rebuilt: every worker then runs correctly (before: a traceback, or every worker failed).
- A corrupt entry in a cache that cannot be changed is one line naming the entry.
"""

from __future__ import annotations

import os
import shutil
import signal
from pathlib import Path

import numpy as np
import pytest
from rel_support import (
    SMALL,
    matmul_model,
    one_line_error,
    run_args,
    run_quick,
    start_harness,
    stop,
    unwritable,
    wait_for,
)

from harness.cache import ENTRY_RECORD

#: One xdist worker runs this module: its module fixtures (a run, a cache, an install) are made
#: once, not once on each worker (docs/testing.md).
pytestmark = pytest.mark.xdist_group("rel_cache")


def _external_model(folder: Path, seed: int) -> Path:
    """y = x @ W with W (64x64 fp32, 16 KiB) in model.data beside model.onnx."""
    w = np.random.default_rng(seed).standard_normal((64, 64)).astype(np.float32)
    return matmul_model(folder / "model.onnx", w, data_file="model.data")


def _run(model_cache, cache: Path, out: Path, *model: str):
    return run_quick(run_args(model=model or SMALL, modes="mapped", cache=cache, out=out), model_cache)


@pytest.fixture(scope="module")
def built_cache(tmp_path_factory, model_cache) -> Path:
    """A cache with the small model built into it by a real run, once for the module: each test
    corrupts a copy (`_copy_of_built`; entries are checked by content, so a copy is as good)."""
    cache = tmp_path_factory.mktemp("built") / "cache"
    first = _run(model_cache, cache, cache.parent / "run")
    assert first.returncode == 0, first.stdout + first.stderr
    return cache


def _copy_of_built(built_cache: Path, cache: Path) -> Path:
    """The built cache copied to ``cache``; returns its one entry."""
    shutil.copytree(built_cache, cache, symlinks=True)
    (entry,) = [p for p in cache.iterdir() if not p.name.startswith(".")]
    return entry


def _rows_ok(out: Path) -> bool:
    from harness.core.schema import ResultRow
    from harness.core.tables import read_rows

    rows = read_rows(out / "results.csv", ResultRow)
    return bool(rows) and all(r.output_ok and not r.error for r in rows)


def test_new_external_weights_beside_the_same_graph_are_a_new_entry(model_cache, tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    model = _external_model(src, seed=1)
    graph_bytes = model.read_bytes()
    cache = tmp_path / "cache"
    first = _run(model_cache, cache, tmp_path / "a", "--model", str(model))
    assert first.returncode == 0, first.stderr
    data = src / "model.data"
    mtime = data.stat().st_mtime_ns
    new_weights = np.random.default_rng(2).standard_normal((64, 64)).astype(np.float32)
    with open(data, "r+b") as handle:  # same graph, other weights in model.data (same size)
        handle.write(new_weights.tobytes())
    assert model.read_bytes() == graph_bytes and data.stat().st_size == 64 * 64 * 4
    os.utime(data, ns=(mtime, mtime))  # even with the old mtime: the edges' hash sees new bytes
    second = _run(model_cache, cache, tmp_path / "b", "--model", str(model))
    assert second.returncode == 0, second.stderr
    entries = sorted(cache.glob("user-model-*"))
    assert len(entries) == 2, entries
    refs = [np.load(e / "reference.npz")["out:y"] for e in entries]
    assert not np.allclose(refs[0], refs[1]), "the reference did not follow the new weights"
    assert _rows_ok(tmp_path / "b")


def test_a_build_killed_half_way_leaves_no_entry_and_is_cleaned_next_time(model_cache, tmp_path):
    cache, out = tmp_path / "cache", tmp_path / "run"
    size = "256MiB"
    proc = start_harness(run_args(model=("--model-size", size), modes="mapped", cache=cache, out=out), model_cache)
    try:

        def building() -> bool:
            return any(p.stat().st_size > 0 for p in cache.glob(".build-*/weights.bin"))

        wait_for(building, 60, "the model build to be writing weights.bin", proc)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate(timeout=15)
    finally:
        stop(proc)
    assert [p.name.startswith(".build-") for p in cache.iterdir()] == [True], "expected only the killed scratch"
    again = _run(model_cache, cache, out, "--model-size", size)
    assert again.returncode == 0, again.stderr
    names = [p.name for p in cache.iterdir()]
    assert not [n for n in names if n.startswith(".build-")], names
    assert len(names) == 1 and (cache / names[0] / ENTRY_RECORD).is_file()
    assert _rows_ok(out)


def _corrupt(entry: Path, how: str) -> None:
    if how == "manifest-garbage":
        (entry / "manifest.json").write_text("{ this is not json")
    elif how == "manifest-wrong-shape":
        (entry / "manifest.json").write_text('{"tensors": 3}')
    elif how == "model-onnx-garbage":
        path = entry / "model.onnx"
        path.write_bytes(os.urandom(path.stat().st_size))
    elif how == "weights-overwritten-mid-file":
        path = entry / "weights.bin"
        with open(path, "r+b") as f:  # same size, new bytes in the middle
            f.seek(path.stat().st_size // 3)
            f.write(os.urandom(1024 * 1024))
    elif how == "reference-missing":
        (entry / "reference.npz").unlink()
    elif how == "record-missing":
        (entry / ENTRY_RECORD).unlink()
    else:
        raise AssertionError(how)


@pytest.mark.parametrize(
    "how",
    [
        "manifest-garbage",
        pytest.param("manifest-wrong-shape", marks=pytest.mark.slow),  # breadth: -m slow
        pytest.param("model-onnx-garbage", marks=pytest.mark.slow),
        "weights-overwritten-mid-file",
        pytest.param("reference-missing", marks=pytest.mark.slow),
        "record-missing",
    ],
)
def test_a_corrupt_entry_is_detected_and_rebuilt(model_cache, built_cache, tmp_path, how):
    cache = tmp_path / "cache"
    entry = _copy_of_built(built_cache, cache)
    _corrupt(entry, how)
    second = _run(model_cache, cache, tmp_path / "b")
    assert second.returncode == 0, second.stdout + second.stderr
    assert "Traceback" not in second.stderr
    assert _rows_ok(tmp_path / "b"), "workers ran on the corrupt entry"
    assert [p.name for p in cache.iterdir()] == [entry.name]


def test_a_corrupt_entry_that_cannot_be_rebuilt_is_one_line_naming_it(model_cache, built_cache, tmp_path):
    cache = tmp_path / "cache"
    entry = _copy_of_built(built_cache, cache)
    _corrupt(entry, "model-onnx-garbage")
    with unwritable(cache):
        proc = _run(model_cache, cache, tmp_path / "b")
    one_line_error(proc, 2, f"model cache entry {entry} is corrupt", "model.onnx changed since the entry was built")
    assert not (tmp_path / "b").exists()
