"""A worker process: ``python -m harness.runner.worker SPEC.json``.

Creates its M session groups through its target (one session per model of the run), runs one
inference of each model and checks it against that model's reference, then (``--runs R``) R
more timed inferences for the latency percentiles, writes a "ready" record, then blocks until
the parent has sampled every worker's memory (the barrier, with a deadline of its own), writes
its final record and exits. Between its last measured action and the sample it does nothing
that allocates: the latency statistics are computed after the release, and its memory maps
are read by the parent (`harness.runner.memory.mapped_pages`); the observer leaves no trace.
With ``control`` in its spec it is the group's control worker (`harness.runner.control`).
Its stdout/stderr go to a log file the parent chose (ORT and the QNN EP log there); results go
only to the JSON files.

A worker never outlives the harness that started it (`exit_with_parent`): the kernel kills it
(Linux: ``PR_SET_PDEATHSIG``; Windows: the parent's kill-on-close job object), and a watchdog
thread checks the parent named in the spec as a second line of defence.
"""

from __future__ import annotations

import contextlib
import gc
import os
import signal
import sys
import threading
import time
import traceback
from dataclasses import asdict
from pathlib import Path

from harness.contract import phases
from harness.contract.spawn import set_parent_death_signal
from harness.contract.spec import WorkerRecord, WorkerSettings, WorkerSpec
from harness.core.files import write_json_atomic

#: Exit codes of a worker (the parent maps them to the `error` column).
EXIT_OK, EXIT_FAILED, EXIT_BAD_SPEC, EXIT_ORPHANED, EXIT_NOT_RELEASED = 0, 1, 2, 4, 5
#: How often the watchdog checks that the harness that started it is still alive.
PARENT_POLL_S = 0.1


def parent_alive(pid: int, create_time: float) -> bool:
    """Is the process ``pid`` that was created at ``create_time`` still running? (pids are
    reused, so the creation time is part of the identity.)"""
    if os.name == "posix" and pid:
        return os.getppid() == pid  # a dead parent's children are re-parented at once
    import psutil

    try:
        return abs(psutil.Process(pid).create_time() - create_time) < 0.05
    except psutil.Error:
        return False


def exit_with_parent(spec: WorkerSpec, poll_s: float = PARENT_POLL_S) -> None:
    """End this worker as soon as the harness named in the spec is gone (SIGKILL, the OOM
    killer, a crash): the parent's cleanup never runs then, and a worker would otherwise hold
    its memory forever. If the parent died before we got here, exit now."""
    if not spec.parent_pid:
        return  # started by hand (debugging): nobody to watch
    set_parent_death_signal()
    if not parent_alive(spec.parent_pid, spec.parent_create_time):
        os._exit(EXIT_ORPHANED)

    def watch() -> None:
        while True:
            time.sleep(poll_s)
            if not parent_alive(spec.parent_pid, spec.parent_create_time):
                os._exit(EXIT_ORPHANED)

    threading.Thread(target=watch, name="parent-watchdog", daemon=True).start()


def wait_for_release(timeout_s: float) -> bool:
    """The barrier: block until the parent writes a line (or closes stdin), at most
    ``timeout_s``. A thread does the read so the wait itself has a deadline on every OS."""
    released = threading.Event()

    def read() -> None:
        try:
            sys.stdin.readline()
        except (OSError, ValueError):
            pass
        released.set()

    threading.Thread(target=read, name="release-reader", daemon=True).start()
    return released.wait(timeout_s)


def apply_fault_action(action: str) -> None:
    """Deliberate worker failures for the reliability suites (never set by `harness run`)."""
    if action == "crash":
        os._exit(3)
    if action == "signal":
        os.kill(os.getpid(), signal.SIGKILL if hasattr(signal, "SIGKILL") else signal.SIGTERM)
    if action == "hang":
        time.sleep(10**6)
    if action == "raise":
        raise RuntimeError("worker raised on purpose (fault_action=raise)")


