"""A pass only on complete evidence, end to end with real runs.

Before: `harness report` exited 0 ("5 of 5 passed or skipped") on a killed run, an
interrupted run, a run with zero rows, header-only tables left by a full disk, and tables with
foreign columns; a group in which a worker died was summed as if all N were there and its
ratio gates passed; `--modes mapped` (a valid choice) failed the default gates as "not
measured". Now: killed / interrupted / zero-row / header-only runs are "incomplete" (exit 1);
files that are not this harness's tables are exit 2 naming the file and what is wrong; a group
with a dead worker has no sums, and a gate on its ratio fails saying it is incomplete; the
default gates that compare mapped with heap are skipped, with the reason, on a one-mode run.
"""

from __future__ import annotations

import json
import shutil
import signal

import pytest
from rel_support import assert_no_survivors, first_group_waiting, metadata, run_args

from harness.core.schema import ResultRow, SummaryRow, columns
from harness.core.tables import read_rows, write_rows

#: One xdist worker runs this module: its module fixtures (a run, a cache, an install) are made
#: once, not once on each worker (docs/testing.md).
pytestmark = pytest.mark.xdist_group("rel_evidence")

# Not `memory`: these tests judge completeness and exit codes, never a memory figure's size.


@pytest.fixture(scope="module")
def complete_run(tmp_path_factory, model_cache):
    """One real, healthy run (both modes, N=2) to derive damaged copies from."""
    from rel_support import run_quick

    out = tmp_path_factory.mktemp("complete") / "run"
    proc = run_quick(run_args(processes=2, out=out), model_cache)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return out


def _copy(run, tmp_path, name="copy"):
    target = tmp_path / name
    shutil.copytree(run, target, ignore=shutil.ignore_patterns(".harness.lock"))
    return target


def _report(run_harness, *folders, extra=()):
    return run_harness("report", *map(str, folders), "--out", str(folders[0].parent / "report.html"), *extra)


def _signalled_once_the_first_group_waits(out, model_cache, sig):
    """A run (N=2) whose worker 0 hangs, sent ``sig`` once worker 1 is ready; returns the
    ended process."""
    with first_group_waiting(out, model_cache) as proc:
        proc.send_signal(sig)
        proc.communicate(timeout=15)
    return proc


def test_a_healthy_run_passes(run_harness, complete_run, tmp_path):
    """The control: the same report command exits 0 on the untouched run."""
    outcome = _report(run_harness, _copy(complete_run, tmp_path))
    assert outcome.returncode == 0, outcome.stdout + outcome.stderr
    assert "verdict: PASS" in outcome.stdout


def test_report_on_a_killed_run_exits_1(run_harness, model_cache, tmp_path):
    """SIGKILL mid-run: metadata.json still says "running" and the tables hold only what was
    written before: incomplete, never a pass."""
    out = tmp_path / "run"
    _signalled_once_the_first_group_waits(out, model_cache, signal.SIGKILL)
    assert_no_survivors(out)
    assert metadata(out)["status"] == "running"
    outcome = _report(run_harness, out)
    assert outcome.returncode == 1, outcome.stdout + outcome.stderr
    assert "verdict: INCOMPLETE (run status is running" in outcome.stdout


def test_report_on_an_interrupted_run_with_zero_rows_exits_1(run_harness, model_cache, tmp_path):
    out = tmp_path / "run"
    proc = _signalled_once_the_first_group_waits(out, model_cache, signal.SIGINT)
    assert proc.returncode == 130
    assert metadata(out)["status"] == "interrupted"
    assert read_rows(out / "results.csv", ResultRow) == []
    outcome = _report(run_harness, out)
    assert outcome.returncode == 1, outcome.stdout + outcome.stderr
    assert "run status is interrupted" in outcome.stdout
    assert "no worker finished with a correct output" in outcome.stdout


@pytest.mark.parametrize("status", ["complete", "failed: disk full writing results.csv (No space left on device)"])
def test_report_on_header_only_tables_exits_1(run_harness, complete_run, tmp_path, status):
    """What a full disk leaves: the tables the run wrote first (headers, no rows), since the
    atomic rewrite after the first group never happened. Even a metadata.json that claims
    "complete" gets no pass without a row behind it."""
    run = _copy(complete_run, tmp_path)
    write_rows(run / "results.csv", [], ResultRow)
    write_rows(run / "summary.csv", [], SummaryRow)
    (run / "headline.json").unlink()  # written last: a run the disk stopped has none
    meta = metadata(run)
    meta["status"] = status
    (run / "metadata.json").write_text(json.dumps(meta))
    outcome = _report(run_harness, run)
    assert outcome.returncode == 1, outcome.stdout + outcome.stderr
    assert "verdict: INCOMPLETE" in outcome.stdout
    assert "no worker finished with a correct output" in outcome.stdout


