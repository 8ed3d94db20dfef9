"""Faults in mapper_impl's pipeline through the command line (`--fault STAGE[=K]`, and
`--map-failures K` = `--fault map=K`): the cpu target runs the EP's pipeline, map -> register
-> create, and a failed stage is followed by exactly one direct read, as onnxruntime-qnn 2.7.0
does ("... Retrying with direct read."). Upstream never retries the mapping itself; the
K-attempt retry is an opt-in extension (`--max-attempts`). The output stays correct, the run
exits 0, the same plan gives the same outcome in every repeat, and teardown leaves nothing.
"""

from __future__ import annotations

import re

import pytest
from rel_support import SMALL, assert_no_survivors, run_args

pytestmark = pytest.mark.memory

WORKERS = 2


def _run(run_harness, *args: str, modes: str = "mapped"):
    outcome = run_harness(*run_args(*args, processes=WORKERS, modes=modes), check_exit=0, timeout=180)
    assert_no_survivors(outcome.out)
    return outcome, outcome.results()


@pytest.mark.parametrize("stage", ["map", "register", "create"])
def test_a_failed_stage_is_followed_by_exactly_one_direct_read(run_harness, stage):
    """`--fault create` (the issue's "done when"): every mapped worker falls back at that stage,
    its output is correct, exit 0; heap workers never run the mapped pipeline."""
    outcome, rows = _run(run_harness, "--fault", stage, modes="mapped,heap")
    mapped = [r for r in rows if r.mode == "mapped"]
    heap = [r for r in rows if r.mode == "heap"]
    assert len(mapped) == len(heap) == WORKERS
    for row in mapped:
        assert (row.path_taken, row.fallback_stage, row.map_attempts) == ("fallback", stage, 1), row
        assert row.output_ok and not row.error, "a fallback is a success with a record, not a failure"
        assert f"mapped {stage}:" in row.map_errors and "injected by FaultPlan" in row.map_errors
    assert all((r.path_taken, r.fallback_stage) == ("heap", None) and r.output_ok for r in heap)
    summary = {s.mode: s for s in outcome.summary()}
    assert summary["mapped"].fallback_workers == WORKERS and summary["heap"].fallback_workers == 0
    table = [line for line in outcome.stdout.splitlines() if "fallback" in line and f" {stage} " in line]
    assert table, outcome.stdout  # the outcome table shows the stage per repeat


def test_a_failed_deregistration_is_reported_as_a_leak(run_harness):
    """`--fault deregister` with upstream's default: the release returns MEM_ALLOC and nothing
    retries it, so the registration is leaked: every worker's teardown reports it as a leak
    (the worker fails for the leak: a leak is never a success)."""
    run = run_harness(*run_args("--fault", "deregister=2", processes=WORKERS, modes="mapped"), timeout=180)
    assert_no_survivors(run.out)
    rows = run.results()
    assert rows and all(r.path_taken == "mapped" for r in rows), rows
    for row in rows:
        assert "teardown left" in row.error and "dma_leaked_registrations=2" in row.error, row
        assert "a leak" in row.error and row.exit_code != 0
    assert run.returncode != 0


def test_failed_deregistrations_are_swept_at_teardown_when_asked(run_harness):
    """`--sweep-deregistrations` (our extension): the teardown sweep retries the failed
    releases; every worker ends with mapper_impl's stats clean."""
    outcome, rows = _run(run_harness, "--fault", "deregister=2", "--sweep-deregistrations")
    assert all(r.path_taken == "mapped" and r.output_ok and not r.error for r in rows), rows
    assert all(r.exit_code == 0 for r in rows)


