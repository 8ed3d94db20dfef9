"""`harness run`: plan the groups, run them, write results, summary and metadata. The runner
records facts only (`harness.core` says what they mean); the tables are rewritten atomically
after every group and metadata.json says "running" until the end: a partial run never looks complete."""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import platform
import shlex
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path

from harness.contract.options import RunOptions
from harness.contract.spec import WorkerSettings
from harness.core.errors import InputError, RunFailed, SpawnError, raise_if_interrupted
from harness.core.files import write_json_atomic
from harness.core.rundata import METADATA_JSON
from harness.core.schema import FORMAT_VERSION, ResultRow, SummaryRow
from harness.core.summary import group_key, summarize
from harness.core.tables import write_run_tables
from harness.core.timing import INTERLEAVED
from harness.core.vocab import PageCache, RunStatus, Start, Workload
from harness.prep.configkeys import unread_keys
from harness.prep.reference import content_fingerprint
from harness.runner.control import has_control
from harness.runner.group import GroupResult, GroupSpec
from harness.runner.outdir import RunFolder, claim
from harness.runner.preflight import check_before_work, check_memory_budget, copies_per_worker
from harness.runner.resources import check_address_space, describe
from harness.runner.seal import broken, seals
from harness.runner.timingpass import plan_steps, run_step
from harness.targets import get_target
from harness.targets.base import Prepared


@dataclass
class RunOutcome:
    out: Path
    rows: list[ResultRow]
    summary: list[SummaryRow]
    exit_code: int
    status: str
    folder: RunFolder | None = None  # holds the folder's lock until `release` (after the report)

    def release(self) -> None:
        if self.folder is not None:
            self.folder.release()


def command_line(argv: list[str]) -> str:
    """How this run was started, for the report header (shell-quoted)."""
    return shlex.join(["python", "-m", "harness", *argv])


def warm_page_cache(path: Path) -> None:
    """Read a file once so both modes start from a warm page cache."""
    from harness.runner.pagecache import warm

    warm(path)


def plan_groups(
    opts: RunOptions, prepared: dict[str, Prepared], out: Path, parent: tuple[int, float]
) -> list[GroupSpec]:
    """Every (target, mode, N, repeat) group in run order: repeats outermost, so drift spreads over both modes."""
    groups = []
    session = opts.session_settings().to_dict()
    starts = [Start.CONCURRENT, *([Start.SEQUENTIAL] if opts.sequential_timing else [])]
    for repeat in range(opts.repeat):
        for n in opts.processes:
            plan = [(opts.target, mode) for mode in opts.modes]
            if opts.peer is not None:
                plan.append((opts.peer, "mapped"))
            for start, (target_name, mode) in ((s, p) for s in starts for p in plan):
                target = get_target(target_name)
                ready = prepared[target_name]
                groups.append(
                    GroupSpec(
                        target=target_name,
                        mode=mode,
                        processes=n,
                        sessions_per_process=opts.sessions_per_process,
                        repeat=repeat,
                        model_folder=ready.model.folder.resolve(),
                        workdir=(out / "workers" / f"{target_name}-{mode}-n{n}-r{repeat}{_suffix(start)}").resolve(),
                        worker_timeout_s=opts.worker_timeout_s,
                        weights_bytes=ready.weights_bytes,
                        models=[str(m.folder.resolve()) for m in ready.models],
                        settings=WorkerSettings(session, opts.runs, opts.warmup, opts.concurrency, **ready.generation),
                        options={**target.options_for(opts), **ready.worker_options},
                        parent_pid=parent[0],
                        parent_create_time=parent[1],
                        fault_actions=opts.fault_actions if target_name == opts.target else {},
                        control=has_control(target),
                        start=start,
                        memory_limit_bytes=opts.memory_limit,
                    )
                )
    return groups


def _suffix(start: str) -> str:
    """The workers folder of a timing-pass group: ``...-seq`` beside the concurrent one's."""
    return "-seq" if start == Start.SEQUENTIAL else ""


