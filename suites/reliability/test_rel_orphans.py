"""Workers die with their parent, at every moment of their start.

The harness is SIGKILLed (what the OOM killer or a cancelled CI job does: no cleanup of its
own runs) at each moment of a worker's start-up, and no worker of the run may be alive
`DEADLINE_S` later:

- before the worker process exists (the harness stops right before spawning worker 1, while
  worker 0 is starting);
- while its interpreter starts, before it watches its parent (a pause at that point: the
  window the kernel's parent-death signal cannot cover, closed by the worker checking the
  parent named in its spec as soon as it arms the signal);
- during its imports;
- during session creation hung in native code that holds the GIL (no Python thread, the
  watchdog included, ever runs again: only the kernel can end it);
- at the barrier (ready, waiting to be released) beside a hung worker;
- at a sweep of delays after the group's first spec is written, covering what the named
  points do not (fork, exec, interpreter start-up) on real timing.

Before: a worker started after the harness died watched pid 1 as its "parent" (its watchdog
recorded ``os.getppid()`` at start) and waited at the barrier without a deadline: it was found
sleeping 80 s later, and the test of this flaked under ``pytest -n 2``.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest
from rel_support import SMALL, kill_survivors, processes_of, start_harness, stop, wait_for

#: Time a worker may take to notice (PR_SET_PDEATHSIG makes it ~immediate; the start pause is
#: 0.5 s; the rest is margin for a loaded machine).
DEADLINE_S = 2.0


def _start(out, model_cache, *args: str):
    return start_harness(
        [
            "run",
            *SMALL,
            "--modes",
            "mapped",
            "--quiet",
            "--no-report",
            "--worker-timeout",
            "300",
            "--out",
            str(out),
            *args,
        ],
        model_cache,
    )


def _kill_harness_and_time_the_orphans(proc, out) -> float:
    """SIGKILL the harness alone (never its process group: the workers must notice by
    themselves); seconds until no process of the run is left."""
    try:
        proc.send_signal(signal.SIGKILL)
        t0 = time.monotonic()
        proc.wait(timeout=15)
        while processes_of(out) and time.monotonic() - t0 < DEADLINE_S + 3:
            time.sleep(0.01)
        elapsed = time.monotonic() - t0
        alive = [" ".join(p.info["cmdline"] or []) for p in processes_of(out)]
    finally:
        stop(proc)
        kill_survivors(out)
    assert not alive and elapsed <= DEADLINE_S, f"alive after {elapsed:.2f} s: {alive}"
    return elapsed


POINTS = {
    # name: (extra args, marker that says the moment has come)
    "before-the-worker-exists": (["--processes", "2", "--inject-worker-fault", "1=pause-spawn"], "w1.pause-spawn"),
    "interpreter-start": (["--processes", "1", "--inject-worker-fault", "0=pause-start"], "w0.log.pause-start"),
    "imports": (["--processes", "1", "--inject-worker-fault", "0=pause-imports"], "w0.log.pause-imports"),
    "session-creation-in-native-code": (
        ["--processes", "1", "--inject-worker-fault", "0=pause-session"],
        "w0.log.pause-session",
    ),
    "barrier": (["--processes", "2", "--inject-worker-fault", "0=hang"], "w1.ready.json"),
}


@pytest.mark.parametrize("point", list(POINTS))
def test_harness_killed_at_a_moment_of_the_workers_start(model_cache, tmp_path, point):
    args, marker = POINTS[point]
    out = tmp_path / "run"
    proc = _start(out, model_cache, *args)
    n = args[args.index("--processes") + 1]
    try:
        wait_for((out / "workers" / f"cpu-mapped-n{n}-r0" / marker).exists, 60, f"the {point} moment", proc)
    except BaseException:
        stop(proc)
        kill_survivors(out)
        raise
    _kill_harness_and_time_the_orphans(proc, out)


@pytest.mark.parametrize("delay_ms", [0, 30, 60, 100, 150, 250, 400, 700])
def test_harness_killed_at_a_delay_after_the_group_starts(model_cache, tmp_path, delay_ms):
    out = tmp_path / "run"
    proc = _start(out, model_cache, "--processes", "2")
    try:
        wait_for((out / "workers" / "cpu-mapped-n2-r0" / "w0.spec.json").exists, 60, "the group's first spec", proc)
        time.sleep(delay_ms / 1000)
    except BaseException:
        stop(proc)
        kill_survivors(out)
        raise
    _kill_harness_and_time_the_orphans(proc, out)


def test_a_worker_never_released_gives_up_at_its_own_deadline(model_cache, tmp_path):
    """Every wait has a deadline: a worker whose (living) parent never releases it from the
    barrier exits by itself once the spec's release timeout has passed."""
    import os
    import subprocess
    import sys

    import psutil

    from conftest import ROOT, harness_env
    from harness.contract.spec import WorkerSpec
    from harness.prep.generated import generated_matmul_chain
    from harness.runner.worker import EXIT_NOT_RELEASED

    model = generated_matmul_chain(8 * 1024**2, cache_dir=model_cache)
    stem = tmp_path / "w0"
    spec = WorkerSpec(
        target="cpu",
        mode="mapped",
        model_folder=str(model.folder),
        ready_path=f"{stem}.ready.json",
        result_path=f"{stem}.result.json",
        log_path=f"{stem}.log",
        weights_bytes=model.weights_bytes,
        parent_pid=os.getpid(),
        parent_create_time=psutil.Process().create_time(),
        release_timeout_s=1.0,
    )
    spec.write(tmp_path / "w0.spec.json")
    with open(spec.log_path, "wb") as log:
        worker = subprocess.Popen(
            [sys.executable, "-m", "harness.runner.worker", str(tmp_path / "w0.spec.json")],
            stdin=subprocess.PIPE,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
            env=harness_env(model_cache),
        )
        try:
            wait_for(Path(spec.ready_path).exists, 60, "the worker to be ready", worker)
            ready_at = time.monotonic()
            code = worker.wait(timeout=30)  # stdin stays open: no release ever comes
            waited = time.monotonic() - ready_at
        finally:
            if worker.poll() is None:
                worker.kill()
                worker.wait()
            worker.stdin.close()
    assert code == EXIT_NOT_RELEASED, Path(spec.log_path).read_text()
    assert waited < 1.0 + DEADLINE_S + 3, f"gave up only after {waited:.1f} s"
    assert "not released within 1 s" in Path(spec.log_path).read_text()