#: Pause points of the start-up (test hook): "start" is before the worker watches its parent
#: (the window a kernel parent-death signal cannot cover: a real interpreter start takes about
#: as long), so it is short; "imports" sleeps until the worker is killed; "session" stands for
#: a session creation hung in native code: it never returns and holds the GIL, so no Python
#: thread (the watchdog included) runs again and only the kernel can end the worker.
PAUSE_POINTS = {"pause-start": 0.5, "pause-imports": 10**6}


def pause_point(spec: WorkerSpec, name: str) -> None:
    """Reliability suites only: stop at the named moment of the start-up, after leaving a
    marker file the test waits for, so it can kill the harness exactly then."""
    if spec.fault_action != name:
        return
    Path(f"{spec.log_path}.{name}").touch()
    if name == "pause-session":
        import re

        re.match(r"(a+)+$", "a" * 64 + "b")  # exponential backtracking in C, GIL held: never returns
    time.sleep(PAUSE_POINTS[name])


def _error_text(err: BaseException) -> str:
    text = str(err).strip()
    return f"{type(err).__name__}: {text.splitlines()[0] if text else ''}"


def run_and_check(target, live, models, record: WorkerRecord, settings: WorkerSettings) -> tuple | None:
    """First inference of every model in session group 0 (timed, checked against each model's
    reference), then ``warmup`` untimed and ``runs`` timed passes over all of them (on
    ``concurrency`` threads) for the latency figures (`harness.core.latency`). The start-up
    peak's sampling stops after the first inference: the timed runs are steady state. Returns
    the timed runs raw (samples, wall): their statistics are computed after the sample
    (`record_latency`), so the observer leaves no trace."""
    from harness.core.latency import timed_runs
    from harness.prep.reference import load_reference
    from harness.runner import peak

    if settings.new_tokens:
        return run_generate(target, live, models, record, settings)
    references = [load_reference(m) for m in models]
    sessions = live.first_group()
    phases.mark("first_run")
    t0 = time.perf_counter()
    outputs = [target.run(s, m, feeds) for s, m, (feeds, _) in zip(sessions, models, references, strict=True)]
    record.first_run_s = time.perf_counter() - t0
    record_peak(record, peak.stop())
    details = []
    record.output_ok = True
    for model, got, (feeds, reference) in zip(models, outputs, references, strict=True):
        ok, detail = _checked(target, got, feeds, reference, model)
        prefix = f"{Path(model.source).name}: " if len(models) > 1 and detail else ""
        if detail:
            details.append(prefix + detail)
        record.output_ok = record.output_ok and ok
    record.output_detail = "; ".join(details)
    if not record.output_ok:
        record.error = f"wrong output: {record.output_detail}"
        return None

    def one_pass() -> None:
        for s, m, (feeds, _) in zip(sessions, models, references, strict=True):
            target.run(s, m, feeds)

    record.warmup, record.concurrency = settings.warmup, settings.concurrency
    for _ in range(record.warmup):
        one_pass()
    return timed_runs(one_pass, settings.runs, record.concurrency) if settings.runs else None


def run_generate(target, live, models, record: WorkerRecord, settings: WorkerSettings) -> list[float]:
    """Every session's greedy loop, checked against the reference ids; the KV caches stay alive
    until after the memory sample. Returns the decode steps' times (statistics after the release)."""
    from statistics import median

    from harness.runner import peak
    from harness.runner.control import ControlTarget

    phases.mark("first_run")
    with _own_memory() as read:
        prefilled: list = []
        runs = [target.generate(g, models, settings, lambda: prefilled.append(read())) for g in live.groups]
        record.prefill_private_bytes, record.last_token_private_bytes = prefilled[0], read()
    record_peak(record, peak.stop())
    live.keepalive.extend(r.kv for r in runs)
    record.first_run_s, record.ttft_s = runs[0].ttft_s, median(r.ttft_s for r in runs)
    record.kv_cache_bytes = sum(r.kv_bytes for r in runs)
    record.generated_tokens = " ".join(map(str, runs[0].ids))
    wrong = [r.ids for r in runs if r.ids != settings.expected_ids]
    record.tokens_ok = record.output_ok = isinstance(target, ControlTarget) or not wrong
    if not record.tokens_ok:
        shown = " ".join(map(str, settings.expected_ids))
        record.error = f"wrong tokens: {' '.join(map(str, wrong[0]))} where the reference generated {shown}"
    return [s for r in runs for s in r.step_s]


