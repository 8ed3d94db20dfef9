"""The physics of file mapping, measured for real with N worker processes (memory marker:
these run in one xdist group so two measurements never overlap).

Assertions are ratios with wide margins, never absolute times: a noisy 2-core CI machine
must not flake them, but a harness that copied weights in "mapped" mode fails them.
"""

from __future__ import annotations

import json

import pytest

from harness.core.schema import ResultRow, columns

pytestmark = pytest.mark.memory


@pytest.fixture(scope="module")
def cpu_run(harness_options, harness_runner, request, tmp_path_factory):
    """One real run of the default target at N processes, both modes (shared by the tests; with
    --fmw-report-dir it is kept there, reported with the outcome of this module's tests)."""
    if harness_options.target != "cpu":
        pytest.skip("the mapping-physics tests measure --target cpu")
    n = max(*harness_options.processes, 2)  # sharing needs at least two processes
    args = ["run", "--target", "cpu", "--processes", str(n), *harness_options.model_args(), "--quiet", "--no-report"]
    outcome = harness_runner.run(*args, owner=request.node.nodeid, scratch=tmp_path_factory.mktemp("cpu-run"))
    assert outcome.returncode == 0, outcome.stdout + outcome.stderr
    return outcome, n


def _by_mode(rows):
    return {mode: [r for r in rows if r.mode == mode] for mode in ("mapped", "heap")}


def test_every_worker_ran_and_checked_its_output(cpu_run):
    outcome, n = cpu_run
    rows = outcome.results()
    assert len(rows) == 2 * n
    assert all(r.output_ok and not r.error for r in rows), [r.error for r in rows]
    assert {r.path_taken for r in _by_mode(rows)["mapped"]} == {"mapped"}
    assert {r.path_taken for r in _by_mode(rows)["heap"]} == {"heap"}
    assert len({r.pid for r in rows}) == 2 * n, "each row is its own process"


def test_mapped_private_memory_is_far_below_heap(cpu_run):
    """Summed USS: mapped shares one copy of the weights, heap holds N private copies."""
    outcome, n = cpu_run
    rows = _by_mode(outcome.results())
    weights = rows["heap"][0].weights_bytes
    heap_uss = sum(r.uss_bytes for r in rows["heap"])
    mapped_uss = sum(r.uss_bytes for r in rows["mapped"])
    assert heap_uss >= 0.9 * n * weights, "heap mode must hold N private copies"
    assert mapped_uss < heap_uss - 0.8 * (n - 1) * weights
    assert mapped_uss < 0.6 * heap_uss


def test_pss_counts_shared_weights_once(cpu_run):
    """Summed PSS (Linux): mapped ~ one copy of the weights + overhead; heap ~ N copies."""
    outcome, n = cpu_run
    rows = _by_mode(outcome.results())
    if rows["heap"][0].pss_bytes is None:
        pytest.skip("no PSS on this platform")
    weights = rows["heap"][0].weights_bytes
    heap_pss = sum(r.pss_bytes for r in rows["heap"])
    mapped_pss = sum(r.pss_bytes for r in rows["mapped"])
    overhead = heap_pss - n * weights  # what N workers cost besides weights
    assert heap_pss >= 0.95 * n * weights
    assert mapped_pss <= 1.25 * weights + overhead


def test_rss_cannot_show_the_difference(cpu_run):
    """RSS counts shared pages in every process: summed RSS is about equal in both modes,
    which is why the report never uses it to claim a saving."""
    outcome, _ = cpu_run
    rows = _by_mode(outcome.results())
    heap_rss = sum(r.rss_bytes for r in rows["heap"])
    mapped_rss = sum(r.rss_bytes for r in rows["mapped"])
    assert 0.8 < mapped_rss / heap_rss < 1.2


def test_mapped_init_is_much_faster(cpu_run):
    """Mapping copies nothing: median init well under half of the heap path's."""
    outcome, _ = cpu_run
    summary = {s.mode: s for s in outcome.summary()}
    assert summary["mapped"].init_s_median < 0.5 * summary["heap"].init_s_median