def _metadata(opts: RunOptions, prepared: dict[str, Prepared], started: str, status: str, t0: float, env: dict) -> dict:
    target = get_target(opts.target)
    own = prepared.get(opts.target)
    default_gates = target.default_gates(opts) if opts.default_gates else []
    return {
        "format_version": FORMAT_VERSION,
        "status": status,
        "run": {
            "run_id": None,  # filled in by execute: the folder name
            "target": opts.target,
            "target_options": target.options_for(opts),
            "peer": opts.peer,
            "model": own.source if own else (str(opts.model) if opts.model else "generated"),
            "models": [str(m.source) for m in own.models] if own else [str(m) for m in opts.models],
            "model_fingerprint": content_fingerprint(own.models) if own else None,
            "weights_bytes": own.weights_bytes if own else None,
            "weights_file_bytes": (own.file_bytes or None) if own else None,
            "gathered_weights_bytes": (own.gathered_bytes or None) if own else None,
            "session": opts.session_settings().to_dict(),
            "unverified_session_config": unread_keys(list(opts.session_config)),
            "runs": opts.runs,
            "warmup": opts.warmup,
            "concurrency": opts.concurrency,
            "workload": opts.workload,
            "generate": own.generation if own and own.generation else None,
            "page_cache": opts.page_cache,
            "memory_limit_bytes": opts.memory_limit,
            "inputs": {"shapes": opts.shapes, "free_dims": opts.free_dims, "values": opts.input_values},
            "processes": opts.processes,
            "sessions_per_process": opts.sessions_per_process,
            "modes": opts.modes,
            "repeat": opts.repeat,
            "sequential_timing": opts.sequential_timing,
            "timing_pass": (INTERLEAVED if starts_warm(opts) else "grouped") if opts.sequential_timing else None,
            "labels": opts.labels,
            "started": started,
            "finished": dt.datetime.now().astimezone().isoformat(timespec="seconds"),
            "duration_s": round(time.monotonic() - t0, 3),
            "command": opts.command,
            "project_to": (
                {"sessions": opts.project_to[0], "weights_bytes": opts.project_to[1]} if opts.project_to else None
            ),
        },
        "gates": list(opts.gates),
        "default_gates": [{"expr": expr, "why": why} for expr, why in default_gates],
        "target_notes": list(
            dict.fromkeys(target.notes(opts) + [n for ready in prepared.values() for n in ready.notes])
        ),
        "env": env,
    }


@contextmanager
def _writing(name: str):
    """OSError while writing ``name`` -> RunFailed with one line saying what ran out."""
    try:
        yield
    except OSError as err:
        raise RunFailed(describe(err, f"writing {name}")) from err


def record_status(out: Path, meta: dict) -> bool:
    """Write metadata.json whole (atomic), else in place padded to its old length; False when neither worked."""
    path = out / METADATA_JSON
    try:
        write_json_atomic(path, meta)
        return True
    except OSError:
        pass
    data = (json.dumps(meta, indent=1, default=str) + "\n").encode("utf-8")
    try:
        # in place, never through a link planted at the name (O_NOFOLLOW)
        flags = os.O_RDWR | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_BINARY", 0)
        with os.fdopen(os.open(path, flags), "r+b") as handle:
            old = handle.seek(0, os.SEEK_END)
            if len(data) < old:
                data = data[:-1] + b" " * (old - len(data)) + b"\n"
            handle.seek(0)
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        return True
    except OSError:
        return False


def write_outputs(out: Path, rows: list[ResultRow], system: dict, meta: dict) -> list[SummaryRow]:
    """Rewrite the tables, then metadata.json; a table that cannot be written fails the run."""
    summary = summarize(rows, system)
    meta["run"]["run_id"] = out.name
    try:
        write_run_tables(out, rows, summary, out.name, guard=_writing)
    except RunFailed as err:
        meta["status"] = RunStatus.failed(err)
        if not record_status(out, meta):
            raise RunFailed(f"{err}; metadata.json could not be updated either") from err
        raise
    if not record_status(out, meta):
        raise RunFailed(f"disk full writing {METADATA_JSON} (it may still say {meta['status']!r} from before)")
    return summary


