"""The kill-on-close job object of `harness.runner.spawn`, checked against a real kernel32
(Wine's): a C probe (`_wine_probe.c`, compiled with mingw at test time) creates a job with the
harness's own limit class and flags, read from `spawn.py`, puts a launcher in it that starts the
"worker" grandchild (a venv launcher and the real interpreter), then closes or loses the job's
handle: both must be gone. Skips, with the reason, where Wine or mingw is not installed (fixtures: conftest.py)."""

from __future__ import annotations

import pytest
from _wine_exec import wine_path

from harness.runner import spawn

pytestmark = pytest.mark.xdist_group("wine")


@pytest.mark.parametrize("mode", ["job", "lost"])
def test_kill_on_close_job_ends_launcher_and_worker(wine, mode):
    """Closing the job's handle ("job"), or its owner exiting without closing it ("lost", the
    harness crashing), ends the launcher and the worker it started."""
    run, folder = wine
    flags = hex(spawn._JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE)
    lines = run(mode, str(spawn._JOB_OBJECT_EXTENDED_LIMIT_INFORMATION), flags, wine_path(str(folder / f"{mode}.pid")))
    created, outcome = lines[0], lines[-1]
    assert created["job"] and created["set"] and created["assigned"] and created["worker"], lines
    assert outcome["worker_gone"] is True, lines
    assert outcome.get("launcher_gone", outcome.get("owner_gone")) is True, lines


def test_without_the_kill_flag_the_worker_survives(wine):
    """The negative control: the same probe with no limit flag leaves the worker running (the
    probe then ends it), so the test above can fail."""
    run, folder = wine
    lines = run("job", str(spawn._JOB_OBJECT_EXTENDED_LIMIT_INFORMATION), "0", wine_path(str(folder / "none.pid")))
    assert lines[-1]["worker_gone"] is False, lines
