"""The timing pass (`run --sequential-timing`, always in `bench`): a group's N workers started
one after another, each alone (spawned once the previous one is ready, released and reaped), so
timing gates are judged without the harness's own contention; no control, peak watch, system
watch or memory sample, but under the group's memory limit. `foreign_cpus` is the machine's CPU
time beyond this worker's and the harness's, per second of its life. The groups of one repeat
and N run interleaved, round by round (mapped groups first, swapped every other round, heap
last), so a drift moves both figures of a ratio alike (docs/running.md)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from harness.contract.spawn import KillOnCloseJob
from harness.core.passes import CONCURRENT, SEQUENTIAL
from harness.core.vocab import Mode
from harness.runner.container import close_limit, mark_limited, open_limit
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

#: on_event(group or None, worker index, state, detail): the progress display's view of a step.
StepEventCallback = Callable[[GroupSpec | None, int, str, str], None] | None
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


def plan_steps(groups: list[GroupSpec], *, interleave: bool = True) -> list[list[GroupSpec]]:
    """The run's groups as steps: each concurrent group alone, one repeat's timing-pass groups together."""
    steps: list[list[GroupSpec]] = []
    for group in groups:
        last = steps[-1][-1] if steps else None
        joins = (
            interleave
            and last is not None
            and group.start == SEQUENTIAL
            and last.start == SEQUENTIAL
            and (last.repeat, last.processes, last.sessions_per_process)
            == (group.repeat, group.processes, group.sessions_per_process)
        )
        if joins:
            steps[-1].append(group)
        else:
            steps.append([group])
    return steps


def round_order(groups: list[GroupSpec], round_index: int) -> list[int]:
    """The groups' order in one round: mapped first (swapped on odd rounds), the heap group last."""
    order = sorted(range(len(groups)), key=lambda i: (groups[i].mode != Mode.MAPPED, i))
    if round_index % 2 and len(order) > 1:
        order[0], order[1] = order[1], order[0]
    return order


def run_step(step: list[GroupSpec], on_event: StepEventCallback = None) -> list[GroupResult]:
    """One step of `plan_steps`: a concurrent group, or the interleaved timing pass."""
    if len(step) == 1 and step[0].start != SEQUENTIAL:
        return [run_any_group(step[0], _group_events(step[0], on_event, alone=True))]
    return run_interleaved(step, on_event)


def machine_busy_s() -> float | None:
    """CPU time every CPU has spent busy so far (steal included), or None."""
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
    """CPUs' worth of other processes' work over the worker's life (None when a figure is missing)."""
    busy0, wall0, own0 = before
    busy1, own1, worker = machine_busy_s(), process_cpu_s_self(), process_cpu_s(w.proc.pid)
    wall = time.monotonic() - wall0
    if None in (busy0, busy1, own0, own1, worker) or wall <= 0:
        return None
    return max(busy1 - busy0 - worker - (own1 - own0), 0.0) / wall


def process_cpu_s_self() -> float | None:
    return process_cpu_s(os.getpid())


def run_sequential_group(group: GroupSpec, on_event: EventCallback = _no_event) -> GroupResult:
    """One group's timing pass alone (its workers one after another)."""
    return run_interleaved([group], lambda g, i, state, detail: on_event(i, state, detail))[0]


def run_interleaved(groups: list[GroupSpec], on_event: StepEventCallback = None) -> list[GroupResult]:
    """The timing pass of ``groups``: round by round, each worker alone; one result per group, never raising."""
    for group in groups:
        group.workdir.mkdir(parents=True, exist_ok=True)
    job = KillOnCloseJob()
    timed = [_Timed() for _ in groups]
    limits: list[Any] = []
    try:  # under the group's memory limit too: a pass outside it would time another deployment
        limits += [open_limit(g.memory_limit_bytes) for g in groups]
        for round_index in range(max(g.processes for g in groups)):
            for k in round_order(groups, round_index):
                if round_index < groups[k].processes:
                    events = _group_events(groups[k], on_event)
                    _time_one(groups[k], round_index, job, timed[k], events, limits[k])
    finally:
        kill_all([w for t in timed for w in t.workers])
        job.close()
        found = [close_limit(c) for c in limits]
    results = [_result(group, t) for group, t in zip(groups, timed, strict=True)]
    for result, outcome, t in zip(results, found, timed, strict=True):
        if outcome is not None:
            mark_limited(result.rows, outcome, {w.index for w in t.workers if w.timed_out})
    return results


@dataclass
class _Timed:
    """One group's workers of the timing pass, with what was measured around each."""

    workers: list[_Worker] = field(default_factory=list)
    foreign: dict[int, float | None] = field(default_factory=dict)
    seen: dict[int, Any] = field(default_factory=dict)


def _time_one(
    group: GroupSpec, index: int, job: KillOnCloseJob, timed: _Timed, on_event: EventCallback, limit: Any = None
) -> None:
    """Worker ``index`` of ``group``, alone (in ``limit``, its container): spawn, ready, other
    processes' CPU over its life, release, reap."""
    before = (machine_busy_s(), time.monotonic(), process_cpu_s_self())
    w = _spawn(group, index, job, limit=limit)
    timed.workers.append(w)
    on_event(index, "starting", "")
    _wait_until_ready([w], group.worker_timeout_s, on_event)
    timed.foreign[index] = foreign_cpus(before, w) if w.ready is not None else None
    timed.seen[index] = machine_load()
    _release([w])
    on_event(index, "done", f"exit code {w.proc.returncode}")


def _result(group: GroupSpec, timed: _Timed) -> GroupResult:
    rows = []
    for w in timed.workers:
        row = _row(group, w, Observed(load=timed.seen.get(w.index)))
        row.start, row.foreign_cpus = SEQUENTIAL, timed.foreign.get(w.index)
        row.memory_ok, row.memory_note = None, NOT_SAMPLED
        row.peak_private_bytes = row.peak_phase = row.peak_shared_bytes = row.peak_rss_bytes = None
        rows.append(row)
    return GroupResult(rows, None)


def _group_events(group: GroupSpec, on_event: StepEventCallback, *, alone: bool = False) -> EventCallback:
    """A group's worker events, told to the step's callback with the group they belong to."""
    if on_event is None:
        return _no_event
    return lambda index, state, detail="": on_event(None if alone else group, index, state, detail)
