"""``python -m harness capacity``: per mode, the largest N whose workers all start, answer
correctly and stay alive under a memory limit (`harness.core.capacity.search`: doubling, then
bisection), each probe a group without a control in a container, the weights' pages evicted
first. Its run folder is a run's plus ``capacity.json``."""

from __future__ import annotations

import datetime as dt
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from harness.contract.options import RunOptions
from harness.core import capacity as cap
from harness.core.errors import InputError, RunFailed, SpawnError, raise_if_interrupted
from harness.core.files import write_json_atomic
from harness.core.schema import ResultRow
from harness.core.summary import group_key, summarize
from harness.core.vocab import Mode, RunStatus, Workload
from harness.runner.container import COUNTS_PAGE_CACHE, session
from harness.runner.group import run_group
from harness.runner.outdir import RunFolder
from harness.runner.resources import describe
from harness.runner.sweep import (
    _metadata,
    claim_folder,
    page_cache_before,
    plan_groups,
    prepare_all,
    ran_with,
    write_outputs,
)
from harness.targets.base import Prepared


@dataclass
class CapacityOutcome:
    out: Path
    document: dict[str, Any] | None
    exit_code: int
    status: str
    folder: RunFolder | None = None

    def release(self) -> None:
        if self.folder is not None:
            self.folder.release()


def capacity_options(opts: RunOptions, max_processes: int) -> RunOptions:
    """The run options of a capacity search: no control, no gates, a container of the limit."""
    if opts.memory_limit is None:
        raise InputError("capacity needs --memory-limit SIZE: the limit the sessions must fit under")
    if opts.peer is not None:
        raise InputError("capacity measures one target: drop --peer")
    return replace(opts, processes=[max_processes], gates=[], default_gates=False, out_prefix="capacity", repeat=1)


class _Search:
    """One capacity run's state: the rows so far, the probes per mode, the folder's tables."""

    def __init__(self, opts: RunOptions, prepared: dict[str, Prepared], out: Path, progress) -> None:
        from harness.contract.spawn import harness_identity
        from harness.runner.metadata import environment

        self.opts, self.prepared, self.out, self.progress = opts, prepared, out, progress
        self.identity, self.env = harness_identity(), environment()
        self.started = dt.datetime.now().astimezone().isoformat(timespec="seconds")
        self.t0 = time.monotonic()
        self.rows: list[ResultRow] = []
        self.system: dict[tuple, tuple] = {}
        self.probed: list[int] = []

    def meta(self, status: str) -> dict[str, Any]:
        shown = replace(self.opts, processes=sorted(set(self.probed)) or list(self.opts.processes))
        meta = _metadata(shown, self.prepared, self.started, status, self.t0, self.env)
        meta["kind"] = "capacity"
        meta["run"]["max_processes"] = max(self.opts.processes)
        return meta

    def write(self, status: str) -> None:
        write_outputs(self.out, self.rows, self.system, self.meta(status))

    def probe(self, mode: str, n: int) -> cap.Probe:
        """One group of ``n`` workers of ``mode`` under the limit."""
        raise_if_interrupted()
        opts = replace(self.opts, processes=[n], modes=[mode])
        group = plan_groups(opts, self.prepared, self.out, self.identity)[0]
        group.control = False
        self.progress.note(f"capacity: {mode} N={n}: starting {n} worker(s) under {_limit(self.opts)}")
        t0 = time.monotonic()
        state = page_cache_before(self.opts, self.prepared[self.opts.target], self.progress)
        result = run_group(group)
        seconds = time.monotonic() - t0
        for row in result.rows:
            row.page_cache, row.weights_resident_bytes = state.state, state.resident_bytes
        self.rows.extend(result.rows)
        self.probed.append(n)
        key = group_key(group)
        self.system[key] = (result.system_delta_bytes, result.system_noise_bytes, result.system_peak)
        outcome, error = cap.probe_outcome(result.rows)
        figures = summarize(result.rows, {key: self.system[key]})[0]
        found = cap.Probe(
            processes=n,
            outcome=outcome,
            ok_workers=int(figures.ok_workers or 0),
            oom_workers=int(figures.oom_workers or 0),
            failed_workers=int(figures.failed_workers or 0) - int(figures.oom_workers or 0),
            seconds=round(seconds, 3),
            container_peak_bytes=figures.container_peak_bytes,
            peak_private_bytes=figures.max_peak_private_bytes,
            page_cache=state.state,
            error=error,
        )
        self.progress.note(cap.probe_line(mode, found))
        self.write("running")
        return found

    def mode(self, mode: str) -> cap.ModeCapacity:
        probes: list[cap.Probe] = []

        def fits(n: int) -> bool:
            probes.append(self.probe(mode, n))
            return probes[-1].outcome == "fit"

        limit, top = int(self.opts.memory_limit or 0), max(self.opts.processes)
        answer = cap.search(fits, top)
        first = next((p for p in probes if p.processes == 1), None)
        ready = self.prepared[self.opts.target]
        peak = first.peak_private_bytes if first is not None else None
        projected = cap.projected_processes(mode, limit, peak, ready.weights_bytes, COUNTS_PAGE_CACHE)
        return cap.conclude(mode, probes, answer, top, projected, self.opts.sessions_per_process)


