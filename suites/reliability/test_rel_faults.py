"""Faults in mapper_impl's pipeline through the command line (`--fault STAGE[=K]`, and
`--map-failures K` = `--fault map=K`), with the EP's own failures (issue 30): the cpu target
runs the EP's pipeline, map -> register -> create, as onnxruntime-qnn does.

- A failed creation is followed by exactly one direct read ("... Retrying with direct read.").
- A failed mapping step fails the session (cc7ec9e qnn_backend_manager.cc 1416-1422): exit 1.
  `--fallback-stages all` falls back there too, labelled "not upstream behaviour".
- A failed registration is left behind, stale (cc7ec9e 886-893, onnxruntime-qnn #337): counted
  in the row, named in the sentence and the notes, a leak that fails the worker; every repeat
  shows whether the sessions recovered. `--failed-registration undo` is the clean opt-in.
- Release callbacks arrive late, at teardown too (PR #839): survived, counted.
- A silent copy (onnxruntime-qnn #677) is caught by memory: ``copied``, a failure.
Upstream never retries the mapping itself; the K-attempt retry is an opt-in (`--max-attempts`).
Teardown leaves nothing but what upstream leaves (stale registrations, reported).
"""

from __future__ import annotations

import re

import pytest
from rel_support import SMALL, assert_no_survivors, run_args

# Not `memory` (but the silent copy's): these tests judge paths, stages, counts and exit codes.

WORKERS = 2


def _run(run_harness, *args: str, modes: str = "mapped", check_exit: int = 0, report: bool = False):
    argv = run_args(*args, processes=WORKERS, modes=modes, report=report)
    outcome = run_harness(*argv, check_exit=check_exit, timeout=180)
    assert_no_survivors(outcome.out)
    assert "Traceback" not in outcome.stderr + outcome.stdout
    return outcome, outcome.results()


def _errors(row) -> str:  # addresses differ per mapping; everything else must not
    return re.sub(r"0x[0-9a-f]+", "0x?", row.map_errors or "")


def test_a_failed_creation_is_followed_by_exactly_one_direct_read(run_harness):
    """`--fault create`: every mapped worker falls back at create, its output is correct, exit 0;
    heap workers never run the mapped pipeline."""
    outcome, rows = _run(run_harness, "--fault", "create", modes="mapped,heap")
    mapped = [r for r in rows if r.mode == "mapped"]
    heap = [r for r in rows if r.mode == "heap"]
    assert len(mapped) == len(heap) == WORKERS
    for row in mapped:
        assert (row.path_taken, row.fallback_stage, row.map_attempts) == ("fallback", "create", 1), row
        assert row.output_ok and not row.error, "a fallback is a success with a record, not a failure"
        assert "mapped create:" in row.map_errors and "injected by FaultPlan" in row.map_errors
        assert (row.stale_registrations, row.late_releases) == (0, 0)
    assert all((r.path_taken, r.fallback_stage) == ("heap", None) and r.output_ok for r in heap)
    summary = {s.mode: s for s in outcome.summary()}
    assert summary["mapped"].fallback_workers == WORKERS and summary["heap"].fallback_workers == 0
    table = [line for line in outcome.stdout.splitlines() if "fallback" in line and " create " in line]
    assert table, outcome.stdout  # the outcome table shows the stage per repeat
    assert "despite the mapping" not in outcome.stdout, "a fallback's copy is the fault's, not made despite a mapping"


def test_a_failed_mapping_step_fails_the_mapped_sessions(run_harness):
    """`--fault map` (issue 30's "done when"): upstream's single-context path returns the
    mapping step's error from session creation, no direct read: every mapped worker fails with
    the mapping error, exit 1; heap workers are untouched."""
    outcome, rows = _run(run_harness, "--fault", "map", modes="mapped,heap", check_exit=1)
    mapped = [r for r in rows if r.mode == "mapped"]
    assert len(mapped) == WORKERS
    for row in mapped:
        assert row.exit_code == 1 and not row.output_ok and row.first_run_s is None, row
        assert "ContextLoadError" in row.error and "mapped map: attempt 1" in row.error
        assert "direct" not in row.error, "no direct read follows a failed mapping step"
    assert all(r.output_ok and not r.error for r in rows if r.mode == "heap")
    assert "verdict: FAIL" in outcome.stdout
    # issue 43 item 8: the sentence and the table say what happened, not "- vs -" and "None"
    sentence = outcome.headline()["sentence"]
    assert "no repeat measured both modes completely" in sentence and "- vs -" not in sentence, sentence
    assert not re.search(r"│ None\s*│", outcome.stdout) and "no path recorded: 2" in outcome.stdout


def test_lenient_fallback_stages_fall_back_at_the_mapping_step_labelled_not_upstream(run_harness):
    """`--fallback-stages all`: the mapping step falls back too (the old default), and the run
    says its figures are not upstream behaviour (notes, metadata, sentence)."""
    outcome, rows = _run(run_harness, "--fault", "map", "--fallback-stages", "all")
    for row in rows:
        assert (row.path_taken, row.fallback_stage, row.map_attempts) == ("fallback", "map", 1), row
        assert row.output_ok and not row.error
    assert "Not upstream behaviour" in outcome.stdout and "--fallback-stages all" in outcome.stdout
    assert "not upstream behaviour" in outcome.headline()["sentence"]


