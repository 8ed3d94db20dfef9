"""`bench --workload generate`: the issue's criteria (mapped memory within one copy of the weights
plus the runtimes with their KV caches, TTFT and decode tokens/s mapped vs heap) as gates, with
onnxruntime-genai's figures beside. A benchmark: the slow test checks what it writes, never a
timing; the memory budget's arithmetic is checked on its own."""

from __future__ import annotations

import json

import pytest

from harness.core.schema import SummaryRow

CRITERIA = {
    "mapped_memory_budget_ratio<=1.1",
    "heap_copies_per_session>=1",
    "ttft_ratio<=1",
    "decode_throughput_ratio>=0.95",
}


def test_memory_budget_is_one_copy_plus_the_runtimes() -> None:
    """Summed PSS over W + N x the control's private memory (runtime and KV cache): 1 exactly
    when the workers hold one shared copy and their runtimes; None without a control."""
    from harness.core.physics import memory_budget_ratio

    row = SummaryRow(mode="mapped", processes=4, weights_bytes=1000, runtime_bytes=100, sum_pss_bytes=1400)
    assert memory_budget_ratio(row) == pytest.approx(1.0)
    row.sum_pss_bytes = 1400 + 3 * 1000  # every worker its own copy
    assert memory_budget_ratio(row) == pytest.approx(4400 / 1400)
    row.runtime_bytes = None
    assert memory_budget_ratio(row) is None


def test_bench_generate_criteria_are_the_issues() -> None:
    from harness.bench import bench_gates, bench_options
    from harness.core.gates import parse_gates

    parse_gates(bench_gates("generate"))
    assert set(bench_gates("generate")) == CRITERIA
    opts = bench_options(
        model_size=1024**3, processes=[4], repeat=2, out=None, cache_dir=None, command="", workload="generate"
    )
    assert (opts.peer, opts.workload, opts.sequential_timing) == ("genai", "generate", True)


@pytest.mark.slow
@pytest.mark.memory
def test_bench_generate_writes_its_criteria_beside_the_peer(run_harness) -> None:
    args = ["bench", "--workload", "generate", "--model-size", "64MiB", "--processes", "2", "--repeat", "2"]
    outcome = run_harness(*args, "--prompt-tokens", "8", "--new-tokens", "4", "--quiet")
    assert outcome.returncode in (0, 1), outcome.stdout + outcome.stderr  # a verdict, pass or fail
    bench = json.loads((outcome.out / "bench.json").read_text())
    assert bench["workload"] == "generate" and {c["gate"] for c in bench["criteria"]} == CRITERIA
    assert all(c["value"] is not None for c in bench["criteria"]), bench["criteria"]
    figures = {(r["target"], r["mode"]): r for r in bench["generate"]}
    assert set(figures) == {("cpu", "mapped"), ("cpu", "heap"), ("genai", "mapped")}
    for r in figures.values():
        assert r["ttft_s"] > 0 and r["decode_tokens_per_s"] > 0 and r["sum_pss_bytes"] > r["sum_kv_cache_bytes"] > 0
    assert "genai mapped" in outcome.stdout and "TTFT" in outcome.stdout
    rows = outcome.results()
    assert rows and all(r.tokens_ok for r in rows)
