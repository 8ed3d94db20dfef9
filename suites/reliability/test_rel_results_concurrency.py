"""Nothing lost under concurrency, with real processes:

- several processes appending to one --history at the same moment (a fleet sharing one file,
  as the README invites) lose no line and record no run twice (an OS file lock);
- runs started in the same second without --out get folders of their own (created with an
  atomic mkdir and a numbered suffix);
- an --out holding an earlier run is refused (exit 2, one line, the run untouched) by `run` and
  `bench` unless --replace is given; then it holds only the new run's files (the old
  report.html, workers/ and logs/ are gone, stderr says so), and a second run into a folder
  another run is writing is refused.

Before: appends raced at the file's creation and lost lines, simultaneous runs shared
``results/run-<second>``, a reused --out kept the previous run's report.html, and (issue 28)
`run --out DIR` over an earlier run deleted it without a word (exit 0).
"""

from __future__ import annotations

import csv
import subprocess
import sys
import textwrap
import time

import pytest
from rel_support import (
    metadata,
    record_as_written,
    run_args,
    run_quick,
    start_harness,
    start_hung_run,
    stop,
    wait_for,
)

from conftest import ROOT, harness_env

#: One xdist worker runs this module: its module fixtures (a run, a cache, an install) are made
#: once, not once on each worker (docs/testing.md).
pytestmark = pytest.mark.xdist_group("rel_results_concurrency")

APPENDERS = 8
APPENDS_EACH = 6

APPEND_CHILD = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path

    from harness.core.rundata import load_run
    from harness.core.verdict import judge
    from reports.history import append_history

    run_dir, history, start_at, name = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4]
    runs = []
    for k in range(int(sys.argv[5])):
        run = load_run(run_dir)
        run.meta["run"]["run_id"] = f"{name}-{k}"
        runs.append(judge(run))
    while time.time() < start_at:  # every appender starts at the same instant
        time.sleep(0.001)
    for judgement in runs:
        assert append_history(history, judgement)
    """
)


@pytest.fixture(scope="module")
def a_run(tmp_path_factory, model_cache):
    out = tmp_path_factory.mktemp("run") / "run"
    proc = run_quick(run_args(out=out), model_cache)
    assert proc.returncode == 0, proc.stderr
    return out


def test_concurrent_history_appends_lose_nothing(a_run, model_cache, tmp_path):
    history = tmp_path / "fleet" / "history.csv"
    start_at = time.time() + 3.0  # after every child has imported and loaded its runs
    children = [
        subprocess.Popen(
            [sys.executable, "-c", APPEND_CHILD, str(a_run), str(history), str(start_at), f"p{i}", str(APPENDS_EACH)],
            cwd=ROOT,
            env=harness_env(model_cache),
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(APPENDERS)
    ]
    errors = [child.communicate(timeout=120)[1] for child in children]
    assert [c.returncode for c in children] == [0] * APPENDERS, errors
    with open(history, newline="") as handle:
        rows = list(csv.DictReader(handle))
    text = history.read_text()
    assert text.count("record,run_id,") == 1, "the header was written more than once"
    heads = [r["run_id"] for r in rows if r["record"] == "headline"]
    expected = sorted(f"p{i}-{k}" for i in range(APPENDERS) for k in range(APPENDS_EACH))
    assert sorted(heads) == expected, f"{len(expected) - len(heads)} run(s) lost"
    summaries = [r for r in rows if r["record"] == "summary"]
    assert len(summaries) == len(expected) * 2  # two groups (mapped, heap) per run
    assert all(r["record"] in ("summary", "headline") for r in rows), "a torn line"


def test_runs_started_together_without_out_get_their_own_folders(model_cache, tmp_path):
    """Four runs released at the same instant, all defaulting to results/run-<date>-<time>."""
    runs = 4
    procs = [start_harness(run_args(modes="mapped"), model_cache, cwd=tmp_path, new_session=False) for _ in range(runs)]
    outputs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0] * runs, outputs
    folders = sorted((tmp_path / "results").iterdir())
    assert len(folders) == runs, [f.name for f in folders]
    for folder in folders:
        meta = metadata(folder)
        assert meta["status"] == "complete" and meta["run"]["run_id"] == folder.name
        assert (folder / "results.csv").read_text().count("\ncpu,mapped,") == 1  # its own worker only
        assert sorted(p.name for p in (folder / "workers").iterdir()) == ["cpu-mapped-n1-r0"]


@pytest.mark.parametrize("command", ["run", "bench"])
def test_an_earlier_run_in_out_is_refused_without_replace(a_run, model_cache, tmp_path, command):
    """Data loss: an --out holding an earlier run is refused before any work, one line naming
    --replace; nothing of the earlier run changes."""
    from rel_support import copy_run, one_line_error, tree_state

    out = copy_run(a_run, tmp_path / "earlier")
    before = tree_state(out)
    cache = tmp_path / "cache"
    args = (
        run_args(out=out, cache=cache) if command == "run" else ["bench", "--out", str(out), "--cache-dir", str(cache)]
    )
    proc = run_quick(args, model_cache, timeout=120)
    one_line_error(proc, 2, f"--out {out}", "holds an earlier run", "--replace")
    assert tree_state(out) == before and not cache.exists()


def test_reused_out_holds_only_the_new_runs_files(model_cache, tmp_path):
    out = tmp_path / "run"
    first = run_quick(run_args(modes="mapped,heap", report=True, out=out), model_cache)
    assert first.returncode == 0 and (out / "report.html").is_file()
    (out / "my-notes.txt").write_text("kept: not a file a run writes")
    # what a previous qnn run leaves: its compiler's log, copied into logs/
    (out / "logs").mkdir()
    (out / "logs" / "model-htp-compile.log").write_text("a previous run's QNN compile log")
    record_as_written(out, "logs/model-htp-compile.log")
    started = metadata(out)["run"]["started"]
    time.sleep(1.1)  # a different start second, so the metadata tells the runs apart
    second = run_quick(run_args("--replace", modes="mapped", out=out), model_cache)
    assert second.returncode == 0, second.stderr
    said = [line for line in second.stderr.splitlines() if "replaced the earlier run" in line]
    assert len(said) == 1 and "report.html" in said[0] and "logs" in said[0], second.stderr
    assert not (out / "report.html").exists(), "the previous run's report is still there"
    assert not (out / "logs").exists(), "the previous run's logs/ is still there"
    assert sorted(p.name for p in (out / "workers").iterdir()) == ["cpu-mapped-n1-r0"]
    assert metadata(out)["run"]["started"] != started
    assert {line.split(",")[1] for line in (out / "results.csv").read_text().splitlines()[1:]} == {"mapped"}
    assert (out / "my-notes.txt").read_text() == "kept: not a file a run writes"


def test_a_second_run_into_a_folder_being_written_is_refused(model_cache, tmp_path):
    out = tmp_path / "run"
    first = start_hung_run(out, model_cache, processes=1, worker_timeout=300, modes="mapped")
    try:
        wait_for((out / "workers" / "cpu-mapped-n1-r0" / "w0.spec.json").exists, 60, "the first run's group", first)
        second = run_quick(run_args("--replace", report=True, out=out), model_cache)
        assert second.returncode == 2, second.stderr
        assert "another harness run is writing there" in second.stderr
        assert len(second.stderr.strip().splitlines()) == 1
        assert first.poll() is None, "the first run was disturbed"
        assert (out / "workers" / "cpu-mapped-n1-r0" / "w0.spec.json").exists()
    finally:
        stop(first)
