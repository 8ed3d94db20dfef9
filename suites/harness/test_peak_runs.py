"""Start-up peaks and latency, measured for real (issue 20): cpu target, 256 MiB, N=2.

What the peak must show: a heap worker's start-up peak of private memory holds its copy of the
weights (>= W, whatever other transient copies the target makes), a mapped worker's stays far
below (< W/4: the weights are file pages, not private), and a mapped worker whose context
creation fails (``--fault create``) falls back to the direct read and holds the copy (>= W)
with the failed attempt's mapping beside it, every page of it read by the failing creation:
in the same sample, as ``peak_shared_bytes``, and in the kernel's RSS peak (>= the private
peak + 0.9 W): upstream's start-up peak, the mapping and the copy.
Every peak names its phase. ``--runs 20 --warmup 3`` gives the latency table, headline.json's
latency keys and gate metrics a gate can judge. No assertion is on a time.
"""

from __future__ import annotations

import inspect
import re

import pytest

from harness.contract.phases import PHASES

pytestmark = pytest.mark.memory

SIZE = "256MiB"


@pytest.fixture(scope="module")
def peak_run(harness_runner, request, tmp_path_factory):
    """Both modes, N=2, with timed runs and a warm-up (one run shared by the tests below)."""
    outcome = harness_runner.run(
        "run",
        *("--target", "cpu", "--model-size", SIZE, "--processes", "2", "--runs", "20", "--warmup", "3"),
        *("--gate", "latency_p50_ratio<=1000", "--gate", "first_run_ratio<=0", "--quiet", "--no-report"),
        owner=request.node.nodeid,
        scratch=tmp_path_factory.mktemp("peak-run"),
    )
    return outcome


@pytest.fixture(scope="module")
def fallback_run(harness_runner, request, tmp_path_factory):
    """Mapped mode only, every session's create stage fails once: the direct read follows."""
    outcome = harness_runner.run(
        "run",
        *("--target", "cpu", "--model-size", SIZE, "--processes", "2", "--modes", "mapped", "--fault", "create"),
        *("--runs", "4", "--concurrency", "2", "--quiet", "--no-report"),
        owner=request.node.nodeid,
        scratch=tmp_path_factory.mktemp("fallback-run"),
    )
    assert outcome.returncode == 0, outcome.stdout + outcome.stderr
    return outcome


def _mode(rows, mode):
    return [r for r in rows if r.mode == mode]


def results(outcome, expected: int) -> list:
    """The run's worker rows, exactly ``expected`` of them: a check over every row must never
    pass because the run produced none."""
    rows = outcome.results()
    assert len(rows) == expected, f"{len(rows)} rows, expected {expected}\n{outcome.stdout}\n{outcome.stderr}"
    return rows


def summary(outcome, expected: int) -> list:
    """The run's summary rows, exactly ``expected`` groups (see `results`)."""
    groups = outcome.summary()
    assert len(groups) == expected, f"{len(groups)} groups, expected {expected}\n{outcome.stdout}\n{outcome.stderr}"
    return groups


#: What each shared run produces: peak_run 2 modes x N=2 workers in 2 groups; fallback_run
#: mapped only, N=2, in 1 group.
PEAK_ROWS, PEAK_GROUPS, FALLBACK_ROWS = 4, 2, 2


def test_heap_peak_holds_the_weights_and_mapped_stays_far_below(peak_run):
    rows = results(peak_run, PEAK_ROWS)
    heap, mapped = _mode(rows, "heap"), _mode(rows, "mapped")
    assert len(heap) == len(mapped) == 2, peak_run.stdout + peak_run.stderr
    weights = heap[0].weights_bytes
    for row in heap:
        assert row.peak_private_bytes >= weights, (row.peak_private_bytes, weights)
    for row in mapped:
        assert row.peak_private_bytes < weights / 4, (row.peak_private_bytes, weights)


def test_every_peak_names_its_phase_and_rate(peak_run):
    for row in results(peak_run, PEAK_ROWS):
        assert row.peak_phase in PHASES
        assert row.peak_sample_hz and row.peak_sample_hz > 0
        assert row.peak_sample_max_gap_s is not None and row.peak_sample_max_gap_s >= 0
        # the kernel's RSS peak covers the private peak (private pages are resident pages)
        assert row.peak_rss_bytes >= 0.98 * row.peak_private_bytes


def test_peak_is_at_least_the_steady_private_memory(peak_run):
    """The barrier's USS comes after start-up: the peak sampled before it cannot be far below
    (a slack of 10 %: the timed runs between the first inference and the barrier may allocate)."""
    for row in results(peak_run, PEAK_ROWS):
        assert row.peak_private_bytes >= 0.9 * row.uss_bytes - 4 * 1024**2, (row.peak_private_bytes, row.uss_bytes)


