"""The one child-job runner of the harness (`harness.contract.spawn.run_job`): the QNN compile child and
ORT's offline work both go through it, so its status relay, result, deadline and kill are tested once here."""

from __future__ import annotations

import os
import time
from pathlib import Path

import psutil
import pytest

from harness.contract.spawn import run_job, signal_name, tell_status

#: A child that says what it does, waits until the parent has heard it, then writes its result.
TALKING_CHILD = """
import json, sys, time
from pathlib import Path
from harness.contract.spawn import tell_status
job = json.loads(Path(sys.argv[1]).read_text())
Path(job["pid_file"]).write_text(str(__import__("os").getpid()))
tell_status(job, "step one")
deadline = time.monotonic() + 60
while not Path(job["heard"]).exists() and time.monotonic() < deadline:
    time.sleep(0.01)
if job.get("hang"):
    time.sleep(600)
Path(job["result"]).write_text(json.dumps({"ok": True, "heard": Path(job["heard"]).exists()}))
"""


@pytest.fixture
def child_module(tmp_path, monkeypatch):
    """``talking_child``, importable by the child through PYTHONPATH (python_child keeps the variable)."""
    modules = tmp_path / "modules"
    modules.mkdir()
    (modules / "talking_child.py").write_text(TALKING_CHILD)
    monkeypatch.setenv("PYTHONPATH", str(modules))
    return "talking_child"


def _job(tmp_path: Path, **extra) -> dict:
    return {"pid_file": str(tmp_path / "pid"), "heard": str(tmp_path / "heard"), **extra}


def test_the_parent_hears_each_status_line_and_reads_the_result(tmp_path, child_module):
    heard = []

    def on_status(text: str) -> None:
        heard.append(text)
        Path(tmp_path / "heard").touch()

    folder = tmp_path / "job"
    folder.mkdir()
    with open(tmp_path / "child.log", "wb") as log:
        code, result = run_job(
            child_module, _job(tmp_path), log, folder, timeout_s=60, poll_s=0.05, on_status=on_status
        )
    assert (code, result, heard) == (0, {"ok": True, "heard": True}, ["step one"])


def test_a_child_past_its_deadline_is_killed_and_gives_no_result(tmp_path, child_module):
    (tmp_path / "heard").touch()
    folder = tmp_path / "job"
    folder.mkdir()
    t0 = time.monotonic()
    with open(tmp_path / "child.log", "wb") as log:
        code, result = run_job(child_module, _job(tmp_path, hang=True), log, folder, timeout_s=3, poll_s=0.05)
    assert (code, result) == (None, None)
    assert time.monotonic() - t0 < 30
    pid = int((tmp_path / "pid").read_text())
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


def test_a_child_without_a_result_gives_its_exit_code(tmp_path):
    folder = tmp_path / "job"
    folder.mkdir()
    with open(tmp_path / "child.log", "wb") as log:
        code, result = run_job("harness.no_such_module", {}, log, folder, timeout_s=60, poll_s=0.05)
    assert code == 1 and result is None
    assert b"No module named" in (tmp_path / "child.log").read_bytes()


def test_status_is_best_effort_and_signals_are_named():
    tell_status({}, "nowhere to say it")  # no status file: nothing raised
    tell_status({"status": os.devnull + "/x"}, "unwritable")
    assert signal_name(-9) == "SIGKILL"
    assert signal_name(-200) == "signal 200"