def test_register_at_k_leaves_a_stale_registration_in_every_repeat(run_harness):
    """`--fault register@2` (issue 30's "done when"): the second registration fails and, as
    upstream, stays registered: every worker of every repeat counts one stale registration,
    its sessions are created anyway from the direct read (recovery) and it fails for the leak;
    the row, the sentence, the notes and the outcome table say so, identically per repeat."""
    outcome, rows = _run(run_harness, "--fault", "register@2", "--repeat", "2", check_exit=1, report=True)
    assert sorted({r.repeat for r in rows}) == [0, 1] and len(rows) == 2 * WORKERS
    outcomes = {
        (r.path_taken, r.fallback_stage, r.stale_registrations, _errors(r), r.first_run_s is not None) for r in rows
    }
    assert len(outcomes) == 1, outcomes
    ((path, stage, stale, errors, recovered),) = outcomes
    assert (path, stage, stale, recovered) == ("fallback", "register", 1, True)
    assert errors.count("Failed to register DMA data mapping to RPCMEM") == 1 and "left behind, stale" in errors
    for row in rows:
        assert "teardown left dma_stale_registrations=1" in row.error and row.exit_code == 1, row
        assert row.output_ok, "the worker's outputs were right: the failure is in error, not output_ok"
    assert "stale registration(s) were left behind" in outcome.headline()["sentence"]
    assert "2 stale registration(s) left behind" not in outcome.stdout  # counted per run: 4 of them
    assert "4 stale registration(s) left behind" in outcome.stdout
    assert "repeat 1: 2 worker(s) left 2 stale registration(s); sessions created anyway in 2" in outcome.stdout
    assert re.search(r"stale\s*┃", outcome.stdout), "the outcome table has a stale column"
    html = (outcome.out / "report.html").read_text(encoding="utf-8")
    assert "4 stale registration(s) left behind" in html and "stale_registrations" in html


def test_undoing_a_failed_registration_is_an_opt_in(run_harness):
    """`--failed-registration undo` (PR #337's unmerged proposal): nothing stale, the workers
    fall back cleanly, and the run labels it not upstream behaviour."""
    outcome, rows = _run(run_harness, "--fault", "register@2", "--failed-registration", "undo")
    for row in rows:
        assert (row.path_taken, row.fallback_stage, row.stale_registrations) == ("fallback", "register", 0), row
        assert row.output_ok and not row.error and "registration undone" in row.map_errors
    assert "--failed-registration undo" in outcome.stdout and "stale registration" not in outcome.stdout


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
    assert "--sweep-deregistrations" in outcome.stdout  # labelled: not upstream behaviour


@pytest.mark.parametrize("when", ["during", "after", "teardown"])
def test_late_release_callbacks_are_survived_and_counted(run_harness, when):
    """`--fault late-release=WHEN` (upstream PR #839): the failed attempt's release callbacks
    arrive during or after the direct read, or while the session is torn down (issue 30's
    "done when": a verdict, no traceback); the fallback session is right, teardown leaves
    nothing (no leak, no double release: a leftover would be an error) and the row counts the
    callbacks, one per region the failed attempt registered."""
    outcome, rows = _run(run_harness, "--fault", f"late-release={when}")
    for row in rows:
        assert (row.path_taken, row.fallback_stage) == ("fallback", "create"), row
        assert row.output_ok and not row.error and row.exit_code == 0, row
        assert row.late_releases and row.late_releases == rows[0].late_releases and row.stale_registrations == 0
    assert "verdict: PASS" in outcome.stdout and "Release callbacks arrived late" in outcome.stdout


@pytest.mark.memory  # judged on the workers' private memory against the control's
def test_a_silent_copy_is_caught_by_memory(run_harness):
    """`--fault silent-copy` (onnxruntime-qnn #677; issue 30's "done when"): the mapped sessions
    read the weights into private memory and nothing says so; the pipeline reports mapped, yet
    the parent's memory split against the control worker finds the copy: ``copied``, not
    mapped, a failure with the figure."""
    outcome, rows = _run(run_harness, "--fault", "silent-copy", check_exit=1)
    weights = rows[0].weights_bytes
    for row in rows:
        assert (row.path_taken, row.ep_file_mapping) == ("mapped", "copied"), row
        assert row.copied_bytes >= 0.9 * weights and "copied: private memory held" in row.error
        assert row.exit_code == 0, "the worker itself saw nothing wrong: only memory tells"
    assert "file mapping: weights copied into private memory" in outcome.stdout
    assert "held a silent copy" in outcome.headline()["sentence"]


def test_the_mapping_is_never_retried_by_default(run_harness):
    """`--map-failures 1` = `--fault map=1`: one mapping attempt, then (upstream) the session fails."""
    _, rows = _run(run_harness, "--map-failures", "1", check_exit=1)
    for row in rows:
        assert (row.map_attempts, row.path_taken) == (1, None), row
        assert "Cannot allocate memory" in row.map_errors and "attempt 2" not in row.error


