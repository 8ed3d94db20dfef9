"""`harness run`: plan the groups, run them, write results, summary and metadata.

Data flows one way: options -> prepared model -> groups of workers -> `ResultRow`s ->
`SummaryRow`s -> CSV files. The runner records facts only; what they mean (notes, gates,
verdicts) is `harness.core`'s job, and the report is rendered by the command line after the
run. results.csv and summary.csv are rewritten (atomically) after every group, and
metadata.json says whether the run is "running", "complete" or "interrupted", so a partial run
never looks complete.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import os
import shlex
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.core.errors import InputError
from harness.core.files import write_json_atomic
from harness.core.rundata import METADATA_JSON
from harness.core.schema import FORMAT_VERSION, MODES, ResultRow, SummaryRow
from harness.core.summary import group_key, summarize
from harness.core.tables import LONG_CSV, RESULTS_CSV, SUMMARY_CSV, write_long, write_rows
from harness.runner.group import GroupResult, GroupSpec, SpawnError, run_group
from harness.runner.outdir import RunFolder, check_out, claim
from harness.runner.resources import check_address_space, check_fd_limit, describe
from harness.targets import get_target
from harness.targets.base import Prepared, Target

#: Memory a worker needs beyond the weights (Python, numpy, ORT, arenas): measured ~60-120 MiB
#: here; 200 MiB keeps the refusal conservative.
WORKER_OVERHEAD_BYTES = 200 * 1024**2
#: The smallest generated model: one layer of the narrowest chain (128 x 128 fp32).
MIN_GENERATED_BYTES = 64 * 1024
#: Share of the available memory a run may plan to use before it is refused.
MEMORY_BUDGET_SHARE = 0.85


#: What ``--page-cache`` accepts: warm (read the weights once before the first group) or cold
#: (evict their pages before each group).
PAGE_CACHE_MODES = ("warm", "cold")


@dataclass
class RunOptions:
    target: str = "cpu"
    target_options: dict[str, Any] = field(default_factory=dict)  # the target's own options, generic
    peer: str | None = None  # a second target measured in mapped mode beside it (e.g. ort-native)
    model: Path | None = None  # the first of ``models`` (kept in step by __post_init__)
    models: list[Path] = field(default_factory=list)  # --model, repeatable: files or folders (a pipeline)
    model_size: int = 256 * 1024**2
    shapes: dict[str, list[int]] = field(default_factory=dict)
    free_dims: dict[str, int] = field(default_factory=dict)  # --free-dim NAME=VALUE
    input_values: dict[str, str] = field(default_factory=dict)  # --input NAME=FILE.npy | NAME=VALUE
    session_config: dict[str, str] = field(default_factory=dict)  # --session-config KEY=VALUE
    provider_options: dict[str, str] = field(default_factory=dict)  # --provider-option KEY=VALUE (qnn)
    intra_op_threads: int | None = None  # --intra-op-threads N
    runs: int = 0  # --runs R: timed inferences after the first (latency percentiles)
    page_cache: str = "warm"  # --page-cache warm|cold
    processes: list[int] = field(default_factory=lambda: [4])
    sessions_per_process: int = 1
    modes: list[str] = field(default_factory=lambda: list(MODES))
    repeat: int = 1
    worker_timeout_s: float = 300.0
    out: Path | None = None
    out_prefix: str = "run"  # the default folder is results/<prefix>-<date>-<time>[-K]
    cache_dir: Path | None = None
    gates: list[str] = field(default_factory=list)  # user gate expressions (validated before any work)
    default_gates: bool = True
    labels: dict[str, str] = field(default_factory=dict)  # KEY=VALUE tags (device kind...) for history
    fault_actions: dict[int, str] = field(default_factory=dict)
    command: str = ""
    project_to: tuple[int, int] | None = None  # (sessions, weights bytes) the report projects to

    def __post_init__(self) -> None:
        if self.cache_dir is not None:  # the compiler's child and the workers run in other folders
            self.cache_dir = Path(self.cache_dir).absolute()
        if self.models:
            self.model = self.models[0]
        elif self.model is not None:
            self.models = [self.model]

    def session_settings(self):
        """The ORT session knobs every session (mapped and heap) and the reference share."""
        from harness.prep.sessions import SessionSettings

        return SessionSettings(dict(self.session_config), self.intra_op_threads, dict(self.provider_options))

    def input_request(self):
        """What --shape, --free-dim and --input say about the model's inputs."""
        from harness.prep.inputs import InputRequest

        return InputRequest(dict(self.shapes), dict(self.free_dims), dict(self.input_values))

    def options_of(self, target: Target) -> dict[str, Any]:
        """``target``'s options: its defaults, overridden by what was given (for the run's own target)."""
        given = self.target_options if target.name == self.target else {}
        return {o.name: given.get(o.name, o.default) for o in target.options}


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


