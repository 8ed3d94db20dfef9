"""The headline benchmark as an opt-in test (``-m slow``): `harness bench` at its defaults
(512 MiB, 4 processes, 8 repeats). Off by default: it needs ~3 GiB of memory and the machine to
itself; the criteria are ratios from one run, not absolute times.

What it asserts is what one run can show beyond doubt: every memory criterion passes, and no
criterion fails. A timing criterion may also read inconclusive (its 95 % interval straddles the
threshold x 1.05): `peer_init_ratio<=1` does on a quiet 2-core machine today (medians 0.97-1.04,
intervals about +-12 % wide over 8 repeats: issue 32, open), and an assertion on a pass would be
a timed test that flakes. A *failed* timing criterion is a significant regression (the whole
interval beyond the threshold) and fails this test; the exit code follows the verdict."""

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
    assert all(c["status"] in ("pass", "inconclusive") for c in timing), timing  # never contended here
    assert all(c["repeats"] == 8 and c["interval"][0] <= c["value"] <= c["interval"][1] for c in timing), timing
    passed = all(c["status"] == "pass" for c in criteria)
    assert outcome.returncode == (0 if passed else 1), outcome.stdout + outcome.stderr
