"""Files and folders, end to end: a weights file truncated in the model cache or in the
middle of a run, a read-only model cache, unusable --out / --cache-dir paths, and paths with
spaces and non-ASCII characters. Expected: a clear one-line refusal (exit 2) for what the
user can fix, a clean per-worker failure for what happens mid-run, never a hang.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from rel_support import (
    assert_no_survivors,
    end_hung_worker,
    first_group_waiting,
    matmul_model,
    run_args,
    run_quick,
)

from harness.core.schema import ResultRow
from harness.core.tables import read_rows


def _tiny_model(path: Path) -> Path:
    """y = x @ W with a 4 KiB fp32 W: the smallest model the harness externalises."""
    import numpy as np

    return matmul_model(path, np.random.default_rng(3).standard_normal((32, 32)).astype(np.float32))


def _tree(folder: Path) -> dict[str, tuple[int, int, int]]:
    """Every path under ``folder`` with its mode, size and mtime: what "nothing written" means."""
    return {
        str(p.relative_to(folder)): (p.stat().st_mode, p.stat().st_size, p.stat().st_mtime_ns)
        for p in sorted(folder.rglob("*"))
    }


def test_weights_truncated_in_the_model_cache_is_rebuilt(run_harness, tmp_path):
    """A cached model whose weights.bin was cut short (disk full, an interrupted copy) fails
    the entry's own check: the cache rebuilds it instead of workers reading past its end."""
    model, cache = _tiny_model(tmp_path / "tiny.onnx"), tmp_path / "cache"
    args = run_args(model=("--model", str(model)), modes="mapped", cache=cache)
    run_harness(*args, out=tmp_path / "first", check_exit=0)
    (weights,) = cache.glob("user-tiny-*/weights.bin")
    size = weights.stat().st_size
    os.truncate(weights, size // 2)
    run_harness(*args, out=tmp_path / "second", check_exit=0)
    (rebuilt,) = cache.glob("user-tiny-*/weights.bin")
    assert rebuilt.stat().st_size == size
    assert not list(cache.glob(".build-*"))  # no scratch left behind


def test_weights_truncated_during_a_run_fail_cleanly(model_cache, tmp_path):
    """The weights file is cut in half after the first group's workers loaded it: the next
    group's workers fail with a clear error (no SIGBUS, no hang), the run completes."""
    out, cache = tmp_path / "run", tmp_path / "cache"  # a private cache: this test damages it
    # worker 0 hangs until the test kills it, so worker 1 of the first (mapped) group is ready
    # and waiting: that is the moment between "prepared" and the next group's load.
    with first_group_waiting(out, model_cache, modes="mapped,heap", cache=cache) as proc:
        (weights,) = cache.glob("matmul-chain-*/weights.bin")
        os.truncate(weights, weights.stat().st_size // 2)
        for group in ("cpu-mapped-n2-r0", "cpu-heap-n2-r0"):  # each group ends at this event
            end_hung_worker(out, group, proc=proc)
        stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 1, stdout + stderr
    assert "Traceback" not in stderr
    rows = {(r.mode, r.worker): r for r in read_rows(out / "results.csv", ResultRow)}
    assert "killed by SIGKILL" in rows["mapped", 0].error and "killed by SIGKILL" in rows["heap", 0].error
    # its first inference was right, but the weights it mapped were cut while its group ran:
    # the group's seal fails it (issue 28)
    assert rows["mapped", 1].output_ok
    assert "weights changed during the group: weights.bin changed size" in rows["mapped", 1].error
    late = rows["heap", 1]
    assert late.exit_code == 1 and not late.output_ok
    assert "the model needs" in late.error and "truncated" in late.error, late.error
    assert_no_survivors(out)


def test_disk_full_while_building_the_model_is_refused(model_cache, tmp_path):
    """Writing the model cache fails half-way (simulated with a 1 MiB file-size limit, the
    EFBIG a quota or a full disk gives): one line naming the cache, no half model left."""
    import resource
    import signal

    def small_file_limit() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG instead of being killed
        resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, 1 << 20))

    cache, out = tmp_path / "cache", tmp_path / "run"
    proc = run_quick(run_args(report=True, cache=cache, out=out), model_cache, preexec=small_file_limit, timeout=120)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and f"model cache {cache}: cannot write the model" in lines[0], proc.stderr
    assert list(cache.iterdir()) == [], "a half-built model was left in the cache"
    assert not out.exists()


def test_read_only_model_cache_after_the_model_was_built(run_harness, tmp_path):
    """A model cache made read-only once the model is in it (a shared or packaged cache):
    the run works and writes nothing there. (As root the mode bits are not enforced, so the
    test also proves nothing in the cache changed.)"""
    cache = tmp_path / "cache"
    args = run_args(modes="mapped", cache=cache)
    run_harness(*args, out=tmp_path / "build", check_exit=0)
    for path in [cache, *cache.rglob("*")]:
        path.chmod(0o555 if path.is_dir() else 0o444)
    try:
        before = _tree(cache)
        outcome = run_harness(*args, out=tmp_path / "run", check_exit=0)
        assert all(r.output_ok and r.path_taken == "mapped" for r in outcome.results())
        assert _tree(cache) == before
    finally:
        for path in [cache, *cache.rglob("*")]:
            path.chmod(stat.S_IRWXU if path.is_dir() else 0o644)


def test_paths_with_spaces_and_non_ascii_characters(run_harness, tmp_path):
    """--out and --cache-dir with spaces, accents, CJK and an emoji: the run, its CSVs and its
    HTML report all land where asked."""
    out = tmp_path / "résultats du jour" / "run ü 実験 🚀"
    cache = tmp_path / "cache ñ 模型"
    outcome = run_harness(*run_args(report=True, cache=cache), out=out, check_exit=0)
    rows = outcome.results()
    assert sorted(r.path_taken for r in rows) == ["heap", "mapped"]
    assert all(r.output_ok for r in rows)
    assert (out / "report.html").is_file() and (out / "summary.csv").is_file()
    assert list(cache.glob("matmul-chain-*/weights.bin"))


@pytest.mark.parametrize(
    ("where", "expected"),
    [
        ("out-is-a-file", "is a file, not a folder"),
        ("out-under-a-file", "is a file, not a folder"),
        ("cache-under-a-file", "choose another with --cache-dir"),
        ("history-under-a-file", "is a file, not a folder"),
        ("history-is-a-folder", "is a folder, not a file"),
    ],
)
def test_unusable_out_cache_or_history_path_is_one_line_exit_2(run_harness, tmp_path, where, expected):
    """Refused before the model is built or any worker starts, never after a whole run."""
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    out = {"out-is-a-file": blocker, "out-under-a-file": blocker / "run"}.get(where, tmp_path / "run")
    cache = blocker / "cache" if where == "cache-under-a-file" else tmp_path / "cache"
    history = {
        "history-under-a-file": ["--history", str(blocker / "history.csv")],
        "history-is-a-folder": ["--history", str(tmp_path)],
    }.get(where, [])
    outcome = run_harness(*run_args(*history, report=True, cache=cache), out=out)
    assert outcome.returncode == 2, outcome.stderr
    lines = outcome.stderr.strip().splitlines()
    assert len(lines) == 1 and expected in lines[0] and "Traceback" not in outcome.stderr, outcome.stderr
    assert blocker.read_text() == "not a folder"
    assert not (tmp_path / "run").exists()