class RunFailed(Exception):
    """The run could not go on (disk full, no descriptors, a worker that cannot be started):
    metadata.json says ``"failed: <this text>"`` where it could still be written."""

    def __init__(self, message: str, out: Path | None = None) -> None:
        super().__init__(message)
        self.out = out


def command_line(argv: list[str]) -> str:
    """How this run was started, for the report header (shell-quoted)."""
    return shlex.join(["python", "-m", "harness", *argv])


def _copies_per_worker(opts: RunOptions) -> int:
    """Weight copies one worker may hold: one per session in heap mode (or a fallback), one
    mapping otherwise."""
    heap_like = "heap" in opts.modes or get_target(opts.target).mapped_may_copy(opts)
    return opts.sessions_per_process if heap_like else 1


def estimated_peak_bytes(opts: RunOptions, weights_bytes: int) -> int:
    """Memory the largest group needs: heap copies every session's weights, mapping once."""
    n = max(opts.processes)
    sessions = n * opts.sessions_per_process
    heap_like = "heap" in opts.modes or get_target(opts.target).mapped_may_copy(opts)
    weights = sessions * weights_bytes if heap_like else weights_bytes
    return weights + n * WORKER_OVERHEAD_BYTES


def expected_weights_bytes(opts: RunOptions) -> int:
    """Weights size known before any model is built or read: a run that cannot fit is
    refused before it spends minutes generating a model."""
    if opts.models:
        total = 0
        for path in opts.models:
            try:
                files = [p for p in path.iterdir() if p.is_file()] if path.is_dir() else [path]
                total += sum(f.stat().st_size for f in files)
            except OSError:
                continue  # preparation reports the missing file
        return total
    return opts.model_size


def check_memory_budget(opts: RunOptions, weights_bytes: int, available: int) -> None:
    """Refuse before starting a run that would push the machine into swap or the OOM killer."""
    need = estimated_peak_bytes(opts, weights_bytes)
    if need > available * MEMORY_BUDGET_SHARE:
        from harness.core.units import fmt_bytes

        raise InputError(
            f"--processes {max(opts.processes)} x {opts.sessions_per_process} session(s) needs about "
            f"{fmt_bytes(need)} but only {fmt_bytes(available)} is available; lower --processes, "
            "--sessions-per-process or --model-size"
        )


def warm_page_cache(path: Path) -> None:
    """Read a file once so both modes start from a warm page cache: init times then compare
    mapping with copying, not a cold disk with a warm one."""
    from harness.runner.pagecache import warm

    warm(path)


#: Largest input tensor a --shape may ask for, in elements (numpy's own ceiling is 2**63).
MAX_SHAPE_ELEMENTS = 2**48


def check_shapes_allocatable(shapes: dict[str, list[int]], available: int) -> None:
    """A --shape whose input cannot be allocated is refused now, not after the model was
    externalised: each input takes at least one byte per element (and every worker holds its
    own), so more elements than the available memory can never run."""
    for name, dims in shapes.items():
        elements = math.prod(dims)
        if elements > MAX_SHAPE_ELEMENTS or elements > available * MEMORY_BUDGET_SHARE:
            from harness.core.units import fmt_bytes

            raise InputError(
                f"--shape {name}={'x'.join(map(str, dims))}: an input of {elements:.4g} elements needs "
                f"at least {fmt_bytes(elements)} (1 byte each) but {fmt_bytes(available)} is available"
            )


def check_gates_fit_modes(opts: RunOptions) -> None:
    """A gate comparing mapped with heap can never be judged on a one-mode run: refused
    before work, rather than failed after it."""
    if len(set(opts.modes)) != 1:
        return
    from harness.core.gates import needs_both_modes, parse_gate

    for expr in opts.gates:
        if needs_both_modes(parse_gate(expr)):
            raise InputError(
                f"gate {expr!r} compares mapped with heap, but --modes is {opts.modes[0]} only: "
                "run both modes or drop the gate"
            )


