"""`run --memory-limit` and `capacity` against the kernel's memory controller: real cgroups, real
OOM kills, real workers. Each test skips, with the reason, where the controller is missing or
this user cannot make a cgroup (CI runs as root on a cgroup v1 machine: they run there). The
measuring ones carry the memory marker (one xdist group: no two memory measurements overlap),
and use 64 MiB weights with limits sized from them. Refusals need no controller."""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from conftest import harness_env, one_line_error
from harness.core.units import fmt_bytes
from harness.runner import _cgroup
from harness.runner.preflight import RUNTIME_FLOOR_BYTES

MIB = 1024**2
WEIGHTS = "64MiB"
#: Three heap workers hold at least 3 x (64 MiB + a runtime) at once even after their start-up
#: peaks: more than 4 x 64 MiB, so the limit must end one; the mapped group (the weights' pages
#: once, three workers and the control at ~30 MiB each) stays well below it.
LIMIT = "256MiB"
WAIT_S = 120.0


def _hierarchy() -> _cgroup.Hierarchy:
    """The cgroup hierarchy runs use, after proving a cgroup can be made; skip otherwise."""
    if not sys.platform.startswith("linux"):
        pytest.skip("memory containers are cgroups on Linux (the Windows job is test_wine_jobmem.py)")
    try:
        found = _cgroup.find()
        _cgroup.remove(_cgroup.create(found, f"{_cgroup.owner_tag()}test", 64 * MIB))
    except _cgroup.Unavailable as err:
        pytest.skip(f"no memory cgroup here: {err}")
    return found


def _start(args: list[str], cwd: Path, model_cache: Path, **popen) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "harness", *args],
        cwd=cwd,
        env=harness_env(model_cache),
        stdin=subprocess.DEVNULL,
        stdout=open(cwd / "stdout.txt", "w"),  # noqa: SIM115 - the child holds them; closed at exit
        stderr=open(cwd / "stderr.txt", "w"),  # noqa: SIM115
        **popen,
    )


def _theirs(hierarchy: _cgroup.Hierarchy, pid: int) -> list[Path]:
    """The cgroups a harness of this pid made (its tag starts with its pid)."""
    return _cgroup.ours(hierarchy.parent, f"{_cgroup.PREFIX}{_cgroup.pid_namespace()}-{pid}-")


def _rows(out: Path) -> list[dict[str, str]]:
    with open(out / "results.csv", newline="") as handle:
        return list(csv.DictReader(handle))


@pytest.fixture(scope="module")
def limited_run(model_cache, tmp_path_factory):
    """One `run --memory-limit` shared by the tests below: 64 MiB weights, N=3, under 256 MiB,
    started with a cgroup a killed run left behind (its owner's pid is this test process's, its
    start time another: not us), a process still in it."""
    hierarchy = _hierarchy()
    folder = tmp_path_factory.mktemp("limited")
    stale = hierarchy.parent / f"{_cgroup.PREFIX}{_cgroup.pid_namespace()}-{os.getpid()}-1-g1"
    stale.mkdir()
    sleeper = subprocess.Popen(["sleep", "600"])
    try:
        (stale / "cgroup.procs").write_text(str(sleeper.pid))
        args = ["run", "--model-size", WEIGHTS, "--processes", "3", "--memory-limit", LIMIT, "--no-report"]
        args.append("--sequential-timing")  # its workers, one at a time, under the limit too
        proc = _start([*args, "--out", str(folder / "run")], folder, model_cache)
        code = proc.wait(timeout=600)
        sleeper_code = sleeper.wait(timeout=WAIT_S)
    finally:
        if sleeper.poll() is None:
            sleeper.kill()
        _cgroup.remove(stale)
    return hierarchy, proc.pid, code, folder, stale, sleeper_code


@pytest.mark.memory
def test_heap_workers_ended_by_the_limit_mapped_workers_pass(limited_run):
    hierarchy, pid, code, folder, _, _ = limited_run
    assert code == 1, (folder / "stderr.txt").read_text()
    out = folder / "run"
    rows = _rows(out)
    heap = [r for r in rows if r["mode"] == "heap"]
    mapped = [r for r in rows if r["mode"] == "mapped"]
    ended = [r for r in heap if r["oom_killed"] == "True"]
    assert ended, heap
    for row in ended:
        assert row["error"].startswith("out of memory at the limit (256.0 MiB): "), row["error"]
        assert row["exit_code"] == str(-signal.SIGKILL)
    assert all(r["output_ok"] == "True" and r["oom_killed"] == "False" for r in mapped), mapped
    assert {r["start"] for r in rows} == {"concurrent", "sequential"}
    assert {r["memory_limit_bytes"] for r in rows} == {str(256 * MIB)}  # the timing pass's rows too
    assert all(0 < int(r["container_peak_bytes"]) <= 256 * MIB for r in rows)
    meta = json.loads((out / "metadata.json").read_text())
    assert meta["run"]["memory_limit_bytes"] == 256 * MIB
    assert all(r["page_cache"] in ("cold", "cold-unverified") for r in rows)  # evicted before each group
    assert not _theirs(hierarchy, pid)