@contextlib.contextmanager
def _own_memory():
    """Reads of this process's private memory (anonymous pages; Windows: private bytes), None where unreadable."""
    from harness.runner.procmem import open_reader

    try:
        reader = open_reader()
    except OSError:
        yield lambda: None
        return
    try:
        yield lambda: reader.read_split()[0]
    finally:
        reader.close()


def _checked(target, got: list, feeds: dict, reference: dict, model) -> tuple[bool, str]:
    """The target's output check, unless the reference cannot verify the weights at all (NaN
    or infinite feeds, an output with no finite value: a cache entry changed since it was
    made, which the preparation would have refused): then "inconclusive", never a pass."""
    from harness.prep.outputs import nonfinite_problem
    from harness.runner.control import ControlTarget

    if not isinstance(target, ControlTarget):  # the control's outputs are not compared at all
        compared = {n: reference[n] for n in model.outputs if n in reference and n not in model.nondeterministic}
        why = nonfinite_problem(feeds, compared)
        if why:
            return False, f"inconclusive: {why}"
    return target.check_output(got, reference, model)


def record_latency(record: WorkerRecord, timed: tuple | list | None) -> None:
    """The latency statistics of the timed runs (a list: the decode steps), after the barrier (numpy allocates)."""
    if isinstance(timed, list):
        from harness.prep.decoder import token_stats

        for name, value in token_stats(timed).items():
            setattr(record, name, value)
    elif timed is not None:
        from harness.core.latency import record_stats, stats

        record_stats(record, stats(*timed))


def record_peak(record: WorkerRecord, found) -> None:
    """The start-up peak sampler's figures into the record."""
    record.peak_private_bytes, record.peak_phase = found.peak_private_bytes, found.peak_phase
    record.peak_shared_bytes, record.peak_rss_bytes = found.peak_shared_bytes, found.peak_rss_bytes


def mapped_resident_bytes(folder: Path) -> int | None:
    """Resident bytes of every file under the model folder mapped into this process (its own
    memory maps): what the parent's sample of this process must at least show as RSS."""
    try:
        import psutil

        root = os.path.normcase(str(Path(folder).resolve())) + os.sep
        return sum(
            m.rss for m in psutil.Process().memory_maps(grouped=True) if os.path.normcase(m.path).startswith(root)
        )
    except Exception:  # not readable here: no mapped-pages check for this worker
        return None