def test_result_files_follow_the_schema(cpu_run):
    outcome, n = cpu_run
    header = (outcome.out / "results.csv").read_text().splitlines()[0].split(",")
    assert header == columns(ResultRow)
    meta = json.loads((outcome.out / "metadata.json").read_text())
    assert meta["status"] == "complete"
    assert meta["run"]["processes"] == [n]
    for key in ("os", "arch", "cpu", "ram_bytes", "python", "onnxruntime", "onnxruntime_qnn", "qnn_sdk"):
        assert key in meta["env"]
    assert meta["env"]["onnxruntime"]
    assert (outcome.out / "summary.csv").exists()


def test_stdout_table_shows_both_modes_and_ratios(cpu_run):
    outcome, _ = cpu_run
    assert "mapped/heap" in outcome.stdout
    assert "sum PSS" in outcome.stdout or "sum USS" in outcome.stdout


def test_ort_native_peer_baseline(run_harness, harness_options):
    """ORT mapping its own external data is the peer baseline; it shares pages the same way."""
    size = min(harness_options.model_size, 64 * 1024**2)
    outcome = run_harness(
        "run", "--target", "ort-native", "--model-size", str(size), "--processes", "2", "--quiet", "--no-report"
    )
    assert outcome.returncode == 0, outcome.stdout + outcome.stderr
    rows = _by_mode(outcome.results())
    assert sum(r.uss_bytes for r in rows["mapped"]) < 0.6 * sum(r.uss_bytes for r in rows["heap"])


def test_ort_native_mapped_workers_hold_no_copy_of_a_small_model(run_harness):
    """Issue 43 item 2: a mapped ort-native worker of a 2 MiB model held ~1.9 MiB beyond its
    control (the worker's own evidence read of its memory maps, which the control did not do),
    called "Mapped workers still copied weights"; against its own target's weightless twin it
    holds well under half its weights, while the heap workers hold one copy each."""
    outcome = run_harness("run", "--target", "ort-native", "--model-size", "2MiB", "--processes", "2", "--quiet")
    assert outcome.returncode == 0, outcome.stdout + outcome.stderr
    rows = _by_mode(outcome.results())
    weights = rows["mapped"][0].weights_bytes
    assert all(r.copied_bytes is not None and r.copied_bytes < 0.25 * weights for r in rows["mapped"]), [
        r.copied_bytes for r in rows["mapped"]
    ]
    assert all(r.copied_bytes >= 0.9 * weights for r in rows["heap"]), [r.copied_bytes for r in rows["heap"]]
    assert "still copied" not in outcome.stdout


def test_sessions_per_process_share_one_mapping(run_harness):
    """M sessions in one worker: mapped keeps one copy, heap one copy per session."""
    outcome = run_harness(
        "run", "--model-size", "32MiB", "--processes", "1", "--sessions-per-process", "3", "--quiet", "--no-report"
    )
    assert outcome.returncode == 0, outcome.stdout + outcome.stderr
    rows = _by_mode(outcome.results())
    weights = rows["heap"][0].weights_bytes
    assert rows["heap"][0].uss_bytes >= 2.7 * weights
    assert rows["mapped"][0].uss_bytes < rows["heap"][0].uss_bytes - 1.5 * weights


def test_rerun_into_the_same_out_folder_measures_afresh(run_harness, tmp_path):
    """A second run into the same --out (--replace) must not see the first run's worker files: a
    stale "ready" record would end the barrier before the new workers loaded anything."""
    out = tmp_path / "same"
    for again in ((), ("--replace",)):
        outcome = run_harness(
            "run",
            "--model-size",
            "16MiB",
            "--processes",
            "2",
            "--modes",
            "heap",
            "--quiet",
            "--no-report",
            *again,
            out=out,
        )
        assert outcome.returncode == 0, outcome.stdout + outcome.stderr
    rows = outcome.results()
    assert len(rows) == 2
    assert all(r.uss_bytes >= 0.9 * r.weights_bytes for r in rows), [(r.uss_bytes, r.weights_bytes) for r in rows]