def check_options(opts: RunOptions) -> None:
    """Everything that can be refused before work starts (target-independent rules first)."""
    if opts.model is None and opts.model_size < MIN_GENERATED_BYTES:
        raise InputError(
            f"--model-size {opts.model_size}: the generated model needs at least 64 KiB of weights "
            "(sizes are bytes unless given a unit, e.g. 64MiB)"
        )
    if (opts.shapes or opts.free_dims or opts.input_values) and opts.model is None:
        flag = "--shape" if opts.shapes else "--free-dim" if opts.free_dims else "--input"
        raise InputError(f"{flag} fixes inputs of --model; the generated model has one static input")
    if opts.provider_options and "qnn" not in (opts.target, opts.peer):
        raise InputError("--provider-option applies to --target qnn (the QNN EP's provider options)")
    from harness.prep.sessions import check_provider_options

    check_provider_options(opts.provider_options)
    if opts.page_cache not in PAGE_CACHE_MODES:
        raise InputError(f"--page-cache {opts.page_cache}: expected one of {', '.join(PAGE_CACHE_MODES)}")
    if opts.page_cache == "cold":
        from harness.runner.pagecache import check_cold_supported

        check_cold_supported()
    check_gates_fit_modes(opts)
    if opts.peer is not None:
        if opts.peer == opts.target:
            raise InputError(f"--peer {opts.peer}: the peer must be another target than --target")
        if "mapped" not in opts.modes:
            raise InputError("--peer is compared with the mapped mode: keep mapped in --modes")
    get_target(opts.target).check(opts)


def plan_groups(
    opts: RunOptions, prepared: dict[str, Prepared], out: Path, parent: tuple[int, float]
) -> list[GroupSpec]:
    """Every (target, mode, N, repeat) group in run order: repeats outermost, so a drift over
    time spreads over both modes instead of biasing one."""
    groups = []
    for repeat in range(opts.repeat):
        for n in opts.processes:
            plan = [(opts.target, mode) for mode in opts.modes]
            if opts.peer is not None:
                plan.append((opts.peer, "mapped"))
            for target_name, mode in plan:
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
                        workdir=(out / "workers" / f"{target_name}-{mode}-n{n}-r{repeat}").resolve(),
                        worker_timeout_s=opts.worker_timeout_s,
                        weights_bytes=ready.weights_bytes,
                        options={
                            **opts.options_of(target),
                            **ready.worker_options,
                            "session": opts.session_settings().to_dict(),
                            "runs": opts.runs,
                        },
                        parent_pid=parent[0],
                        parent_create_time=parent[1],
                        fault_actions=opts.fault_actions if target_name == opts.target else {},
                    )
                )
    return groups


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
            "target_options": opts.options_of(target),
            "peer": opts.peer,
            "model": own.source if own else (str(opts.model) if opts.model else "generated"),
            "models": [str(m.source) for m in own.models] if own else [str(m) for m in opts.models],
            "weights_bytes": own.weights_bytes if own else None,
            "session": opts.session_settings().to_dict(),
            "runs": opts.runs,
            "page_cache": opts.page_cache,
            "inputs": {"shapes": opts.shapes, "free_dims": opts.free_dims, "values": opts.input_values},
            "processes": opts.processes,
            "sessions_per_process": opts.sessions_per_process,
            "modes": opts.modes,
            "repeat": opts.repeat,
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
        "target_notes": target.notes(opts) + [n for ready in prepared.values() for n in ready.notes],
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
    """Write metadata.json whole (atomic), or when that cannot be done (a full disk has no
    room for the temp file) overwrite it in place, padded to its old length so no new block
    is needed. False when neither worked."""
    path = out / METADATA_JSON
    try:
        write_json_atomic(path, meta)
        return True
    except OSError:
        pass
    data = (json.dumps(meta, indent=1, default=str) + "\n").encode("utf-8")
    try:
        with open(path, "r+b") as handle:
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