def test_group_peak_figures_and_system_side(peak_run):
    for s in summary(peak_run, PEAK_GROUPS):
        assert s.max_peak_private_bytes is not None and s.sum_peak_private_bytes >= s.max_peak_private_bytes
        assert s.system_min_available_bytes <= s.system_start_available_bytes
        assert s.system_max_committed_bytes >= s.system_start_committed_bytes
        assert s.system_commit_limit_bytes > 0


def test_runs_and_warmup_give_the_latency_figures(peak_run):
    for row in results(peak_run, PEAK_ROWS):
        assert (row.runs, row.warmup, row.concurrency) == (20, 3, 1)
        ordered = [row.latency_min_s, row.latency_p50_s, row.latency_p90_s, row.latency_p95_s, row.latency_p99_s]
        assert ordered == sorted(ordered) and row.latency_max_s >= row.latency_p99_s
        assert row.latency_min_s <= row.latency_mean_s <= row.latency_max_s
        assert row.latency_stdev_s >= 0 and row.inferences_per_s > 0


def test_terminal_shows_the_latency_table_after_the_memory_table(peak_run):
    out = peak_run.stdout
    assert "latency per inference" in out, out
    assert out.index("mapped/heap") < out.index("latency per inference")
    for label in ("mean", "stdev", "p50", "p90", "p95", "p99", "max", "inf/s", "init+first"):
        assert label in out
    assert "fits (start-up peak" in out


def test_headline_json_has_latency_startup_and_fits(peak_run):
    doc = peak_run.headline()
    latency = doc["latency"]
    assert (latency["runs"], latency["warmup"], latency["concurrency"]) == (20, 3, 1)
    for mode in ("mapped", "heap"):
        block = latency[mode]
        for key in ("mean", "stdev", "min", "p50", "p90", "p95", "p99", "max", "inferences_per_s"):
            assert block[key] is not None and block[key] >= 0, (mode, key)
        assert block["init_plus_first_run_s"] >= block["init_s"]
    for metric in ("latency_p50_ratio", "latency_p99_ratio", "first_run_ratio", "startup_ratio", "peak_private_ratio"):
        assert doc["headline"][metric] > 0, metric
    assert doc["headline"]["peak_private_ratio"] < 0.25
    assert "init + first inference" in doc["sentence"]
    fits = doc["fits"]
    assert fits["modes"]["mapped"]["sessions_fit"] > fits["modes"]["heap"]["sessions_fit"]
    assert fits["sentence"].startswith("with heap, ") and fits["assumptions"]


def test_latency_gates_with_one_repeat_are_inconclusive_not_passed(peak_run):
    """One repeat gives a timing gate no interval: inconclusive, and never a pass."""
    gates = {g["expr"]: g for g in peak_run.headline()["gates"]}
    for expr in ("latency_p50_ratio<=1000", "first_run_ratio<=0"):
        assert gates[expr]["status"] in ("inconclusive", "contended"), gates[expr]  # both undecided
    assert peak_run.returncode == 1


def test_latency_gates_are_judged_on_their_repeats(harness_runner, request, tmp_path_factory):
    """With 3 repeats a latency gate that holds passes and one that cannot hold fails: judged on
    the interval of the repeats, not skipped (a small model: only the gates are looked at)."""
    outcome = harness_runner.run(
        "run",
        *("--target", "cpu", "--model-size", "16MiB", "--processes", "1", "--repeat", "3"),
        *("--runs", "5", "--warmup", "1", "--quiet", "--no-report"),
        *("--gate", "latency_p50_ratio<=1000", "--gate", "first_run_ratio<=0"),
        owner=request.node.nodeid,
        scratch=tmp_path_factory.mktemp("latency-gates"),
    )
    doc = outcome.headline()
    gates = {g["expr"]: g for g in doc["gates"]}
    busy = doc["contention"]["contended_groups"]  # issue 18: a contended machine judges no timing
    assert gates["latency_p50_ratio<=1000"]["status"] == ("contended" if busy else "pass"), gates
    assert gates["first_run_ratio<=0"]["status"] == ("contended" if busy else "fail"), gates
    assert outcome.returncode == 1


def test_fallback_peak_holds_the_copy(fallback_run):
    for row in results(fallback_run, FALLBACK_ROWS):
        assert row.path_taken == "fallback" and row.fallback_stage == "create"
        assert row.peak_private_bytes >= row.weights_bytes, (row.peak_private_bytes, row.weights_bytes)
        assert row.peak_phase in PHASES


def test_fallback_peak_holds_the_mapping_and_the_copy_at_once(fallback_run, peak_run):
    """The failed mapped attempt read its regions before it failed and its mapping stays until
    the fallback context exists (as upstream's cached view): the sample where the private
    figure peaked (the copies) also holds the mapped pages, as shared bytes above a heap
    worker's (whose shared bytes are the interpreter's and libraries' file pages)."""
    heap_shared = max(r.peak_shared_bytes for r in _mode(results(peak_run, PEAK_ROWS), "heap"))
    for row in results(fallback_run, FALLBACK_ROWS):
        assert row.peak_private_bytes >= row.weights_bytes
        assert row.peak_shared_bytes >= heap_shared + 0.9 * row.weights_bytes, (row.peak_shared_bytes, heap_shared)