@pytest.mark.parametrize(
    ("table", "damage", "expected"),
    [
        ("results.csv", "foreign", "not a results table of this harness: missing column(s)"),
        ("summary.csv", "foreign", "not a summary table of this harness: missing column(s)"),
        ("results.csv", "duplicate-column", "appear twice"),
        ("results.csv", "ragged", "cells, the header has"),
        ("results.csv", "binary", "not a text file (it holds NUL bytes)"),
        ("results.csv", "empty", "empty file, no header"),
        ("summary.csv", "bad-cell", "column processes"),
    ],
)
def test_files_that_are_not_this_harness_tables_exit_2(run_harness, complete_run, tmp_path, table, damage, expected):
    run = _copy(complete_run, tmp_path)
    path = run / table
    text = path.read_text()
    header, *lines = text.splitlines()
    if damage == "foreign":
        path.write_text("date,region,revenue,units\n2026-01-01,emea,12,3\n")
    elif damage == "duplicate-column":
        path.write_text(f"{header},target\n" + "".join(f"{line},cpu\n" for line in lines))
    elif damage == "ragged":
        path.write_text(f"{header}\n{lines[0]}\n{lines[1]},extra,cells\n")
    elif damage == "binary":
        path.write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(range(256)))
    elif damage == "empty":
        path.write_bytes(b"")
    elif damage == "bad-cell":
        cells = lines[0].split(",")
        cells[columns(SummaryRow).index("processes")] = "two"
        path.write_text("\n".join([header, ",".join(cells), *lines[1:]]) + "\n")
    outcome = _report(run_harness, run)
    assert outcome.returncode == 2, outcome.stdout + outcome.stderr
    lines_out = outcome.stderr.strip().splitlines()
    assert len(lines_out) == 1 and "Traceback" not in outcome.stderr, outcome.stderr
    assert str(path) in lines_out[0] and expected in lines_out[0], lines_out[0]


def test_a_group_with_a_dead_worker_is_not_summed_and_its_gate_fails(run_harness):
    """Worker 0 crashes in both modes: each group has one worker's memory. Before, the sums of
    the survivors were compared as if they were the groups', and a ratio gate passed on them."""
    outcome = run_harness(*run_args("--inject-worker-fault", "0=crash", "--gate", "mapped_uss_ratio<=1.5", processes=2))
    assert outcome.returncode == 1, outcome.stdout + outcome.stderr
    summary = outcome.summary()
    assert {s.mode for s in summary} == {"mapped", "heap"}
    for s in summary:
        assert s.complete is False
        assert (s.ok_workers, s.failed_workers) == (1, 1)
        assert s.sum_uss_bytes is None and s.sum_pss_bytes is None and s.sum_rss_bytes is None
        assert "worker 0 failed" in s.note
    line = next(ln for ln in outcome.stdout.splitlines() if "mapped_uss_ratio<=1.5" in ln)
    assert line.startswith("FAIL") and "not measured: incomplete data" in line and "worker 0 failed" in line, line


def test_mapped_only_run_skips_the_default_gates_that_need_both_modes(run_harness):
    """--modes mapped is valid: the default sharing gates (which apply from 128 MiB and two
    processes) are skipped with the reason, the run passes."""
    outcome = run_harness(
        "run", "--model-size", "128MiB", "--processes", "2", "--modes", "mapped", "--quiet", "--no-report"
    )
    assert outcome.returncode == 0, outcome.stdout + outcome.stderr
    pair_gates = [
        ln for ln in outcome.stdout.splitlines() if "_ratio" in ln and ln.startswith(("PASS", "SKIP", "FAIL"))
    ]
    assert len(pair_gates) == 3, outcome.stdout
    for line in pair_gates:
        assert line.startswith("SKIP") and "compares mapped with heap, but only mapped mode was run" in line, line
    assert "verdict: PASS" in outcome.stdout
    # a gate asked for later, at report time, fails and says why
    again = run_harness("report", str(outcome.out), "--gate", "mapped_pss_ratio<=0.9")
    assert again.returncode == 1
    line = next(ln for ln in again.stdout.splitlines() if "mapped_pss_ratio<=0.9" in ln)
    assert line.startswith("FAIL") and "only mapped mode was measured" in line, line


def test_tables_of_an_older_harness_get_no_assumed_completeness(run_harness, complete_run, tmp_path):
    """Tables written before completeness existed (no memory_ok, complete, system_noise_bytes,
    note columns) still load, but nothing vouches for their samples: the groups are
    incomplete and the report says why, instead of passing on trust."""
    import csv

    run = _copy(complete_run, tmp_path)
    meta = json.loads((run / "metadata.json").read_text())
    (run / "metadata.json").write_text(json.dumps(meta | {"format_version": 1}))  # what that harness wrote
    for name, dropped in (("results.csv", {"memory_ok"}), ("summary.csv", {"complete", "system_noise_bytes", "note"})):
        with open(run / name, newline="") as handle:
            rows = list(csv.DictReader(handle))
        keep = [c for c in rows[0] if c not in dropped]
        with open(run / name, "w", newline="") as handle:
            writer = csv.DictWriter(handle, keep, extrasaction="ignore", lineterminator="\n")
            writer.writeheader()
            writer.writerows(rows)
    outcome = _report(run_harness, run)
    assert outcome.returncode == 1, outcome.stdout + outcome.stderr
    assert "verdict: INCOMPLETE" in outcome.stdout and "without complete evidence" in outcome.stdout
