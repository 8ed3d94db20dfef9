"""Mapping faults through the command line (`--map-failures K` drives mapper_impl's
FaultPlan in every worker): fewer failures than attempts end mapped after a retry, as many
as the attempts end in the heap fallback with every error recorded, and the same plan gives
the same outcome in every repeat. The output stays correct and the run exits 0 throughout.
"""

from __future__ import annotations

import pytest
from rel_support import SMALL, assert_no_survivors

pytestmark = pytest.mark.memory

WORKERS = 2


def _run(run_harness, *args: str):
    outcome = run_harness("run", *SMALL, "--processes", str(WORKERS), "--modes", "mapped", "--quiet",
                          "--no-report", *args, check_exit=0, timeout=180)
    assert_no_survivors(outcome.out)
    return outcome, outcome.results()


def test_one_map_failure_is_retried_and_ends_mapped(run_harness):
    outcome, rows = _run(run_harness, "--map-failures", "1")
    assert len(rows) == WORKERS
    for row in rows:
        assert (row.path_taken, row.map_attempts) == ("mapped", 2), row
        assert row.output_ok and not row.error
        assert row.map_errors.count("attempt ") == 1 and "injected by FaultPlan" in row.map_errors
    (summary,) = outcome.summary()
    assert (summary.ok_workers, summary.failed_workers, summary.fallback_workers) == (WORKERS, 0, 0)


def test_failures_up_to_max_attempts_fall_back_to_the_heap(run_harness):
    outcome, rows = _run(run_harness, "--map-failures", "3")  # default --max-attempts 3
    assert len(rows) == WORKERS
    for row in rows:
        assert (row.path_taken, row.map_attempts) == ("fallback", 3), row
        assert row.output_ok and not row.error, "a fallback is a success with a record, not a failure"
        assert [f"attempt {i}:" in row.map_errors for i in (1, 2, 3)] == [True] * 3
        assert "Cannot allocate memory" in row.map_errors
    (summary,) = outcome.summary()
    assert (summary.ok_workers, summary.failed_workers, summary.fallback_workers) == (WORKERS, 0, WORKERS)
    assert "fell back to the heap" in outcome.stdout


def test_recovery_is_deterministic_across_repeats(run_harness):
    """The user report this answers: "recovery was not deterministic across tries"."""
    outcome, rows = _run(run_harness, "--map-failures", "5", "--max-attempts", "5", "--repeat", "3")
    assert sorted({r.repeat for r in rows}) == [0, 1, 2]
    per_repeat = {
        repeat: sorted((r.worker, r.path_taken, r.map_attempts, r.map_errors.count("attempt "), r.output_ok)
                       for r in rows if r.repeat == repeat)
        for repeat in (0, 1, 2)
    }
    assert per_repeat[0] == per_repeat[1] == per_repeat[2], per_repeat
    assert per_repeat[0] == [(w, "fallback", 5, 5, True) for w in range(WORKERS)]
    assert "outcomes per repeat" in outcome.stdout
