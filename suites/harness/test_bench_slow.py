"""The headline benchmark as an opt-in test (``-m slow``): `harness bench` at its defaults
(512 MiB, 4 processes, 8 repeats). Off by default: it needs ~3 GiB of memory and the machine to
itself; the criteria are ratios from one run, not absolute times.

What it asserts is what one run shows beyond doubt whatever the machine's load: every memory
criterion passes, no criterion fails, and the exit code follows the verdict. A timing criterion
may read inconclusive (its 95 % interval straddles the threshold x 1.05: `peer_init_ratio<=1`
does on a quiet 2-core machine, issue 32) or contended (timed while other work ran: CI's machine
is shared, issue 44), and an assertion on a pass would be a timed test that flakes. A *failed*
timing criterion is a significant regression (the whole interval beyond the threshold)."""

from __future__ import annotations

import json

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.memory]

TIMING = ("init_ratio", "peer_init_ratio")


def test_bench_meets_its_criteria(run_harness, tmp_path):
    out = tmp_path / "bench"
    outcome = run_harness("bench", "--out", str(out), timeout=1800)
    bench = json.loads((out / "bench.json").read_text())
    criteria = bench["criteria"]
    assert len(criteria) == 4
    timing = [c for c in criteria if c["gate"].split("<=")[0] in TIMING]
    memory = [c for c in criteria if c not in timing]
    assert len(timing) == 2 and all(c["status"] == "pass" for c in memory), memory
    assert not [c for c in criteria if c["status"] == "fail"], criteria
    assert all(c["status"] in ("pass", "inconclusive", "contended") for c in timing), timing
    judged = [c for c in timing if c["status"] != "contended"]  # a contended gate has no interval
    assert all(c["repeats"] == 8 and c["interval"][0] <= c["value"] <= c["interval"][1] for c in judged), timing
    undecided = [c for c in criteria if c["status"] != "pass"]  # never a pass; a failure is a defect
    assert bench["verdict"] == "incomplete" if undecided else bench["verdict"] in ("pass", "incomplete"), bench
    assert outcome.returncode == (0 if bench["verdict"] == "pass" else 1), outcome.stdout + outcome.stderr
