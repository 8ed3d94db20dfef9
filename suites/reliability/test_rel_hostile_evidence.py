"""Evidence that is not evidence (issue 28, class 6): a check that passes whatever the weights is
no check.

- NaN or infinite inputs make every output NaN whatever the weights: `--input` with them is
  refused before any work, and a reference with them (or with an output NaN everywhere) met in
  a worker reads "inconclusive", never a pass (before: NaN compared equal to NaN and passed).
- Weights overwritten in place while a group runs: the group's seal (identity, size, times, a
  sampled content hash) is checked at its end, and every worker of the group fails saying so
  (before: the first inference had been checked, nothing at the end, and the run passed).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import pytest
from rel_support import (
    end_hung_worker,
    first_group_waiting,
    matmul_model,
    one_line_error,
    run_args,
    run_quick,
)

from harness.cache import ENTRY_RECORD, record_entry

# Not `memory`: these tests judge verdicts and error texts, never a memory figure.


@pytest.mark.parametrize("value", [np.nan, np.inf])
def test_an_input_of_nan_or_inf_is_refused_before_any_work(tmp_path, model_cache, value):
    model = matmul_model(tmp_path / "m.onnx", np.ones((64, 64), dtype=np.float32))
    feed = np.ones((1, 64), dtype=np.float32)
    feed[0, 3] = value
    np.save(tmp_path / "x.npy", feed)
    cache, out = tmp_path / "cache", tmp_path / "run"
    args = run_args("--input", f"x={tmp_path / 'x.npy'}", model=("--model", str(model)), cache=cache, out=out)
    proc = run_quick(args, model_cache, timeout=120)
    one_line_error(proc, 2, "--input x holds NaN or infinity", "could not be checked")
    assert not out.exists() and not cache.exists()


def test_a_reference_of_nan_in_the_cache_is_inconclusive_never_a_pass(tmp_path, model_cache):
    """A cache entry whose reference was rewritten (input and output NaN, its record made to
    match) by someone who can write to the cache: every worker's check is "inconclusive"."""
    cache = tmp_path / "cache"
    first = run_quick(run_args(modes="mapped", cache=cache, out=tmp_path / "a"), model_cache)
    assert first.returncode == 0, first.stderr
    (entry,) = [p for p in cache.iterdir() if not p.name.startswith(".") and p.name != "logs"]
    with np.load(entry / "reference.npz") as data:
        arrays = {k: np.full_like(data[k], np.nan) for k in data.files}
    np.savez(entry / "reference.npz", **arrays)
    (entry / ENTRY_RECORD).unlink()
    record_entry(entry)
    proc = run_quick(run_args(modes="mapped", cache=cache, out=tmp_path / "b"), model_cache)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "verdict: PASS" not in proc.stdout
    from harness.core.schema import ResultRow
    from harness.core.tables import read_rows

    rows = read_rows(tmp_path / "b" / "results.csv", ResultRow)
    assert rows and all(not r.output_ok and "inconclusive" in (r.error or "") for r in rows)


def test_check_outputs_never_passes_an_output_nan_everywhere():
    from harness.prep.outputs import check_outputs

    nan = np.full((2, 3), np.nan, np.float32)
    ok, detail = check_outputs([nan], {"y": nan}, ["y"])
    assert not ok and detail.startswith("inconclusive: output y is NaN or infinite everywhere")
    partly = np.array([[np.nan, 1.0, np.inf]], np.float32)
    assert check_outputs([partly.copy()], {"y": partly}, ["y"]) == (True, "")


def test_weights_overwritten_during_a_group_fail_it(tmp_path, model_cache):
    """Worker 0 hangs (held until --worker-timeout) while worker 1 is ready: the test overwrites
    64 bytes of the weights in place, puts the file's mtime back, and lets the group end."""
    cache, out = tmp_path / "cache", tmp_path / "run"
    with first_group_waiting(out, model_cache, processes=2, modes="mapped", cache=cache) as proc:
        (weights,) = cache.glob("*/weights.bin")
        st = weights.stat()
        with open(weights, "r+b") as handle:
            handle.seek(st.st_size // 2 + 1000)
            handle.write(np.full(16, 7.0, np.float32).tobytes())
        os.utime(weights, ns=(st.st_atime_ns, st.st_mtime_ns))
        end_hung_worker(out, "cpu-mapped-n2-r0", proc=proc)  # the group ends now, at this event
        stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 1, stdout + stderr
    from harness.core.schema import ResultRow
    from harness.core.tables import read_rows

    rows = {r.worker: r for r in read_rows(out / "results.csv", ResultRow)}
    assert "weights changed during the group: weights.bin" in (rows[1].error or ""), rows[1].error
    assert "verdict: PASS" not in stdout
    shutil.rmtree(cache, ignore_errors=True)


def test_a_seal_sees_each_kind_of_change(tmp_path):
    from harness.runner.seal import broken, seals

    path = tmp_path / "w.bin"
    path.write_bytes(os.urandom(1 << 20))
    assert broken(seals([path])) == []
    for change, expected in (
        (lambda: path.write_bytes(path.read_bytes()[:-1]), "changed size"),
        (lambda: _same_size_same_mtime(path), "changed content"),
        (lambda: _replaced(path), "replaced"),
    ):
        sealed = seals([path])
        change()
        (reason,) = broken(sealed)
        assert expected in reason, reason
    path.unlink()
    unsealed = seals([path])  # a file that could not be read before the group is not called "replaced"
    path.write_bytes(b"back")
    assert broken(unsealed) == ["w.bin could not be read before the group: whether it changed cannot be told"]


def _same_size_same_mtime(path: Path) -> None:
    st = path.stat()
    with open(path, "r+b") as handle:
        handle.seek(64 * 1024)  # a sampled block: the first interior one
        handle.write(b"\0" * 16)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


def _replaced(path: Path) -> None:
    """The same bytes in a new file put in its place (a new inode: both exist at once)."""
    new = path.with_suffix(".new")
    new.write_bytes(path.read_bytes())
    os.replace(new, path)
