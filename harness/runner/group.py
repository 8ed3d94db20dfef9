"""One group (target, mode, N, repeat) of worker processes: spawn, barrier, sample, release,
one `ResultRow` each. A worker's failure is data in its row; no child outlives the group."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.contract.phases import PHASES
from harness.contract.spawn import KillOnCloseJob, measured_process_env, python_child, worker_pid_in_tree
from harness.contract.spec import WorkerRecord, WorkerSettings, WorkerSpec
from harness.core.errors import InputError, SpawnError, raise_if_interrupted
from harness.core.files import create_file, make_folder, read_json
from harness.core.latency import WORKER_FIELDS as LATENCY_FIELDS
from harness.core.schema import GENERATE_COLUMNS, ResultRow, disable_flag
from harness.core.vocab import Start
from harness.runner.container import close_limit, join, mark_limited, open_limit, wrap
from harness.runner.exits import describe_exit, stderr_tail
from harness.runner.memory import (
    MappedPages,
    MemorySample,
    fair_private,
    implausible,
    machine_load,
    mapped_pages,
    sample_process,
    system_available_bytes,
)
from harness.runner.peakwatch import PeakWatch, WatchedPeak, merged_peak
from harness.runner.phaseboard import PhaseBoard
from harness.runner.resources import describe
from harness.runner.rowrules import early_exit, silent_copy
from harness.runner.split import Observed, composition, split_columns
from harness.runner.syswatch import SystemWatch

POLL_S = 0.02
RELEASE_TIMEOUT_S = 60.0
KILL_WAIT_S = 10.0
#: on_event(worker index, state, detail): the progress display's view of a group.
EventCallback = Callable[[int, str, str], None]


def _no_event(worker: int, state: str, detail: str = "") -> None:
    pass


@dataclass
class GroupSpec:
    """Everything one group of workers needs; built by the run plan."""

    target: str
    mode: str
    processes: int
    sessions_per_process: int
    repeat: int
    model_folder: Path
    workdir: Path
    worker_timeout_s: float
    weights_bytes: int = 0
    models: list[str] = field(default_factory=list)  # every model folder, in order ([]: model_folder)
    settings: WorkerSettings = field(default_factory=WorkerSettings)  # what every worker applies
    options: dict[str, Any] = field(default_factory=dict)  # the target's own options, generic
    parent_pid: int = 0
    parent_create_time: float = 0.0
    fault_actions: dict[int, str] = field(default_factory=dict)
    #: Run a control worker beside the N workers (`harness.runner.control`).
    control: bool = False
    #: The pass (`harness.core.passes`): "concurrent" (this module) or "sequential" (`timingpass`).
    start: str = Start.CONCURRENT
    #: The group (workers and control) runs in a memory container of this limit (`container`).
    memory_limit_bytes: int | None = None


@dataclass
class GroupResult:
    rows: list[ResultRow]
    system_delta_bytes: int | None
    #: |idle available memory after the group - before it|: how far the machine drifted on its
    #: own while the group ran, the noise floor of the delta.
    system_noise_bytes: int | None = None
    #: The system's side of the start-up peak (min available, max commit charge while the
    #: workers started: `harness.runner.syswatch`), None when not watched.
    system_peak: Any = None


@dataclass
class _Worker:
    index: int
    spec: WorkerSpec
    proc: subprocess.Popen
    log_file: Any
    ready: WorkerRecord | None = None
    timed_out: bool = False
    memory: MemorySample = field(default_factory=MemorySample)
    sampled_pid: int | None = None
    pages: MappedPages = field(default_factory=MappedPages)
    peak: WatchedPeak = field(default_factory=WatchedPeak)  # the parent's start-up samples


def _read_record(path: str) -> WorkerRecord | None:
    try:
        return WorkerRecord.from_dict(read_json(path))
    except (OSError, ValueError, TypeError, AttributeError):
        return None


def _pause_before_spawn(group: GroupSpec, index: int) -> None:
    """Reliability suites only ("pause-spawn"): stop right before worker ``index`` exists, so
    a test can kill the harness at that moment of a group's start."""
    if group.fault_actions.get(index) == "pause-spawn":
        (group.workdir / f"w{index}.pause-spawn").touch()
        time.sleep(10**6)


def _who(index: int, control: bool) -> str:
    """The process an error names: a worker by its index, the control worker as such."""
    return "the control worker" if control else f"worker {index}"