def test_fallback_peak_holds_the_mapping_beside_the_copy(fallback_run):
    """The kernel's RSS peak counts file pages too: the failed attempt's mapping, resident and
    still mapped while the direct read's copies are made, adds about W to the private peak
    (measured: 830 MiB peak RSS over a 539 MiB private peak at W = 256 MiB; 574 MiB, heap's,
    when the mapping was released untouched before the read)."""
    for row in results(fallback_run, FALLBACK_ROWS):
        assert row.peak_rss_bytes >= row.peak_private_bytes + 0.9 * row.weights_bytes, (
            row.peak_rss_bytes,
            row.peak_private_bytes,
            row.weights_bytes,
        )


def test_concurrency_splits_the_timed_runs_over_threads(fallback_run):
    for row in results(fallback_run, FALLBACK_ROWS):
        assert (row.runs, row.concurrency) == (4, 2)
        assert row.inferences_per_s > 0


def test_baseline_compare_has_the_start_up_and_latency_figures(peak_run):
    """--baseline compares the peak, init + first inference and latency (the run against itself
    here: every delta is zero, the figures are what matters)."""
    from harness.core.compare import compare
    from harness.core.rundata import load_run

    run = load_run(peak_run.out)
    changes = {c.metric.key: c for c in compare(run, run).changes}
    for key in ("heap_peak_private", "mapped_startup", "mapped_latency_p50", "latency_p50_ratio", "first_run_ratio"):
        assert changes[key].current and changes[key].delta == 0, key


def test_report_draws_peak_vs_steady_and_projects_the_peak(peak_run, run_harness, tmp_path):
    out = tmp_path / "report.html"
    outcome = run_harness("report", str(peak_run.out), "--project-to", "8x4GiB", "--out", str(out), check_exit=None)
    html = out.read_text(encoding="utf-8")
    assert "Start-up peak vs steady memory per mode" in html and "<svg" in html, outcome.stderr
    assert "start-up peak of 8 sessions started together" in html


#: Every test above that checks each row of a shared run, with the run it checks.
ROW_CHECKS = {
    "test_heap_peak_holds_the_weights_and_mapped_stays_far_below": ("peak_run",),
    "test_every_peak_names_its_phase_and_rate": ("peak_run",),
    "test_peak_is_at_least_the_steady_private_memory": ("peak_run",),
    "test_group_peak_figures_and_system_side": ("peak_run",),
    "test_runs_and_warmup_give_the_latency_figures": ("peak_run",),
    "test_fallback_peak_holds_the_copy": ("fallback_run",),
    "test_fallback_peak_holds_the_mapping_and_the_copy_at_once": ("fallback_run", "peak_run"),
    "test_fallback_peak_holds_the_mapping_beside_the_copy": ("fallback_run",),
    "test_concurrency_splits_the_timed_runs_over_threads": ("fallback_run",),
}


@pytest.mark.parametrize("name", sorted(ROW_CHECKS))
def test_a_run_without_rows_fails_every_row_check(name, tmp_path):
    """Four of these passed when the run produced no rows (every loop ran zero times): each
    must fail on a run folder with the tables' headers and nothing else. No run is started."""
    from harness.core.schema import ResultRow, SummaryRow
    from harness.core.tables import write_rows
    from harness.pytest_plugin import HarnessOutcome

    write_rows(tmp_path / "results.csv", [], ResultRow)
    write_rows(tmp_path / "summary.csv", [], SummaryRow)
    empty = HarnessOutcome(returncode=0, stdout="", stderr="", out=tmp_path)
    with pytest.raises(AssertionError, match="0 rows, expected|0 groups, expected"):
        globals()[name](*(empty for _ in ROW_CHECKS[name]))


def test_every_row_check_is_listed():
    """A test over a shared run's rows reads them through `results` / `summary` (which refuse
    a run without rows), and one that loops over them is listed in ROW_CHECKS, so the test
    above proves it cannot pass on a run that produced nothing."""
    direct, loops = [], set()
    for name, func in list(globals().items()):
        if not name.startswith("test_") or not callable(func):
            continue
        if not {"peak_run", "fallback_run"} & set(inspect.signature(func).parameters):
            continue
        source = inspect.getsource(func)
        if re.search(r"(peak_run|fallback_run)\.(results|summary)\(\)", source):
            direct.append(name)
        if re.search(r"for \w+ in (results|summary)\(", source):
            loops.add(name)
    assert not direct, f"use results(run, n) / summary(run, n), not run.results(): {direct}"
    assert loops and loops <= set(ROW_CHECKS), sorted(loops - set(ROW_CHECKS))