def prepare_all(opts: RunOptions, progress) -> dict[str, Prepared]:
    """The run's target (and peer) prepared: models built or taken from the cache."""
    prepared = {}
    for name in [opts.target, *([opts.peer] if opts.peer else [])]:
        with progress.stage(f"preparing the {name} model (built once, then cached)"):
            prepared[name] = get_target(name).prepare(opts, progress)
        progress.note(f"model: {prepared[name].source}, {prepared[name].weights_bytes} bytes of weights")
    if opts.workload == Workload.GENERATE:  # one reference for every target: ORT's CPU EP over the model
        from harness.prep.decoder import generation

        with progress.stage("generating the reference tokens"):
            found = generation(opts, prepared[opts.target].models, getattr(progress, "step", None))
        for ready in prepared.values():
            ready.generation = found
    return prepared


def ran_with(opts: RunOptions, prepared: dict[str, Prepared]) -> RunOptions:
    """The run's options as its target prepared them (a provider option it chose itself)."""
    chosen = prepared[opts.target].provider_options
    return opts if chosen is None else replace(opts, provider_options=chosen)


def keep_logs(out: Path, prepared: dict[str, Prepared]) -> None:
    """The preparation's logs (the QNN compiler's) copied into ``logs/``: they belong with the run."""
    from harness.core.files import copy_file, make_folder

    for ready in prepared.values():
        for log in ready.logs:
            if log.is_file():
                make_folder(out / "logs", "logs folder")
                with contextlib.suppress(InputError):
                    copy_file(log, out / "logs" / f"{log.parent.name}-{log.name}", "log")


def fail_if_weights_changed(result: GroupResult, sealed: list) -> None:
    """Fail every worker of a group whose weights changed while it ran."""
    reasons = broken(sealed)
    if reasons:
        why = "weights changed during the group: " + "; ".join(reasons)
        for row in result.rows:
            row.error = f"{row.error}; {why}" if row.error else why


def starts_warm(opts: RunOptions) -> bool:
    """Every group starts with the weights in the page cache."""
    from harness.runner.container import COUNTS_PAGE_CACHE

    return opts.page_cache != PageCache.COLD and not (opts.memory_limit and COUNTS_PAGE_CACHE)


def page_cache_before(opts: RunOptions, ready: Prepared, progress):
    """Evict the group's weights (cold) or measure how warm they are; a failed check is recorded."""
    from harness.runner.pagecache import make_cold, measure

    files = list(dict.fromkeys(ready.warm_files))
    if starts_warm(opts):
        return measure(files, PageCache.WARM)
    state = make_cold(files)
    if state.state != PageCache.COLD:
        progress.note(f"page cache: eviction not verified: {state.note}")
    return state


def execute(opts: RunOptions, progress) -> RunOutcome:
    """Run every group; on Ctrl-C or a resource running out, write what was measured and say so."""
    from harness.runner.container import session

    with session():  # every memory container of the run is gone at its end, however it ends
        return _execute(opts, progress)


def _execute(opts: RunOptions, progress) -> RunOutcome:
    from harness.core.runmeta import platform_name
    from harness.runner.memory import system_available_bytes
    from harness.runner.metadata import wine_env

    if where := platform_name({"system": platform.system(), "arch": platform.machine(), **wine_env()}):
        progress.note(f"platform: {where}")  # first: what follows is measured with Windows' figures
    for name in check_before_work(opts):
        progress.note(f"memory limit: removed {name}, left behind by a run that was killed")
    prepared = prepare_all(opts, progress)
    opts = ran_with(opts, prepared)
    check_memory_budget(opts, prepared[opts.target].weights_bytes, system_available_bytes())
    check_address_space(prepared[opts.target].weights_bytes, copies_per_worker(opts))
    folder = claim_folder(opts, progress)
    try:
        return _run_groups(opts, prepared, folder, progress)
    except BaseException:
        folder.release()
        raise