@pytest.mark.memory
def test_a_cgroup_left_by_a_killed_run_is_removed_at_the_next_start(limited_run):
    """The run killed the process left in the dead run's cgroup and removed the cgroup, saying
    so on the progress stream; a live owner's cgroups are never touched (see the unit test)."""
    _, _, _, folder, stale, sleeper_code = limited_run
    assert sleeper_code == -signal.SIGKILL and not stale.exists()
    expected = f"memory limit: removed {stale.name}, left behind by a run that was killed"
    assert expected in (folder / "stderr.txt").read_text()


def _cmdline(proc: psutil.Process) -> str:
    """A child's command line, or "" for one that exited meanwhile (a short-lived child, such
    as the page-cache eviction's, can be a zombie for an instant: its command line is gone)."""
    try:
        return " ".join(proc.cmdline())
    except psutil.Error:
        return ""


def _members_and_reaper(hierarchy: _cgroup.Hierarchy, harness: psutil.Process) -> tuple[list[int], int]:
    """Once a probe's workers are in their cgroup: their pids and the reaper's."""
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        members = [pid for path in _theirs(hierarchy, harness.pid) for pid in _cgroup._pids(path)]
        reapers = [p.pid for p in harness.children() if "harness.runner._reaper" in _cmdline(p)]
        if members and reapers:
            return members, reapers[0]
        time.sleep(0.05)
    raise AssertionError("no worker joined a cgroup in time")


@pytest.mark.memory
@pytest.mark.parametrize("how", ["ctrl-c", "sigterm", "sigkill"])
def test_an_interrupted_capacity_run_leaves_no_cgroup_and_no_process(tmp_path, model_cache, how):
    """Ctrl-C (SIGINT to the terminal's process group), SIGTERM, or SIGKILL of the harness while
    a probe's workers run: afterwards no cgroup of it and none of its processes (the workers,
    the reaper) exist. A killed harness cannot clean up: its reaper does."""
    hierarchy = _hierarchy()
    args = ["capacity", "--model-size", WEIGHTS, "--memory-limit", LIMIT, "--max-processes", "2"]
    proc = _start([*args, "--out", str(tmp_path / "run")], tmp_path, model_cache, start_new_session=True)
    try:
        members, reaper = _members_and_reaper(hierarchy, psutil.Process(proc.pid))
        if how == "ctrl-c":
            os.killpg(proc.pid, signal.SIGINT)
        else:
            proc.send_signal(signal.SIGTERM if how == "sigterm" else signal.SIGKILL)
        code = proc.wait(timeout=WAIT_S)
        psutil.wait_procs([psutil.Process(p) for p in [reaper, *members] if psutil.pid_exists(p)], timeout=WAIT_S)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert code == (-signal.SIGKILL if how == "sigkill" else 130), (tmp_path / "stderr.txt").read_text()
    assert not _theirs(hierarchy, proc.pid)
    assert not [p for p in [reaper, *members] if psutil.pid_exists(p) and psutil.Process(p).status() != "zombie"]


def test_bad_limits_are_refused_before_work(run_harness):
    base = ["run", "--model-size", WEIGHTS, "--processes", "1"]
    available = psutil.virtual_memory().available
    one_line_error(run_harness(*base, "--memory-limit", "64TiB"), 2, "--memory-limit 64.0 TiB: more than the")
    floor = f"below one worker's runtime floor ({fmt_bytes(RUNTIME_FLOOR_BYTES)}"
    one_line_error(run_harness(*base, "--memory-limit", "16MiB"), 2, "--memory-limit 16.0 MiB: ", floor)
    one_line_error(run_harness(*base, "--memory-limit", "lots"), 2, "--memory-limit", "'lots'")
    one_line_error(run_harness("capacity", "--model-size", WEIGHTS), 2, "capacity needs --memory-limit SIZE")
    assert available > 64 * MIB


@pytest.mark.parametrize(
    ("setup", "missing"),
    [
        ("umount /sys/fs/cgroup/memory", "no cgroup memory controller is mounted"),
        (
            "mount --bind /sys/fs/cgroup/memory /sys/fs/cgroup/memory && "
            "mount -o remount,bind,ro /sys/fs/cgroup/memory",
            "cannot create a cgroup in",
        ),
    ],
    ids=["no-controller", "read-only-hierarchy"],
)
def test_without_the_controller_or_the_right_one_line_exit_2(tmp_path, model_cache, setup, missing):
    """In a mount namespace of its own, the run sees no memory hierarchy (the controller is
    missing) or a read-only one (no right to make a cgroup): one line naming it, exit 2."""
    _hierarchy()
    if not Path("/sys/fs/cgroup/memory").is_dir() or not _which("unshare"):
        pytest.skip("needs the v1 memory hierarchy at /sys/fs/cgroup/memory and unshare(1)")
    command = f'{setup} && exec "$@"'
    argv = [sys.executable, "-m", "harness", "run", "--model-size", WEIGHTS, "--memory-limit", LIMIT]
    proc = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "sh", "-c", command, "sh", *argv, "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        env=harness_env(model_cache),
        timeout=120,
    )
    if "unshare failed" in proc.stderr or "Operation not permitted" in proc.stderr:
        pytest.skip(f"no mount namespace here: {proc.stderr.strip()}")
    one_line_error(proc, 2, "--memory-limit: ", missing)


def _which(name: str) -> bool:
    import shutil

    return shutil.which(name) is not None
