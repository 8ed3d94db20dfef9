"""Issue 42: the memory-limit columns (format version 3) are cross-checked like every other
figure a report believes: an ``oom_killed`` row that exited 0 (or with no error, or without a
limit), a row limit that is not the run's, or summary.csv's ``oom_workers`` /
``memory_limit_bytes`` against the rows: `report` exits 2 in one line. Before: PASS."""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import pytest
from rel_support import one_line_error, run_args, run_quick

pytestmark = pytest.mark.xdist_group("rel_limit_columns")
LIMIT = str(512 * 1024**2)


@pytest.fixture(scope="module")
def a_run(tmp_path_factory, model_cache):
    out = tmp_path_factory.mktemp("limitcols") / "run"
    proc = run_quick(run_args(modes="mapped,heap", out=out), model_cache)
    assert proc.returncode == 0, proc.stderr
    return out


def _edit(path: Path, change) -> None:
    with open(path, newline="") as handle:
        rows = list(csv.DictReader(handle))
    fields = list(rows[0])
    for index, row in enumerate(rows):
        change(index, row)
    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fields)
        writer.writeheader()
        writer.writerows(rows)


def _limited_copy(run: Path, to: Path) -> Path:
    """The run as if it had run under a limit nothing reached: every file consistent."""
    shutil.copytree(run, to, ignore=shutil.ignore_patterns(".harness.lock", "headline.json"))
    meta = json.loads((to / "metadata.json").read_text())
    meta["run"]["memory_limit_bytes"] = int(LIMIT)
    (to / "metadata.json").write_text(json.dumps(meta))
    _edit(to / "results.csv", lambda i, r: r.update(memory_limit_bytes=LIMIT, oom_killed="False"))
    _edit(to / "summary.csv", lambda i, r: r.update(memory_limit_bytes=LIMIT, oom_workers="0"))
    return to


def _report(run: Path, model_cache: Path, tmp_path: Path):
    return run_quick(["report", str(run), "--out", str(tmp_path / "r.html")], model_cache, timeout=120)


TAMPER = {
    "oom row that exited 0": ("results.csv", lambda i, r: i == 0 and r.update(oom_killed="True"), "oom_killed=True"),
    "row limit not the run's": ("results.csv", lambda i, r: i == 0 and r.update(memory_limit_bytes="1048576"), "limit"),
    "summary oom_workers without oom rows": (
        "summary.csv",
        lambda i, r: i == 0 and r.update(oom_workers="1"),
        "oom_workers",
    ),
    "summary limit not the rows'": (
        "summary.csv",
        lambda i, r: i == 0 and r.update(memory_limit_bytes=""),
        "memory_limit",
    ),
}


def test_a_consistent_limited_run_is_reported(a_run, model_cache, tmp_path):
    proc = _report(_limited_copy(a_run, tmp_path / "run"), model_cache, tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize("name, change, expected", list(TAMPER.values()), ids=list(TAMPER))
def test_limit_columns_that_contradict_are_refused(a_run, model_cache, tmp_path, name, change, expected):
    run = _limited_copy(a_run, tmp_path / "run")
    _edit(run / name, change)
    one_line_error(_report(run, model_cache, tmp_path), 2, "contradicts", expected)
    assert not (tmp_path / "r.html").exists()


def test_an_oom_row_without_a_limit_is_refused(a_run, model_cache, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(a_run, run, ignore=shutil.ignore_patterns(".harness.lock", "headline.json"))
    _edit(run / "results.csv", lambda i, r: i == 0 and r.update(oom_killed="True", exit_code="-9", error="x"))
    one_line_error(_report(run, model_cache, tmp_path), 2, "contradicts", "without a memory limit")