def drop_weight_pages(live) -> None:
    """Reliability suites only ("drop-weight-pages"): hand every page of the sessions' weights
    back to the kernel (MADV_DONTNEED), after the worker measured what it holds and before it
    reports ready: the parent then samples a process whose memory really lacks what its mode
    must hold, and must call the sample implausible."""
    import ctypes
    import mmap

    from onnx import helper

    libc = ctypes.CDLL(None, use_errno=True)
    libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    page = mmap.PAGESIZE
    for value in live.keepalive:
        if not hasattr(value, "element_type"):  # the runtime's own copy: its OrtValues cover it
            continue
        size = int(helper.tensor_dtype_to_np_dtype(value.element_type()).itemsize)
        for dim in value.shape():
            size *= dim
        start = -(-value.data_ptr() // page) * page
        end = (value.data_ptr() + size) // page * page
        if end > start:
            libc.madvise(start, end - start, 4)  # MADV_DONTNEED


def quiet_collector() -> None:
    """Collect the worker's own start-up garbage (interpreter, imports, spec) and freeze what
    survives, before any target's clock starts: otherwise a collection of it lands inside a
    timed load when that load's allocations cross the collector's threshold, in one target's
    clock and not another's (the cpu target's mapped load got a 0.15 ms generation-0 pass in
    every worker, the peer's none), a cost of the harness's imports that the EP, in C++, never
    pays. What the load itself allocates is still collected as usual."""
    gc.collect()
    gc.freeze()


def run_worker(spec: WorkerSpec) -> int:
    from harness.runner import peak

    peak.start(spec.phase_board, spec.phase_slot)  # the start-up peak, from the first line ("start")
    pause_point(spec, "pause-start")
    exit_with_parent(spec)  # before any heavy import: an orphan must not even finish starting
    pause_point(spec, "pause-imports")
    from harness.prep.folder import PreparedModel
    from harness.runner.control import ControlTarget
    from harness.runner.floor import map_floor_s
    from harness.targets import get_target

    record = WorkerRecord(pid=os.getpid())
    live = None
    try:
        apply_fault_action(spec.fault_action)
        target = ControlTarget() if spec.control else get_target(spec.target)
        models = [PreparedModel.load(Path(folder), check_files=False) for folder in spec.model_folders()]
        pause_point(spec, "pause-session")
        quiet_collector()
        record.floor_s = map_floor_s(models)
        phases.mark("load")
        cpu0, wall0 = time.process_time(), time.perf_counter()
        live = target.create_sessions(spec, models, record)
        timed = run_and_check(target, live, models, record, spec.settings)
        record.cpu_s, record.busy_s = time.process_time() - cpu0, time.perf_counter() - wall0
        if spec.fault_action == "drop-weight-pages":  # what it held, before the hook drops it
            resident = [mapped_resident_bytes(m.folder) for m in models]
            record.mapped_resident_bytes = None if any(r is None for r in resident) else sum(resident)
            drop_weight_pages(live)
    except Exception as err:  # a worker's failure is data for the parent
        traceback.print_exc()
        record.error = _error_text(err)
        if record.peak_private_bytes is None:
            record_peak(record, peak.stop())  # the peak until the failure: what a failed load cost
        write_json_atomic(Path(spec.result_path), asdict(record))
        return EXIT_FAILED
    write_json_atomic(Path(spec.ready_path), asdict(record))
    if spec.fault_action == "exit-after-ready":  # a background exit(0), as #337's TerminateProcess(0)
        threading.Thread(target=os._exit, args=(EXIT_OK,), name="terminate-process", daemon=True).start()
    if not wait_for_release(spec.release_timeout_s):
        print(f"not released within {spec.release_timeout_s:g} s: exiting", file=sys.stderr)
        return EXIT_NOT_RELEASED
    record.released = True
    record.peak_bytes = _peak()
    record_latency(record, timed)
    live.close()
    record.teardown = _teardown_leftovers()
    if record.teardown:
        record.error = f"teardown left {record.teardown}"
    write_json_atomic(Path(spec.result_path), asdict(record))
    return EXIT_FAILED if record.error else EXIT_OK


def _teardown_leftovers() -> str:
    """What mapper_impl still holds after every session is closed (mappings, heap copies, DMA
    registrations, failed deregistrations): a worker must end with nothing, whatever faults
    were injected ("" when clean)."""
    import gc

    from mapper_impl import stats

    gc.collect()  # sessions and OrtValues in reference cycles
    left = stats()
    held = [] if left.is_clean() else [f"{k}={v}" for k, v in left.to_dict().items() if v and k not in LEAK_WORDS]
    held += [f"{k}={v} ({LEAK_WORDS[k]})" for k, v in left.leaks().items()]
    return ", ".join(dict.fromkeys(held))


#: What each of mapper_impl's leak counters means, in the words a worker's error gives.
LEAK_WORDS = {
    "leaked_loads": "",
    "dma_leaked_registrations": "failed deregistrations, still registered: a leak",
    "dma_stale_registrations": "failed registrations left behind, never undone, as upstream does: stale, a leak",
}


def _peak() -> int | None:
    from harness.runner.memory import own_peak_bytes

    return own_peak_bytes()


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: python -m harness.runner.worker SPEC.json", file=sys.stderr)
        return EXIT_BAD_SPEC
    try:
        spec = WorkerSpec.read(Path(argv[0]))
    except (OSError, ValueError, TypeError) as err:
        print(f"harness.runner.worker: bad spec {argv[0]}: {err}", file=sys.stderr)
        return EXIT_BAD_SPEC
    return run_worker(spec)


if __name__ == "__main__":
    sys.exit(main())
