"""Resource edges, for real: the disk fills up (a file-size limit, RLIMIT_FSIZE, with SIGXFSZ
ignored: writes fail with EFBIG exactly as on a full disk or quota), the file descriptors run
out so a worker cannot be started (RLIMIT_NOFILE lowered on the running harness), and limits
too small for the run from the start (RLIMIT_NOFILE, RLIMIT_AS).

Each ends in one stderr line, exit 1 (ran out mid-run) or 2 (refused before work), no
traceback, no worker left, and, when the run folder exists, a ``"failed: ..."`` status in
metadata.json that says what happened. Before: tracebacks, and metadata.json said "running" or
"complete".
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time

import psutil
import pytest
from rel_support import (
    assert_no_survivors,
    end_hung_worker,
    first_group_waiting,
    one_line_error,
    run_args,
    run_quick,
    wait_for,
)

# rlimits and SIGXFSZ are POSIX: on Windows the module collects and skips (issue 33).
resource = pytest.importorskip("resource", reason="rlimits (the resource module) are POSIX")

# Not `memory`: these tests judge exit codes, status lines and leftovers, never a memory figure, and
# every limit they set is the harness process's own, so they run beside other tests.

#: A long folder name makes results_long.csv (the run id on every line) far bigger than
#: metadata.json, so a file-size limit between the two fails a table, not the status.
LONG_NAME = "run-" + "x" * 100


def _efbig_instead_of_sigxfsz() -> None:
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG instead of being killed, as on a full disk


def _while_the_first_group_waits(out, model_cache, squeeze, n: int = 2) -> tuple[subprocess.Popen, str, str]:
    """Start a run whose first group waits for a hung worker 0; once the other workers are
    ready, apply ``squeeze(harness)``, then end worker 0 (the group ends at that event, never at
    a timeout); return what the run did afterwards."""
    waiting = first_group_waiting(out, model_cache, processes=n, modes="mapped,heap", preexec=_efbig_instead_of_sigxfsz)
    with waiting as proc:
        squeeze(psutil.Process(proc.pid))
        end_hung_worker(out, f"cpu-mapped-n{n}-r0", proc=proc)
        stdout, stderr = proc.communicate(timeout=120)
    return proc, stdout, stderr


def test_disk_full_writing_the_tables_fails_the_run_with_a_status(model_cache, tmp_path, run_harness):
    out = tmp_path / LONG_NAME

    def fill_the_disk(harness: psutil.Process) -> None:
        room = (out / "metadata.json").stat().st_size + 256  # the status still fits, the tables do not
        harness.rlimit(psutil.RLIMIT_FSIZE, (room, room))

    proc, stdout, stderr = _while_the_first_group_waits(out, model_cache, fill_the_disk, n=4)
    line = one_line_error(
        subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr),
        1,
        "error: run failed: disk full writing ",
        f"what was measured before is in {out}",
    )
    assert "File too large" in line and "ulimit -f" in line
    status = json.loads((out / "metadata.json").read_text())["status"]
    assert status.startswith("failed: disk full writing "), status
    assert any(f"writing {name}" in status for name in ("results.csv", "summary.csv", "results_long.csv")), status
    assert not (out / "workers" / "cpu-heap-n4-r0").exists(), "the run went on after the disk filled"
    assert_no_survivors(out)
    # what the full disk left is not a pass: `report` says incomplete (exit 1)
    report = run_harness("report", str(out), "--out", str(tmp_path / "report.html"))
    assert report.returncode == 1, report.stdout + report.stderr
    assert "run status is failed: disk full" in report.stdout


def test_no_file_descriptors_to_start_a_worker_fails_the_run_with_a_status(model_cache, tmp_path):
    out = tmp_path / "run"

    def take_the_descriptors(harness: psutil.Process) -> None:
        # room for one more descriptor at a time: the first group's control worker
        # (started once the workers wait) cannot start, which costs only its figure; the next
        # group's first worker cannot open its pipes either, which fails the run. "Now" is once
        # the peak watch has let go of ready worker 1 (it reads each starting worker's statm
        # until that worker is done): on a busy machine its descriptor was still open, counted,
        # and freed later, which left room for the control worker. The limit is one above the
        # lowest free number, not the count: with holes below the count, a limit at the count
        # let a pipe through (the kernel hands out the lowest free numbers), and the control
        # worker once started in a full run
        wait_for(lambda: _statm_readers(harness.pid) == 1, 60, "the peak watch to read only the hung worker 0")
        soft = _lowest_free_fd(harness.pid) + 1
        harness.rlimit(psutil.RLIMIT_NOFILE, (soft, harness.rlimit(psutil.RLIMIT_NOFILE)[1]))

    proc, stdout, stderr = _while_the_first_group_waits(out, model_cache, take_the_descriptors)
    line = one_line_error(
        subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr),
        1,
        "error: run failed: out of file descriptors starting worker",
        "cpu-heap-n2-r0",
        "raise ulimit -n",
    )
    assert "Too many open files" in line
    meta = json.loads((out / "metadata.json").read_text())
    assert meta["status"].startswith("failed: out of file descriptors starting worker"), meta["status"]
    rows = (out / "results.csv").read_text().splitlines()[1:]
    assert [r.split(",")[1] for r in rows] == ["mapped", "mapped"], "the first group's rows are kept"
    assert "the control worker could not start (out of file descriptors" in (out / "results.csv").read_text()
    assert_no_survivors(out)


def _lowest_free_fd(pid: int) -> int:
    """The number the kernel hands ``pid``'s next open: with the soft limit one above it, exactly
    one more descriptor can be open at a time (every other free number is at or past the limit,
    holes included), so a read of one file still works and a pipe (two at once) cannot open."""
    lowest = []
    for _ in range(5):  # the least of a few reads: one may catch a file the harness has open briefly
        used = {int(fd) for fd in os.listdir(f"/proc/{pid}/fd")}
        lowest.append(next(n for n in range(len(used) + 1) if n not in used))
        time.sleep(0.01)
    return min(lowest)


def _statm_readers(pid: int) -> int:
    """Descriptors the harness ``pid`` holds on a worker's /proc/PID/statm (its peak watch)."""
    count = 0
    for fd in os.listdir(f"/proc/{pid}/fd"):
        with contextlib.suppress(OSError):
            count += os.readlink(f"/proc/{pid}/fd/{fd}").endswith("/statm")
    return count


