"""The kill-on-close job object of `harness.contract.spawn`, checked against a real kernel32
(Wine's): a C probe (`_wine_probe.c`, compiled with mingw at test time) creates a job with the
harness's own limit class and flags (`mapper_impl._winapi`, the bindings spawn.py uses), puts a
launcher in it that starts the "worker" grandchild (a venv launcher and the real interpreter),
then closes or loses the job's handle: both must be gone; and the worker's own pid is checked
against the launcher's. Skips, with the reason, where Wine or mingw is not installed (fixtures:
conftest.py)."""

from __future__ import annotations

import sys

import _wine_fixtures
import pytest
from _wine_exec import wine_path

from mapper_impl import _winapi

mingw, wine = _wine_fixtures.mingw, _wine_fixtures.wine  # the session fixtures, for pytest
pytestmark = [
    pytest.mark.xdist_group("wine"),
    pytest.mark.skipif(
        sys.platform == "win32",
        reason="Linux's stand-in: on Windows the job object runs for real (suites/harness/test_spawn.py)",
    ),
]


@pytest.mark.parametrize("mode", ["job", "lost"])
def test_kill_on_close_job_ends_launcher_and_worker(wine, mode):
    """Closing the job's handle ("job"), or its owner exiting without closing it ("lost", the
    harness crashing), ends the launcher and the worker it started."""
    run, folder = wine
    flags = hex(_winapi.JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE)
    lines = run(
        mode, str(_winapi.JOB_OBJECT_EXTENDED_LIMIT_INFORMATION_CLASS), flags, wine_path(str(folder / f"{mode}.pid"))
    )
    created, outcome = lines[0], lines[-1]
    assert created["job"] and created["set"] and created["assigned"] and created["worker"], lines
    assert outcome["worker_gone"] is True, lines
    assert outcome.get("launcher_gone", outcome.get("owner_gone")) is True, lines


def test_without_the_kill_flag_the_worker_survives(wine):
    """The negative control: the same probe with no limit flag leaves the worker running (the
    probe then ends it), so the test above can fail."""
    run, folder = wine
    # 2 s for each process to end: the sleepers never end by themselves (60 s), so the wait
    # only bounds the test's length, it is no timing assertion.
    lines = run(
        "job",
        str(_winapi.JOB_OBJECT_EXTENDED_LIMIT_INFORMATION_CLASS),
        "0",
        wine_path(str(folder / "none.pid")),
        "2000",
    )
    assert lines[-1]["worker_gone"] is False, lines


def test_worker_reports_its_own_pid_below_the_launcher_and_inside_the_job(wine):
    """What `spawn.worker_pid_in_tree` relies on, under a real kernel32: the pid the worker
    reports for itself (GetCurrentProcessId) is not the launcher's, the process snapshot that
    psutil's children() reads on Windows names the launcher as its parent (so the reported pid
    is accepted as the spawned process's descendant), and the launcher's child is in the
    launcher's job without being assigned (so the kill-on-close job reaches it)."""
    run, folder = wine
    flags = hex(_winapi.JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE)
    created, tree, outcome = run(
        "tree", str(_winapi.JOB_OBJECT_EXTENDED_LIMIT_INFORMATION_CLASS), flags, wine_path(str(folder / "tree.pid"))
    )
    assert created["assigned"] and created["worker"], created
    assert tree["worker_self"] == created["worker"] != tree["launcher"] == created["launcher"], tree
    assert tree["worker_parent"] == tree["launcher"], tree
    assert tree["worker_in_job"] is True and tree["launcher_in_job"] is True, tree
    assert outcome["worker_gone"] is True, outcome