def test_opt_in_retry_ends_mapped_when_fewer_failures_than_attempts(run_harness):
    _, rows = _run(run_harness, "--map-failures", "1", "--max-attempts", "2")
    for row in rows:
        assert (row.path_taken, row.map_attempts) == ("mapped", 2), row
        assert row.output_ok and not row.error
        assert row.map_errors.count("attempt ") == 1 and "injected by FaultPlan" in row.map_errors


def test_opt_in_retry_falls_back_after_max_attempts(run_harness):
    outcome, rows = _run(run_harness, "--map-failures", "3", "--max-attempts", "3", "--fallback-stages", "all")
    for row in rows:
        assert (row.path_taken, row.map_attempts, row.fallback_stage) == ("fallback", 3, "map"), row
        assert [f"attempt {i}:" in row.map_errors for i in (1, 2, 3)] == [True] * 3
        assert row.output_ok and not row.error
    (summary,) = outcome.summary()
    assert (summary.ok_workers, summary.failed_workers, summary.fallback_workers) == (WORKERS, 0, WORKERS)
    assert "fell back to the heap" in outcome.stdout


def test_max_attempts_covers_the_map_step_only(run_harness):
    """`--max-attempts 2 --fault create=1` (issue 43 item 3): the option retries the map step only,
    so nothing is retried here (map_attempts 1) and no line says "the mapping is retried"."""
    outcome, rows = _run(run_harness, "--fault", "create=1", "--max-attempts", "2")
    assert {(r.path_taken, r.map_attempts, r.fallback_stage) for r in rows} == {("fallback", 1, "create")}
    assert "the mapping is retried" not in outcome.stdout
    assert "--max-attempts 2: a failed map step (that step only" in outcome.stdout


@pytest.mark.parametrize("disables", ["model", "backend-manager"])
def test_a_shared_backend_manager_shows_the_old_and_the_new_disable(run_harness, disables):
    """Issue 43 item 9 (microsoft/onnxruntime #27871): two sessions of one backend manager, the
    first creation failing: the second maps again (per model, upstream) or, as before #27871, is
    refused ABORTED and falls back at register (labelled not upstream behaviour)."""
    args = ("--sessions-per-process", "2", "--share-backend-manager", "--disable-after-failure", disables)
    outcome = run_harness(*run_args(*args, "--fault", "create=1", modes="mapped"), check_exit=0, timeout=180)
    (row,) = outcome.results()
    assert (row.path_taken, row.fallback_stage) == ("fallback", "create"), row
    errors = row.map_errors.split("; ")
    assert "injected by FaultPlan" in errors[0]
    refused = [e for e in errors if "file mapping has been disabled" in e]
    assert (len(errors) == 1, bool(refused)) == ((True, False) if disables == "model" else (False, True)), errors
    assert ("Not upstream behaviour" in outcome.stdout) is (disables == "backend-manager")


def test_recovery_is_deterministic_across_repeats(run_harness):
    """The user report this answers: "recovery was not deterministic across tries". With
    upstream's failures (a stale registration each) every repeat ends the same."""
    outcome, rows = _run(run_harness, "--fault", "register=1", "--fault", "create=1", "--repeat", "3", check_exit=1)
    assert sorted({r.repeat for r in rows}) == [0, 1, 2]
    per_repeat = {
        repeat: sorted(
            (r.worker, r.path_taken, r.fallback_stage, _errors(r), r.stale_registrations, r.first_run_s is not None)
            for r in rows
            if r.repeat == repeat
        )
        for repeat in (0, 1, 2)
    }
    assert per_repeat[0] == per_repeat[1] == per_repeat[2], per_repeat
    assert {(p, s, n, ok) for _, p, s, _, n, ok in per_repeat[0]} == {("fallback", "register", 1, True)}
    assert "outcomes per repeat and stage" in outcome.stdout


def test_a_bad_fault_is_a_usage_error(run_harness):
    for bad in (
        "--fault=bogus",
        "--fault=map=x",
        "--fault=register@0",
        "--fault=late-release=never",
        "--fallback-stages=some",
        "--failed-registration=keep",
    ):
        outcome = run_harness("run", *SMALL, "--processes", "1", "--quiet", bad)
        assert outcome.returncode == 2 and len(outcome.stderr.strip().splitlines()) == 1, outcome.stderr
        assert bad.split("=")[0] in outcome.stderr and "Traceback" not in outcome.stderr


def test_a_non_ascii_context_path_maps(run_harness, tmp_path):
    """Upstream widens the path byte by byte (cc7ec9e qnn_windows_file_mapper.cc:51) and fails a
    session whose context bin sits under a non-ASCII folder (test_windows_fake.py shows the name
    it opens); here the weights file under a non-ASCII cache folder maps (a deliberate difference)."""
    cache = tmp_path / "modèle_重み"
    _, rows = _run(run_harness, "--cache-dir", str(cache))
    assert rows and all(r.path_taken == "mapped" and r.output_ok and not r.error for r in rows), rows
    assert any(cache.rglob("weights.bin"))