def _limit(kind: int, soft: int):
    def child() -> None:
        resource.setrlimit(kind, (soft, resource.getrlimit(kind)[1]))

    return child


def test_open_file_limit_too_small_for_the_group_is_refused_before_work(model_cache, tmp_path):
    cache, out = tmp_path / "cache", tmp_path / "run"
    proc = run_quick(
        run_args(processes=20, report=True, cache=cache, out=out),
        model_cache,
        preexec=_limit(resource.RLIMIT_NOFILE, 40),
    )
    one_line_error(proc, 2, "--processes 20", "the limit is 40 (ulimit -n)")
    assert not cache.exists() and not out.exists()


def test_address_space_limit_too_small_for_the_weights_is_refused_before_work(model_cache, tmp_path):
    cache, out = tmp_path / "cache", tmp_path / "run"
    proc = run_quick(
        run_args(model=("--model-size", "2GiB"), modes="mapped", report=True, cache=cache, out=out),
        model_cache,
        preexec=_limit(resource.RLIMIT_AS, 1536 * 1024**2),
    )
    one_line_error(proc, 2, "the address-space limit (ulimit -v) is 1.5 GiB", "2.0 GiB of weights")
    assert not cache.exists() and not out.exists()


def test_address_space_limit_too_small_for_a_worker_is_refused_before_work(model_cache, tmp_path):
    """Small weights, but a limit below what a worker needs to start onnxruntime at all (its
    thread pools and OpenBLAS buffers): refused before work, not a run of dead workers whose
    metadata says "complete" (before, only the parent's own size was counted)."""
    cache, out = tmp_path / "cache", tmp_path / "run"
    proc = run_quick(
        run_args(report=True, cache=cache, out=out), model_cache, preexec=_limit(resource.RLIMIT_AS, 200 * 1024**2)
    )
    one_line_error(proc, 2, "the address-space limit (ulimit -v) is 200.0 MiB", "for Python, onnxruntime")
    assert not cache.exists() and not out.exists()
