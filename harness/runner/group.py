"""Run one group of N worker processes and read back one record per worker.

A group is (target, mode, N, repeat). The parent spawns N workers with an explicit spec,
waits until each is ready (sessions created, output checked) or has died, samples every
live worker's memory and the system's available memory while all are alive, releases them,
and turns what each did into a `ResultRow`. A worker's failure (exit code, signal, timeout,
exception) is data in its row: it never aborts the run, and no child outlives the group.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from harness.core.schema import ResultRow
from harness.runner.memory import MemorySample, sample_process, system_available_bytes
from harness.runner.spec import WorkerRecord, WorkerSpec

POLL_S = 0.02
RELEASE_TIMEOUT_S = 60.0
STDERR_TAIL_LINES = 5


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
    map_failures: int = 0
    max_attempts: int = 3
    share_ep_contexts: bool = False
    qnn_onnx: str = ""
    weights_bytes: int = 0
    fault_actions: dict[int, str] = field(default_factory=dict)


@dataclass
class GroupResult:
    rows: list[ResultRow]
    system_delta_bytes: int | None


@dataclass
class _Worker:
    index: int
    spec: WorkerSpec
    proc: subprocess.Popen
    log_file: object
    ready: WorkerRecord | None = None
    timed_out: bool = False
    memory: MemorySample = field(default_factory=MemorySample)


def _read_record(path: str) -> WorkerRecord | None:
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None
    return WorkerRecord(**{k: v for k, v in data.items() if k in WorkerRecord.__dataclass_fields__})


def _spawn(group: GroupSpec, index: int) -> _Worker:
    stem = group.workdir / f"w{index}"
    spec = WorkerSpec(
        target=group.target, mode=group.mode, model_folder=str(group.model_folder),
        sessions=group.sessions_per_process, map_failures=group.map_failures,
        max_attempts=group.max_attempts, ready_path=f"{stem}.ready.json",
        result_path=f"{stem}.result.json", log_path=f"{stem}.log",
        share_ep_contexts=group.share_ep_contexts, qnn_onnx=group.qnn_onnx,
        weights_bytes=group.weights_bytes,
        fault_action=group.fault_actions.get(index, ""),
    )
    for stale in (spec.ready_path, spec.result_path):  # from an earlier run into the same --out:
        Path(stale).unlink(missing_ok=True)  # a leftover "ready" would end the barrier early
    spec.write(Path(f"{stem}.spec.json"))
    log_file = open(spec.log_path, "wb")  # noqa: SIM115 - closed in _finish
    proc = subprocess.Popen(
        [sys.executable, "-m", "harness.runner.worker", f"{stem}.spec.json"],
        stdin=subprocess.PIPE, stdout=log_file, stderr=subprocess.STDOUT,
        cwd=str(Path(__file__).resolve().parent.parent),
    )
    return _Worker(index, spec, proc, log_file)


def _wait_until_ready(workers: list[_Worker], timeout_s: float) -> None:
    """Until every worker is ready or dead; kill the ones still busy at the deadline."""
    deadline = time.monotonic() + timeout_s
    pending = list(workers)
    while pending:
        for w in list(pending):
            if Path(w.spec.ready_path).exists():
                w.ready = _read_record(w.spec.ready_path)
                pending.remove(w)
            elif w.proc.poll() is not None:
                pending.remove(w)
        if pending and time.monotonic() > deadline:
            for w in pending:
                w.timed_out = True
                w.proc.kill()
            return
        if pending:
            time.sleep(POLL_S)


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
            w.proc.wait()


def kill_all(workers: list[_Worker]) -> None:
    """No child outlives its group, whatever happened (Ctrl-C included)."""
    for w in workers:
        if w.proc.poll() is None:
            w.proc.kill()
        try:
            w.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        if w.proc.stdin is not None:
            try:
                w.proc.stdin.close()
            except OSError:
                pass
        w.log_file.close()


def stderr_tail(path: str, lines: int = STDERR_TAIL_LINES) -> str:
    try:
        text = Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    tail = [line.strip() for line in text.strip().splitlines()[-lines:]]
    return " | ".join(line for line in tail if line)


def describe_exit(code: int | None, timed_out: bool, timeout_s: float) -> str:
    if timed_out:
        return f"timed out after {timeout_s:g} s and was killed"
    if code is None:
        return "still running"
    if code < 0:
        import signal

        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"killed by {name}"
    return f"exited with code {code}"


def _row(group: GroupSpec, w: _Worker) -> ResultRow:
    record = _read_record(w.spec.result_path) or w.ready or WorkerRecord(pid=w.proc.pid)
    code = w.proc.returncode
    error = record.error
    how = f"worker {w.index} {describe_exit(code, w.timed_out, group.worker_timeout_s)}"
    if not error and (code != 0 or w.timed_out):
        tail = stderr_tail(w.spec.log_path)
        error = f"{how}: {tail}" if tail else f"{how} (no output)"
    elif error and code not in (0, None):
        error = f"{error} ({how})"
    init = None if record.load_s is None or record.create_s is None else record.load_s + record.create_s
    return ResultRow(
        target=group.target, mode=group.mode, disable_file_mapped_weights=w.spec.disable_flag,
        processes=group.processes, sessions_per_process=group.sessions_per_process,
        repeat=group.repeat, worker=w.index, pid=w.proc.pid, path_taken=record.path_taken or None,
        map_attempts=record.map_attempts, ep_file_mapping=record.ep_file_mapping,
        init_s=init, load_s=record.load_s, create_s=record.create_s, first_run_s=record.first_run_s,
        rss_bytes=w.memory.rss_bytes, uss_bytes=w.memory.uss_bytes, pss_bytes=w.memory.pss_bytes,
        private_bytes=w.memory.private_bytes, peak_bytes=record.peak_bytes,
        weights_bytes=record.weights_bytes, output_ok=bool(record.output_ok) and not error,
        error=error, memory_note=w.memory.note, exit_code=code,
        map_errors="; ".join(record.map_errors), ep_log_tail=record.ep_log_tail,
    )


def run_group(group: GroupSpec) -> GroupResult:
    """Spawn, barrier, sample, release, collect. Never raises for a worker's failure."""
    group.workdir.mkdir(parents=True, exist_ok=True)
    before = system_available_bytes()
    workers: list[_Worker] = []
    try:
        for i in range(group.processes):
            workers.append(_spawn(group, i))
        _wait_until_ready(workers, group.worker_timeout_s)
        ready = [w for w in workers if w.ready is not None and w.proc.poll() is None]
        for w in ready:
            w.memory = sample_process(w.proc.pid)
        during = system_available_bytes()
        _release(workers)
    finally:
        kill_all(workers)
    delta = before - during if workers and any(w.ready for w in workers) else None
    rows = [_row(group, w) for w in workers]
    return GroupResult(rows, delta)


def group_dict(group: GroupSpec) -> dict:
    data = asdict(group)
    data["model_folder"], data["workdir"] = str(group.model_folder), str(group.workdir)
    return data