def _write_spec(spec: WorkerSpec, stem: Path) -> None:
    for stale in (spec.ready_path, spec.result_path):  # from an earlier run into the same --out:
        Path(stale).unlink(missing_ok=True)  # a leftover "ready" would end the barrier early
    spec.write(Path(f"{stem}.spec.json"))


def _spec_for(group: GroupSpec, index: int, stem: Path, *, control: bool, watch: PeakWatch | None) -> WorkerSpec:
    """The explicit spec one worker (or the control) of the group starts from."""
    return WorkerSpec(
        target=group.target,
        mode=group.mode,
        model_folder=str(group.model_folder),
        sessions=group.sessions_per_process,
        ready_path=f"{stem}.ready.json",
        result_path=f"{stem}.result.json",
        log_path=f"{stem}.log",
        weights_bytes=group.weights_bytes,
        models=list(group.models),
        settings=group.settings,
        options=dict(group.options),
        parent_pid=group.parent_pid,
        parent_create_time=group.parent_create_time,
        release_timeout_s=RELEASE_TIMEOUT_S + group.worker_timeout_s,
        fault_action="" if control else group.fault_actions.get(index, ""),
        control=control,
        phase_board=str(watch.board.path) if watch is not None else "",
        phase_slot=index if watch is not None else -1,
    )


def _spawn(
    group: GroupSpec,
    index: int,
    job: KillOnCloseJob,
    *,
    control: bool = False,
    watch: PeakWatch | None = None,
    limit: Any = None,
) -> _Worker:
    if not control:
        _pause_before_spawn(group, index)
    name = "control" if control else f"w{index}"
    stem = group.workdir / name
    spec = _spec_for(group, index, stem, control=control, watch=watch)
    _write_spec(spec, stem)
    command, env = python_child("harness.runner.worker", f"{stem}.spec.json")
    command, env = wrap(limit, command), measured_process_env(env)
    cwd = group.workdir / name
    try:
        make_folder(cwd, "worker folder")
        log_file = create_file(spec.log_path, "worker log")  # a new file, no link followed; closed in kill_all
    except (OSError, InputError) as err:
        raise SpawnError(describe(err, f"opening the log of {_who(index, control)} of {group.workdir.name}")) from err
    try:
        proc = subprocess.Popen(
            command,
            stdin=subprocess.PIPE,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            cwd=str(cwd),
            env=env,  # each worker runs in its own folder of the run (cwd): relative EP output lands there
        )
    except OSError as err:
        log_file.close()
        raise SpawnError(describe(err, f"starting {_who(index, control)} of {group.workdir.name}")) from err
    except BaseException:
        log_file.close()
        raise
    job.add(getattr(proc, "_handle", 0))
    join(limit, proc, log_file)
    if watch is not None:
        watch.expect(index, proc.pid)
    return _Worker(index, spec, proc, log_file)


def _wait_until_ready(workers: list[_Worker], timeout_s: float, on_event: EventCallback = _no_event) -> None:
    """Until every worker's ready record reads (under Wine and load a fresh one once did not) or it dies."""
    deadline = time.monotonic() + timeout_s
    pending = list(workers)
    while pending:
        for w in list(pending):
            if Path(w.spec.ready_path).exists() and (ready := _read_record(w.spec.ready_path)) is not None:
                w.ready = ready
                pending.remove(w)
                on_event(w.index, "ready", "")
            elif w.proc.poll() is not None:
                pending.remove(w)
                on_event(w.index, "exited", f"exit code {w.proc.returncode}")
        if pending and time.monotonic() > deadline:
            for w in pending:
                w.timed_out = True
                w.proc.kill()
                on_event(w.index, "timed out", f"after {timeout_s:g} s")
            return
        if pending:
            raise_if_interrupted()  # a SIGTERM whose KeyboardInterrupt was swallowed must not wait out a hung worker
            time.sleep(POLL_S)


def _sample(w: _Worker) -> None:
    """Sample the process the worker says it is, once that pid is verified to be ours."""
    reported = w.ready.pid if w.ready is not None else 0
    if reported and worker_pid_in_tree(w.proc.pid, reported):
        w.sampled_pid = reported
        w.memory = sample_process(reported)
        if not w.spec.control:  # right after the sample, from the parent: see mapped_pages
            w.pages = mapped_pages(reported, w.spec.model_folders())
    else:
        w.memory = MemorySample(
            note=f"worker reported pid {reported}, which is not process {w.proc.pid} or "
            "one of its children: not sampled"
        )