def record_failure(out: Path, failure: str) -> RunFailed:
    """metadata.json says ``"failed: <failure>"`` for a step after the tables (report.html,
    headline.json, the history): a folder whose report could not be written must never look
    complete. Returns the RunFailed to raise (saying so when even the status could not be
    written)."""
    try:
        meta = json.loads((out / METADATA_JSON).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        meta = None
    if isinstance(meta, dict):
        meta["status"] = f"failed: {failure}"
        if record_status(out, meta):
            return RunFailed(failure, out)
    return RunFailed(f"{failure}; {METADATA_JSON} could not be updated either", out)


def write_outputs(out: Path, rows: list[ResultRow], system: dict, meta: dict) -> list[SummaryRow]:
    """Rewrite the tables, then metadata.json. A table that cannot be written fails the run:
    the status says which and why, so a half-written folder never looks complete."""
    summary = summarize(rows, system)
    meta["run"]["run_id"] = out.name
    try:
        with _writing(RESULTS_CSV):
            write_rows(out / RESULTS_CSV, rows, ResultRow)
        with _writing(SUMMARY_CSV):
            write_rows(out / SUMMARY_CSV, summary, SummaryRow)
        with _writing(LONG_CSV):
            write_long(out / LONG_CSV, rows, out.name)
    except RunFailed as err:
        meta["status"] = f"failed: {err}"
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
    return prepared


def keep_logs(out: Path, prepared: dict[str, Prepared]) -> None:
    """The preparation's logs (the QNN compiler's own output) into the run folder, ``logs/``:
    they belong with the run, not on the user's terminal."""
    import shutil

    for ready in prepared.values():
        for log in ready.logs:
            if log.is_file():
                (out / "logs").mkdir(exist_ok=True)
                shutil.copyfile(log, out / "logs" / f"{log.parent.name}-{log.name}")


def page_cache_before(opts: RunOptions, ready: Prepared, progress):
    """Evict the group's weights (--page-cache cold) or measure how warm they are; a failed
    eviction check is said on the progress stream and recorded in every row of the group."""
    from harness.runner.pagecache import make_cold, measure

    files = list(dict.fromkeys(ready.warm_files))
    if opts.page_cache != "cold":
        return measure(files, "warm")
    state = make_cold(files)
    if state.state != "cold":
        progress.note(f"page cache: eviction not verified: {state.note}")
    return state


def check_before_work(opts: RunOptions) -> None:
    """Every refusal that needs no model: options, limits, the output folder."""
    from harness.cache import default_cache_dir
    from harness.runner.memory import system_available_bytes

    check_options(opts)
    available = system_available_bytes()
    check_shapes_allocatable(opts.shapes, available)
    check_memory_budget(opts, expected_weights_bytes(opts), available)
    check_fd_limit(max(opts.processes))
    check_address_space(expected_weights_bytes(opts), _copies_per_worker(opts))
    check_out(opts.out, opts.cache_dir or default_cache_dir())


def execute(opts: RunOptions, progress) -> RunOutcome:
    """Run every group; on Ctrl-C, write what was measured and mark the run interrupted; when
    a resource runs out, write what was measured, mark the run failed and raise `RunFailed`."""
    from harness.runner.memory import system_available_bytes

    check_before_work(opts)
    prepared = prepare_all(opts, progress)
    check_memory_budget(opts, prepared[opts.target].weights_bytes, system_available_bytes())
    check_address_space(prepared[opts.target].weights_bytes, _copies_per_worker(opts))
    folder = claim(opts.out, opts.out_prefix)
    try:
        return _run_groups(opts, prepared, folder, progress)
    except BaseException:
        folder.release()
        raise


def _run_groups(opts: RunOptions, prepared: dict[str, Prepared], folder: RunFolder, progress) -> RunOutcome:
    from harness.runner.metadata import environment
    from harness.runner.spawn import harness_identity

    out = folder.path
    keep_logs(out, prepared)
    started = dt.datetime.now().astimezone().isoformat(timespec="seconds")
    t0 = time.monotonic()
    if opts.page_cache == "warm":
        for path in dict.fromkeys(p for ready in prepared.values() for p in ready.warm_files):
            warm_page_cache(path)
    groups = plan_groups(opts, prepared, out, harness_identity())
    env = environment()
    rows: list[ResultRow] = []
    system: dict[tuple, tuple[int | None, int | None]] = {}
    failure = ""

    def meta(status: str) -> dict:
        return _metadata(opts, prepared, started, status, t0, env)

    try:
        write_outputs(out, rows, system, meta("running"))
        for i, group in enumerate(groups):
            cache = page_cache_before(opts, prepared[group.target], progress)
            progress.group_started(i, len(groups), group)
            result: GroupResult = run_group(group, progress.worker_event)
            for row in result.rows:
                row.page_cache, row.weights_resident_bytes = cache.state, cache.resident_bytes
            rows.extend(result.rows)
            system[group_key(group)] = (result.system_delta_bytes, result.system_noise_bytes)
            progress.group_finished(i, len(groups), group, result)
            write_outputs(out, rows, system, meta("running"))
        status = "complete"
    except KeyboardInterrupt:
        status = "interrupted"
    except RunFailed as err:
        err.out = out
        raise
    except SpawnError as err:
        failure = str(err)
    except (OSError, MemoryError) as err:
        failure = describe(err, "running the groups")
    if failure:
        status = f"failed: {failure}"
    try:
        summary = write_outputs(out, rows, system, meta(status))
    except RunFailed as err:
        err.out = out
        raise
    if failure:
        raise RunFailed(failure, out)
    failed = any(s.failed_workers for s in summary)
    code = 130 if status == "interrupted" else (1 if failed else 0)
    return RunOutcome(out, rows, summary, code, status, folder)
