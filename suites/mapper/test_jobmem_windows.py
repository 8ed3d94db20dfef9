"""The Windows memory container (`harness.runner._jobmem`) on a real Windows kernel: the Windows
lanes (windows-mapper.yml, windows-arm64.yml) run suites/mapper, so these run there; elsewhere
they skip (under Wine, which does not enforce job memory limits, test_wine_jobmem.py checks the
calls and the layouts). A child started with the base interpreter (no venv launcher between:
`spawn.worker_interpreter`) waits for a line on stdin, so it is in the job before it commits."""

from __future__ import annotations

import csv
import subprocess
import sys

import pytest

from conftest import line_from
from harness.contract import spawn
from mapper_impl import _winapi

#: Under Wine 8 a job memory limit is not enforced: a commit past it succeeds, no
#: JOB_OBJECT_MSG_JOB_MEMORY_LIMIT is posted, and the limit and peak read back as 0. Windows
#: refuses the commit and posts the message (learn.microsoft.com: JOBOBJECT_EXTENDED_LIMIT_INFORMATION,
#: JOBOBJECT_ASSOCIATE_COMPLETION_PORT). test_wine_jobmem.py fails once Wine enforces it.
JOB_MEMORY_DEVIATION = "Wine deviation: job memory limits are not enforced (Windows refuses the commit)"
pytestmark = [
    pytest.mark.skipif(
        sys.platform != "win32", reason="a job memory limit is Windows' (under Wine: test_wine_jobmem.py)"
    ),
    pytest.mark.skipif(sys.platform == "win32" and bool(_winapi.wine_version()), reason=JOB_MEMORY_DEVIATION),
]
MIB = 1024**2
CHILD = (
    "import os, sys\n"
    "print(os.getpid(), flush=True)\n"
    "sys.stdin.readline()\n"
    "try:\n"
    "    block = bytearray({size})\n"
    "except MemoryError:\n"
    "    sys.exit(3)\n"
)


def _commit_in_job(limit: int, size: int) -> tuple[int, int, set[int] | None, int | None]:
    """(the child's exit code, its pid, the pids the job says hit its limit, the job's peak)."""
    from harness.runner import _jobmem

    container = _jobmem.Container(limit)
    interpreter, env = spawn.worker_interpreter()
    proc = subprocess.Popen(
        [interpreter, "-c", CHILD.format(size=size)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env
    )
    try:
        container.add(proc)
        pid = int(line_from(proc, "pid line"))
        proc.stdin.write(b"go\n")
        proc.stdin.close()
        code = proc.wait(timeout=120)
        return code, pid, container.oom_pids(), container.peak_bytes()
    finally:
        container.close()
        if proc.poll() is None:
            proc.kill()


def test_a_commit_past_the_limit_fails_and_the_job_names_the_process():
    code, pid, named, peak = _commit_in_job(256 * MIB, 512 * MIB)
    assert code == 3  # MemoryError: the commit was refused
    assert named == {pid}
    assert peak is not None and peak <= 256 * MIB


def test_a_commit_within_the_limit_is_not_named():
    code, pid, named, peak = _commit_in_job(256 * MIB, 64 * MIB)
    assert code == 0 and named == set()
    assert peak is not None and 64 * MIB <= peak <= 256 * MIB


def test_run_records_heap_workers_out_of_memory_at_the_limit(run_harness, tmp_path):
    """The issue's figure on Windows commit: three heap workers hold at least 3 x 256 MiB of
    copies once started, more than 768 MiB, so the job refuses one a commit and names it; the
    mapped workers commit their runtime only (a view of the weights file is not commit)."""
    out = tmp_path / "run"
    args = ["run", "--model-size", "256MiB", "--processes", "3", "--memory-limit", "768MiB", "--no-report"]
    outcome = run_harness(*args, "--out", str(out))
    assert outcome.returncode == 1, outcome.stdout + outcome.stderr
    with open(out / "results.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    ended = [r for r in rows if r["mode"] == "heap" and r["oom_killed"] == "True"]
    assert ended and all(r["error"].startswith("out of memory at the limit (768.0 MiB)") for r in ended), rows
    assert all(r["output_ok"] == "True" for r in rows if r["mode"] == "mapped"), rows