def _release(workers: list[_Worker]) -> None:
    for w in workers:
        if w.proc.poll() is None and w.proc.stdin is not None:
            try:
                w.proc.stdin.write(b"go\n")
                w.proc.stdin.close()
            except OSError:
                pass  # it died between the sample and the release: its exit code says why
    deadline = time.monotonic() + RELEASE_TIMEOUT_S
    for w in workers:
        try:
            w.proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            w.timed_out = True
            w.proc.kill()
            w.proc.wait(timeout=KILL_WAIT_S)


def kill_all(workers: list[_Worker]) -> None:
    """No child outlives its group, whatever happened (Ctrl-C included)."""
    for w in workers:
        if w.proc.poll() is None:
            w.proc.kill()
        try:
            w.proc.wait(timeout=KILL_WAIT_S)
        except subprocess.TimeoutExpired:
            pass
        if w.proc.stdin is not None:
            try:
                w.proc.stdin.close()
            except OSError:
                pass
        w.log_file.close()


def _start_control(group: GroupSpec, job: KillOnCloseJob, limit: Any = None) -> tuple[_Worker | None, str]:
    """(the control worker once ready, or None and why it could not start: data, not a failure)."""
    try:
        control = _spawn(group, group.processes, job, control=True, limit=limit)
    except SpawnError as err:
        return None, str(err)
    _wait_until_ready([control], group.worker_timeout_s)
    return control, ""


def _control_figure(control: _Worker | None, start_error: str = "") -> tuple[int | None, str]:
    """(the control's private memory, why it is missing)."""
    if control is None:
        return None, f"no control figure: the control worker could not start ({start_error})" if start_error else ""
    record = _read_record(control.spec.result_path) or control.ready
    if record is None or record.error or control.ready is None:
        why = record.error if record is not None and record.error else "it did not reach the barrier"
        return None, f"no control figure: the control worker failed ({why})"
    value = fair_private(control.memory)
    return value, "" if value is not None else f"no control figure: {control.memory.note or 'not sampled'}"


def _exit_error(group: GroupSpec, w: _Worker, final: WorkerRecord | None, record: WorkerRecord) -> str:
    """The row's error: the worker's own, else how it ended when that was no clean release."""
    code = w.proc.returncode
    error = record.error
    how = f"worker {w.index} {describe_exit(code, w.timed_out, group.worker_timeout_s)}"
    early = early_exit(w.index, code, w.timed_out, final)
    if not error and (code != 0 or w.timed_out or early):
        tail = stderr_tail(w.spec.log_path)
        how = early or how
        return f"{how}: {tail}" if tail else f"{how} (no output)"
    if error and code not in (0, None):
        return f"{error} ({how})"
    return error