def claim_folder(opts: RunOptions, progress) -> RunFolder:
    """The run folder, claimed; with ``--replace`` what went is said, even under ``--quiet``."""
    folder = claim(opts.out, opts.out_prefix, replace=opts.replace)
    if folder.cleaned:
        line = f"note: --out {folder.path}: replaced the earlier run there (removed {', '.join(folder.cleaned)})"
        if progress.quiet:
            print(line, file=sys.stderr, flush=True)
        else:
            progress.note(line)
    return folder


def _run_step(opts: RunOptions, prepared: dict[str, Prepared], step: list[GroupSpec], progress) -> list[GroupResult]:
    """One step's groups run, each told its page cache and failed if its weights changed."""
    sealed = [seals(prepared[group.target].warm_files) for group in step]
    caches = [page_cache_before(opts, prepared[group.target], progress) for group in step]
    results: list[GroupResult] = run_step(step, progress.step_event)
    for seal, cache, result in zip(sealed, caches, results, strict=True):
        fail_if_weights_changed(result, seal)
        for row in result.rows:
            row.page_cache, row.weights_resident_bytes = cache.state, cache.resident_bytes
    return results


def _run_groups(opts: RunOptions, prepared: dict[str, Prepared], folder: RunFolder, progress) -> RunOutcome:
    from harness.contract.spawn import harness_identity
    from harness.runner.metadata import environment

    out = folder.path
    keep_logs(out, prepared)
    started = dt.datetime.now().astimezone().isoformat(timespec="seconds")
    t0 = time.monotonic()
    if opts.page_cache == PageCache.WARM and not opts.memory_limit:  # a limit's groups start cold
        for path in dict.fromkeys(p for ready in prepared.values() for p in ready.warm_files):
            warm_page_cache(path)
    groups = plan_groups(opts, prepared, out, harness_identity())
    env = environment()
    rows: list[ResultRow] = []
    system: dict[tuple, tuple] = {}  # (delta, noise, SystemPeak) per group
    failure = ""

    def meta(status: str) -> dict:
        return _metadata(opts, prepared, started, status, t0, env)

    try:
        write_outputs(out, rows, system, meta(RunStatus.RUNNING))
        done = 0
        # A group, or one repeat's interleaved timing pass (a cold run times them one by one).
        for step in plan_steps(groups, interleave=starts_warm(opts)):
            raise_if_interrupted()
            progress.step_started(done, len(groups), step)
            results = _run_step(opts, prepared, step, progress)
            for group, result in zip(step, results, strict=True):
                rows.extend(result.rows)
                system[group_key(group)] = (result.system_delta_bytes, result.system_noise_bytes, result.system_peak)
            progress.step_finished(done, len(groups), step, results)
            done += len(step)
            write_outputs(out, rows, system, meta(RunStatus.RUNNING))
        raise_if_interrupted()
        status = RunStatus.COMPLETE
    except KeyboardInterrupt:
        status = RunStatus.INTERRUPTED
    except RunFailed as err:
        err.out = out
        raise
    except (SpawnError, InputError) as err:  # InputError: a link planted in the run folder meanwhile
        failure = str(err)
    except (OSError, MemoryError) as err:
        failure = describe(err, "running the groups")
    if failure:
        status = RunStatus.failed(failure)
    try:
        summary = write_outputs(out, rows, system, meta(status))
    except RunFailed as err:
        err.out = out
        raise
    if failure:
        raise RunFailed(failure, out)
    failed = any(s.failed_workers for s in summary)
    code = 130 if status == RunStatus.INTERRUPTED else (1 if failed else 0)
    return RunOutcome(out, rows, summary, code, status, folder)