def test_register_at_k_falls_back_deterministically_and_leaves_nothing(run_harness):
    """`--fault register@2` (foundry-local #1124: registration fails part way): the first region
    registered, the second failed, the first deregistered, the direct read followed, in every
    repeat the same; teardown left nothing."""
    outcome, rows = _run(run_harness, "--fault", "register@2", "--repeat", "3")
    assert sorted({r.repeat for r in rows}) == [0, 1, 2]
    outcomes = {
        (r.path_taken, r.fallback_stage, re.sub(r"0x[0-9a-f]+", "0x?", r.map_errors), r.output_ok, r.error or "")
        for r in rows
    }
    assert len(outcomes) == 1, outcomes
    ((path, stage, errors, ok, left),) = outcomes
    assert (path, stage, ok, left) == ("fallback", "register", True, "")
    assert errors.count("Failed to register DMA data mapping to RPCMEM") == 1


@pytest.mark.parametrize("when", ["during", "after"])
def test_late_release_callbacks_are_survived(run_harness, when):
    """`--fault late-release=WHEN` (upstream PR #839): the failed attempt's release callbacks
    arrive during or after the direct read; the fallback session is right and teardown leaves
    nothing (the late releases deregistered everything)."""
    _, rows = _run(run_harness, "--fault", f"late-release={when}")
    for row in rows:
        assert (row.path_taken, row.fallback_stage) == ("fallback", "create"), row
        assert row.output_ok and not row.error, row  # a teardown leftover would be an error


def test_the_mapping_is_never_retried_by_default(run_harness):
    """`--map-failures 1` = `--fault map=1`: one mapping attempt, then the direct read."""
    _, rows = _run(run_harness, "--map-failures", "1")
    for row in rows:
        assert (row.path_taken, row.fallback_stage, row.map_attempts) == ("fallback", "map", 1), row
        assert "Cannot allocate memory" in row.map_errors
        assert row.output_ok and not row.error


def test_opt_in_retry_ends_mapped_when_fewer_failures_than_attempts(run_harness):
    _, rows = _run(run_harness, "--map-failures", "1", "--max-attempts", "2")
    for row in rows:
        assert (row.path_taken, row.map_attempts) == ("mapped", 2), row
        assert row.output_ok and not row.error
        assert row.map_errors.count("attempt ") == 1 and "injected by FaultPlan" in row.map_errors


def test_opt_in_retry_falls_back_after_max_attempts(run_harness):
    outcome, rows = _run(run_harness, "--map-failures", "3", "--max-attempts", "3")
    for row in rows:
        assert (row.path_taken, row.map_attempts, row.fallback_stage) == ("fallback", 3, "map"), row
        assert [f"attempt {i}:" in row.map_errors for i in (1, 2, 3)] == [True] * 3
        assert row.output_ok and not row.error
    (summary,) = outcome.summary()
    assert (summary.ok_workers, summary.failed_workers, summary.fallback_workers) == (WORKERS, 0, WORKERS)
    assert "fell back to the heap" in outcome.stdout


def test_recovery_is_deterministic_across_repeats(run_harness):
    """The user report this answers: "recovery was not deterministic across tries"."""
    outcome, rows = _run(run_harness, "--fault", "register=1", "--fault", "create=1", "--repeat", "3")
    assert sorted({r.repeat for r in rows}) == [0, 1, 2]

    def errors(row) -> str:  # addresses differ per mapping; everything else must not
        return re.sub(r"0x[0-9a-f]+", "0x?", row.map_errors)

    per_repeat = {
        repeat: sorted(
            (r.worker, r.path_taken, r.fallback_stage, errors(r), r.output_ok) for r in rows if r.repeat == repeat
        )
        for repeat in (0, 1, 2)
    }
    assert per_repeat[0] == per_repeat[1] == per_repeat[2], per_repeat
    assert {(p, s, ok) for _, p, s, _, ok in per_repeat[0]} == {("fallback", "register", True)}
    assert "outcomes per repeat and stage" in outcome.stdout


def test_a_bad_fault_is_a_usage_error(run_harness):
    for bad in ("--fault=bogus", "--fault=map=x", "--fault=register@0", "--fault=late-release=never"):
        outcome = run_harness("run", *SMALL, "--processes", "1", "--quiet", bad)
        assert outcome.returncode == 2 and len(outcome.stderr.strip().splitlines()) == 1, outcome.stderr
        assert "--fault" in outcome.stderr and "Traceback" not in outcome.stderr