def _row(group: GroupSpec, w: _Worker, seen: Observed | None = None) -> ResultRow:
    final = _read_record(w.spec.result_path)
    record = final or w.ready or WorkerRecord(pid=w.proc.pid)
    code = w.proc.returncode
    error = _exit_error(group, w, final, record)
    init = None if record.load_s is None or record.create_s is None else record.load_s + record.create_s
    seen = seen or Observed()
    sampled = w.memory.rss_bytes is not None and (w.memory.uss_bytes is not None or w.memory.private_bytes is not None)
    resident = record.mapped_resident_bytes if record.mapped_resident_bytes is not None else w.pages.resident
    violations = implausible(w.memory, record.private_copy_bytes, resident) if sampled else []
    copied, copy_notes = composition(w, seen) if sampled else (None, [])
    memory_note = "; ".join(x for x in (w.memory.note, *violations, *copy_notes) if x)
    state, why = silent_copy(group.mode, record, copied) or (record.ep_file_mapping, "")
    error = "; ".join(x for x in (error, why) if x)
    return ResultRow(
        target=group.target,
        mode=group.mode,
        disable_file_mapped_weights=disable_flag(group.mode),
        processes=group.processes,
        sessions_per_process=group.sessions_per_process,
        repeat=group.repeat,
        worker=w.index,
        pid=w.sampled_pid or record.pid or w.proc.pid,
        path_taken=record.path_taken or None,
        map_attempts=record.map_attempts,
        fallback_stage=record.fallback_stage or None,
        ep_file_mapping=state,
        init_s=init,
        load_s=record.load_s,
        create_s=record.create_s,
        first_run_s=record.first_run_s,
        runs=record.runs,
        latency_p50_s=record.latency_p50_s,
        latency_p90_s=record.latency_p90_s,
        latency_p99_s=record.latency_p99_s,
        rss_bytes=w.memory.rss_bytes,
        uss_bytes=w.memory.uss_bytes,
        pss_bytes=w.memory.pss_bytes,
        private_bytes=w.memory.private_bytes,
        peak_bytes=record.peak_bytes,
        weights_bytes=record.weights_bytes,
        output_ok=bool(record.output_ok),  # what the worker measured: a failure is in error
        error=error,
        memory_note=memory_note,
        exit_code=code,
        map_errors="; ".join(record.map_errors),
        ep_log_tail=record.ep_log_tail,
        ep_sessions=record.ep_sessions or None,
        ep_reason=record.ep_reason or None,
        ep_nodes=record.ep_nodes or None,
        memory_ok=sampled and not violations,
        floor_s=record.floor_s,
        stale_registrations=record.stale_registrations,
        late_releases=record.late_releases,
        **{name: getattr(record, name) for name in (*LATENCY_FIELDS, *GENERATE_COLUMNS)},
        **merged_peak(record, w.peak),
        **split_columns(w, record, seen, copied),
    )


def _peak_watch(group: GroupSpec) -> PeakWatch | None:
    """The parent's watch of the start-up peaks (None: the workers' own samples give a peak)."""
    try:
        return PeakWatch(PhaseBoard(group.workdir / "phases.bin", group.processes), PHASES)
    except (OSError, ValueError):
        return None


def run_group(group: GroupSpec, on_event: EventCallback = _no_event) -> GroupResult:
    """Spawn, barrier, sample, release, collect. Never raises for a worker's failure.
    ``on_event`` hears each worker's states (starting, ready/exited/timed out, sampled, done)."""
    make_folder(group.workdir, "workers folder", within=group.workdir.parent.parent)
    before = system_available_bytes()
    start_load = machine_load()
    workers: list[_Worker] = []
    control: _Worker | None = None
    control_error = ""
    job = KillOnCloseJob()
    during = None
    seen = Observed()
    limit, limited = open_limit(group.memory_limit_bytes), None
    watch = SystemWatch()
    peaks = _peak_watch(group)
    try:
        with watch, peaks or nullcontext():  # the start-up peaks: from the first spawn to the barrier
            for i in range(group.processes):
                workers.append(_spawn(group, i, job, watch=peaks, limit=limit))
                on_event(i, "starting", "")
            _wait_until_ready(workers, group.worker_timeout_s, on_event)
        for w in workers:
            w.peak = peaks.result(w.index) if peaks else WatchedPeak()
        during = system_available_bytes()  # the N workers alone: the control is not counted
        if group.control:  # started once the workers wait: it never competes with their start-up
            control, control_error = _start_control(group, job, limit)
        everyone = [*workers, *([control] if control else [])]
        for w in everyone:
            if w.ready is not None and w.proc.poll() is None:
                _sample(w)
                if w is not control:
                    on_event(w.index, "sampled", "")
        seen.load = machine_load()
        _release(everyone)
        for w in workers:
            on_event(w.index, "done", f"exit code {w.proc.returncode}")
    finally:
        kill_all([*workers, *([control] if control else [])])
        job.close()
        limited = close_limit(limit)
        if peaks is not None:
            peaks.stop()
            peaks.board.close()
    after = system_available_bytes()  # idle again: every worker has exited and been reaped
    measured = during is not None and any(w.ready for w in workers)
    if seen.load is not None and seen.load.steal_s is not None and start_load.steal_s is not None:
        seen.steal_s = max(seen.load.steal_s - start_load.steal_s, 0.0)
    seen.control, seen.control_note = _control_figure(control, control_error)
    rows = [_row(group, w, seen) for w in workers]
    if limited is not None:
        mark_limited(rows, limited, {w.index for w in workers if w.timed_out})
    return GroupResult(
        rows,
        before - during if measured else None,
        abs(after - before) if measured else None,
        watch.result if measured else None,
    )
