"""The timing pass (`run --sequential-timing`, always in `bench`): a group's N workers started
one after another, each alone on the machine (issue 32).

Why: with more workers than cores, the concurrent pass's workers wait for each other (4 on 2
cores: each gets half a CPU), so its timings are contended by the harness's own rule and no
timing gate can be judged there. Here worker i+1 is spawned only once worker i has reported
ready (sessions created, first inference checked, ``--runs`` done), been released and been
reaped: each starts with the machine to itself, the page cache as warm as in the concurrent
pass. Nothing else runs: no control worker, no start-up peak watch, no system watch, no memory
sample (memory is measured in the concurrent pass, with all N alive at the barrier).

Contention stays measured, per worker, over its own life (spawn to ready): `foreign_cpus` is
the CPU time the whole machine spent (every CPU's busy time, steal included) minus this
worker's and this harness's own, per second of wall time. Other work on the machine shows
there; the harness's previous groups do not (the 1-minute load average still counts them for a
minute). `harness.core.composition.contention` calls a worker with less than one CPU to itself
contended, as it calls one with under half a CPU of its measured work.
"""

from __future__ import annotations

import os
import time
from typing import Any

from harness.contract.spawn import KillOnCloseJob
from harness.core.passes import CONCURRENT, SEQUENTIAL
from harness.runner.group import (
    EventCallback,
    GroupResult,
    GroupSpec,
    _no_event,
    _release,
    _row,
    _spawn,
    _wait_until_ready,
    _Worker,
    kill_all,
    run_group,
)
from harness.runner.memory import machine_load
from harness.runner.split import Observed

#: Why a timing-pass row has no memory figures (its memory_note).
NOT_SAMPLED = "not sampled: timing pass (memory is measured in the concurrent pass, with all N workers alive)"


def run_any_group(group: GroupSpec, on_event: EventCallback = _no_event) -> GroupResult:
    """The group's pass: `run_sequential_group` for the timing pass, else `run_group`."""
    if group.start == SEQUENTIAL:
        return run_sequential_group(group, on_event)
    result = run_group(group, on_event)
    for row in result.rows:
        row.start = CONCURRENT
    return result


def machine_busy_s() -> float | None:
    """CPU time every CPU of the machine has spent busy so far (everything but idle and I/O
    wait; steal counts: a hypervisor that gave the CPU away is contention), or None."""
    try:
        import psutil

        times = psutil.cpu_times()._asdict()
    except Exception:  # no system-wide CPU times here: no foreign figure, the load rule applies
        return None
    quiet = ("idle", "iowait", "guest", "guest_nice")  # guest time is already inside user
    return sum(v for k, v in times.items() if k not in quiet)


def process_cpu_s(pid: int) -> float | None:
    """CPU time of ``pid`` and its children (a launcher's child is the worker on Windows)."""
    try:
        import psutil

        proc = psutil.Process(pid)
        total = sum(proc.cpu_times()[:2])
        for child in proc.children(recursive=True):
            total += sum(child.cpu_times()[:2])
        return total
    except Exception:  # gone or not readable: no foreign figure for this worker
        return None


def foreign_cpus(before: tuple[float | None, float, float | None], w: _Worker) -> float | None:
    """CPUs' worth of other processes' work over the worker's life: machine busy time minus the
    worker's and the harness's own, over the wall time (None when a figure is missing)."""
    busy0, wall0, own0 = before
    busy1, own1, worker = machine_busy_s(), process_cpu_s_self(), process_cpu_s(w.proc.pid)
    wall = time.monotonic() - wall0
    if None in (busy0, busy1, own0, own1, worker) or wall <= 0:
        return None
    return max(busy1 - busy0 - worker - (own1 - own0), 0.0) / wall


def process_cpu_s_self() -> float | None:
    return process_cpu_s(os.getpid())


def run_sequential_group(group: GroupSpec, on_event: EventCallback = _no_event) -> GroupResult:
    """Spawn, wait until ready, measure, release and reap each worker in turn. Never raises for
    a worker's failure: its row says what happened, and the next worker still runs."""
    group.workdir.mkdir(parents=True, exist_ok=True)
    job = KillOnCloseJob()
    workers: list[_Worker] = []
    foreign: dict[int, float | None] = {}
    seen: dict[int, Any] = {}
    try:
        for i in range(group.processes):
            before = (machine_busy_s(), time.monotonic(), process_cpu_s_self())
            w = _spawn(group, i, job)
            workers.append(w)
            on_event(i, "starting", "")
            _wait_until_ready([w], group.worker_timeout_s, on_event)
            foreign[i] = foreign_cpus(before, w) if w.ready is not None else None
            seen[i] = machine_load()
            _release([w])
            on_event(i, "done", f"exit code {w.proc.returncode}")
    finally:
        kill_all(workers)
        job.close()
    rows = []
    for w in workers:
        row = _row(group, w, Observed(load=seen.get(w.index)))
        row.start, row.foreign_cpus = SEQUENTIAL, foreign.get(w.index)
        row.memory_ok, row.memory_note = None, NOT_SAMPLED
        # the start-up peak is the concurrent pass's figure (watched by the parent at 1 kHz)
        row.peak_private_bytes = row.peak_phase = row.peak_shared_bytes = row.peak_rss_bytes = None
        rows.append(row)
    return GroupResult(rows, None)