def _limit(opts: RunOptions) -> str:
    from harness.core.units import fmt_bytes

    return fmt_bytes(opts.memory_limit)


def run_capacity(opts: RunOptions, progress, json_path: Path | None = None) -> CapacityOutcome:
    """Check, prepare, search every mode, write the folder and capacity.json (and ``json_path``)."""
    from harness.runner.container import describe as container_kind
    from harness.runner.preflight import check_before_work

    with session():  # every container of the search is gone at its end, however it ends
        for name in check_before_work(opts):
            progress.note(f"memory limit: removed {name}, left behind by a run that was killed")
        progress.note(f"capacity: each probe runs in a container of {_limit(opts)} ({container_kind()})")
        prepared = prepare_all(replace(opts, peer=None), progress)
        opts = ran_with(opts, prepared)
        folder = claim_folder(opts, progress)
        try:
            return _search_all(opts, prepared, folder, progress, json_path)
        except BaseException:
            folder.release()
            raise


def _search_all(opts: RunOptions, prepared, folder: RunFolder, progress, json_path: Path | None) -> CapacityOutcome:
    search = _Search(opts, prepared, folder.path, progress)
    search.write("running")
    found: list[cap.ModeCapacity] = []
    failure = ""
    try:
        for mode in (Mode.HEAP, Mode.MAPPED):
            if mode in opts.modes:
                found.append(search.mode(mode))
        raise_if_interrupted()
        status = RunStatus.COMPLETE
    except KeyboardInterrupt:
        status = RunStatus.INTERRUPTED
    except SpawnError as err:
        failure = str(err)
    except (OSError, MemoryError) as err:
        failure = describe(err, "running the probes")
    if failure:
        status = f"failed: {failure}"
    search.write(status)
    if failure:
        raise RunFailed(failure, folder.path)
    if status != RunStatus.COMPLETE:
        return CapacityOutcome(folder.path, None, 130, status, folder)
    from harness.runner.container import describe as container_kind

    facts = {
        "target": opts.target,
        "weights_bytes": prepared[opts.target].weights_bytes,
        "sessions_per_process": opts.sessions_per_process,
        "container": container_kind(),
        "counts_file_pages": COUNTS_PAGE_CACHE,
        **_generate_facts(opts, search.rows),
    }
    document = cap.document(int(opts.memory_limit or 0), max(opts.processes), found, facts)
    write_json_atomic(folder.path / cap.CAPACITY_JSON, document)
    if json_path is not None:
        write_json_atomic(json_path, document, what="--json")
    code = 0 if all(m.max_processes is not None for m in found) else 1
    return CapacityOutcome(folder.path, document, code, status, folder)


def _generate_facts(opts: RunOptions, rows: list[ResultRow]) -> dict[str, Any]:
    """A generate run's workload and the KV cache each session held in the probes (P + G - 1 tokens
    fed, its bytes from the tensors' shapes; the workers' peaks include it)."""
    generation = opts.workload == Workload.GENERATE and next((r for r in rows if r.kv_cache_bytes), None)
    if not generation:
        return {}
    from harness.prep.decoder import DEFAULT_NEW_TOKENS, prompt_length

    per_session = generation.kv_cache_bytes // (generation.sessions_per_process or 1)
    tokens = prompt_length(opts) + (opts.new_tokens or DEFAULT_NEW_TOKENS)
    return {"workload": opts.workload, "tokens": tokens, "kv_cache_bytes_per_session": per_session}
