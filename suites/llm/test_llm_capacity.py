"""How many chat sessions fit, with their KV cache: `capacity --workload generate` for real (cgroup
probes, memory marker: one xdist group) and the fits line of a generate run."""

from __future__ import annotations

import json

import pytest

from conftest import one_line_error
from harness.prep.llama import HEAD_DIM, LlamaDims

pytestmark = pytest.mark.memory
PROMPT, NEW = 16, 8


def _hierarchy() -> None:
    """Skip, saying why, where no memory cgroup can be made (as suites/harness/test_memory_limit.py)."""
    import sys

    from harness.runner import _cgroup

    if not sys.platform.startswith("linux"):
        pytest.skip("memory containers are cgroups on Linux")
    try:
        found = _cgroup.find()
        _cgroup.remove(_cgroup.create(found, f"{_cgroup.owner_tag()}test", 64 * 1024**2))
    except _cgroup.Unavailable as err:
        pytest.skip(f"no memory cgroup here: {err}")


def _kv_bytes(size: int, tokens: int) -> int:
    """The generated decoder's cache: layers x 2 x heads x head_dim x tokens x 4 bytes."""
    dims = LlamaDims.of_size(size)
    return dims.layers * 2 * dims.heads * HEAD_DIM * tokens * 4


def test_capacity_generate_writes_capacity_json(run_harness, harness_run_dir) -> None:
    """The issue's command: every mode answered under 1 GiB, each session's KV cache at P + G
    tokens in the document and its sentence, heap below what the limit holds of the weights and
    mapped at least as many as heap."""
    _hierarchy()  # skips, saying why, where no memory cgroup can be made
    args = ["capacity", "--workload", "generate", "--memory-limit", "1GiB", "--max-processes", "4"]
    outcome = run_harness(*args, "--out", str(harness_run_dir), "--quiet", "--no-report", out=harness_run_dir)
    assert outcome.returncode == 0, outcome.stdout + outcome.stderr
    document = json.loads((harness_run_dir / "capacity.json").read_text())
    assert document["workload"] == "generate" and document["tokens"] == PROMPT + NEW
    assert document["kv_cache_bytes_per_session"] == _kv_bytes(256 * 1024**2, PROMPT + NEW - 1)
    assert f"KV cache at {PROMPT + NEW} tokens" in document["sentence"]
    heap, mapped = document["modes"]["heap"], document["modes"]["mapped"]
    assert heap["max_processes"] is not None and mapped["max_processes"] is not None, document["sentence"]
    assert 1 <= heap["max_processes"] < 1024**3 / document["weights_bytes"]
    assert mapped["max_processes"] >= heap["max_processes"]
    meta = json.loads((harness_run_dir / "metadata.json").read_text())
    expected = " ".join(map(str, meta["run"]["generate"]["expected_ids"]))
    survivors = [r for r in outcome.results() if r.output_ok]
    assert survivors and all(r.tokens_ok and r.generated_tokens == expected for r in survivors)


def test_the_fits_line_of_a_generate_run_counts_the_kv_cache(run_harness) -> None:
    """headline.json's fits, per mode, name the KV cache each worker's peak includes, and the
    terminal's fits line says so."""
    args = ["run", "--workload", "generate", "--model-size", "16MiB", "--processes", "2"]
    outcome = run_harness(*args, "--prompt-tokens", str(PROMPT), "--new-tokens", str(NEW), "--no-report")
    assert outcome.returncode == 0, outcome.stdout + outcome.stderr
    fits = json.loads((outcome.out / "headline.json").read_text())["fits"]
    want = _kv_bytes(16 * 1024**2, PROMPT + NEW - 1)
    assert {m["kv_cache_bytes_per_worker"] for m in fits["modes"].values()} == {want}
    assert all(m["peak_per_worker_bytes"] > want for m in fits["modes"].values())
    assert "each peak includes the worker's KV cache" in fits["sentence"]
    assert "each peak includes the worker's KV cache" in outcome.stdout


def test_capacity_generate_refuses_a_contradiction(run_harness) -> None:
    outcome = run_harness("capacity", "--new-tokens", "4", "--memory-limit", "1GiB")
    one_line_error(outcome, 2, "--new-tokens applies to --workload generate only")
