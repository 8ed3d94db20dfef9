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
import shlex
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.core.errors import InputError
from harness.core.files import check_creatable, write_json_atomic
from harness.core.rundata import METADATA_JSON
from harness.core.schema import FORMAT_VERSION, MODES, ResultRow, SummaryRow
from harness.core.summary import group_key, summarize
from harness.core.tables import write_run_tables
from harness.runner.group import GroupResult, GroupSpec, run_group
from harness.targets import get_target
from harness.targets.base import Prepared, Target

#: Memory a worker needs beyond the weights (Python, numpy, ORT, arenas): measured ~60-120 MiB
#: here; 200 MiB keeps the refusal conservative.
WORKER_OVERHEAD_BYTES = 200 * 1024**2
#: Share of the available memory a run may plan to use before it is refused.
MEMORY_BUDGET_SHARE = 0.85


@dataclass
class RunOptions:
    target: str = "cpu"
    target_options: dict[str, Any] = field(default_factory=dict)  # the target's own options, generic
    peer: str | None = None  # a second target measured in mapped mode beside it (e.g. ort-native)
    model: Path | None = None
    model_size: int = 256 * 1024**2
    shapes: dict[str, list[int]] = field(default_factory=dict)
    processes: list[int] = field(default_factory=lambda: [4])
    sessions_per_process: int = 1
    modes: list[str] = field(default_factory=lambda: list(MODES))
    repeat: int = 1
    worker_timeout_s: float = 300.0
    out: Path | None = None
    cache_dir: Path | None = None
    gates: list[str] = field(default_factory=list)  # user gate expressions (validated before any work)
    default_gates: bool = True
    labels: dict[str, str] = field(default_factory=dict)  # KEY=VALUE tags (device kind...) for history
    fault_actions: dict[int, str] = field(default_factory=dict)
    command: str = ""
    project_to: tuple[int, int] | None = None  # (sessions, weights bytes) the report projects to

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


def command_line(argv: list[str]) -> str:
    """How this run was started, for the report header (shell-quoted)."""
    return shlex.join(["python", "-m", "harness", *argv])


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
    if opts.model is not None:
        try:
            return opts.model.stat().st_size
        except OSError:
            return 0  # preparation reports the missing file
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
    with open(path, "rb", buffering=0) as f:
        while f.read(16 * 1024**2):
            pass


def make_out_dir(out: Path) -> None:
    """Create the output folder; InputError (not a traceback) when the OS refuses."""
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise InputError(f"--out {out}: cannot create the folder ({err.strerror or err})") from None


def default_out_dir(prefix: str = "run") -> Path:
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    return Path("results") / f"{prefix}-{stamp}"


def check_options(opts: RunOptions) -> None:
    """Everything that can be refused before work starts (target-independent rules first)."""
    if opts.shapes and opts.model is None:
        raise InputError("--shape fixes inputs of --model; the generated model has static shapes")
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
                groups.append(GroupSpec(
                    target=target_name, mode=mode, processes=n,
                    sessions_per_process=opts.sessions_per_process, repeat=repeat,
                    model_folder=ready.model.folder.resolve(),
                    workdir=(out / "workers" / f"{target_name}-{mode}-n{n}-r{repeat}").resolve(),
                    worker_timeout_s=opts.worker_timeout_s, weights_bytes=ready.weights_bytes,
                    options={**opts.options_of(target), **ready.worker_options},
                    parent_pid=parent[0], parent_create_time=parent[1],
                    fault_actions=opts.fault_actions if target_name == opts.target else {},
                ))
    return groups


def _metadata(opts: RunOptions, prepared: dict[str, Prepared], started: str, status: str, t0: float,
              env: dict) -> dict:
    target = get_target(opts.target)
    own = prepared.get(opts.target)
    default_gates = target.default_gates(opts) if opts.default_gates else []
    return {
        "format_version": FORMAT_VERSION,
        "status": status,
        "run": {
            "run_id": None,  # filled in by execute: the folder name
            "target": opts.target, "target_options": opts.options_of(target), "peer": opts.peer,
            "model": own.source if own else (str(opts.model) if opts.model else "generated"),
            "weights_bytes": own.weights_bytes if own else None,
            "processes": opts.processes, "sessions_per_process": opts.sessions_per_process,
            "modes": opts.modes, "repeat": opts.repeat, "labels": opts.labels, "started": started,
            "finished": dt.datetime.now().astimezone().isoformat(timespec="seconds"),
            "duration_s": round(time.monotonic() - t0, 3), "command": opts.command,
            "project_to": ({"sessions": opts.project_to[0], "weights_bytes": opts.project_to[1]}
                           if opts.project_to else None),
        },
        "gates": list(opts.gates),
        "default_gates": [{"expr": expr, "why": why} for expr, why in default_gates],
        "target_notes": target.notes(opts),
        "env": env,
    }


def write_outputs(out: Path, rows: list[ResultRow], deltas: dict, meta: dict) -> list[SummaryRow]:
    summary = summarize(rows, deltas)
    write_run_tables(out, rows, summary, run_id=out.name)
    meta["run"]["run_id"] = out.name
    write_json_atomic(out / METADATA_JSON, meta)
    return summary


def prepare_all(opts: RunOptions, progress) -> dict[str, Prepared]:
    """The run's target (and peer) prepared: models built or taken from the cache."""
    prepared = {}
    for name in [opts.target, *([opts.peer] if opts.peer else [])]:
        with progress.stage(f"preparing the {name} model (built once, then cached)"):
            prepared[name] = get_target(name).prepare(opts, progress)
        progress.note(f"model: {prepared[name].source}, {prepared[name].weights_bytes} bytes of weights")
    return prepared


def execute(opts: RunOptions, progress) -> RunOutcome:
    """Run every group; on Ctrl-C, write what was measured and mark the run interrupted."""
    from harness.runner.memory import system_available_bytes
    from harness.runner.metadata import environment
    from harness.runner.spawn import harness_identity

    check_options(opts)
    check_memory_budget(opts, expected_weights_bytes(opts), system_available_bytes())
    out = opts.out or default_out_dir()
    check_creatable(out, "--out", folder=True)
    prepared = prepare_all(opts, progress)
    check_memory_budget(opts, prepared[opts.target].weights_bytes, system_available_bytes())
    make_out_dir(out)
    started = dt.datetime.now().astimezone().isoformat(timespec="seconds")
    t0 = time.monotonic()
    for path in dict.fromkeys(p for ready in prepared.values() for p in ready.warm_files):
        warm_page_cache(path)
    groups = plan_groups(opts, prepared, out, harness_identity())
    env = environment()
    rows: list[ResultRow] = []
    deltas: dict[tuple, int | None] = {}
    status = "running"
    write_outputs(out, rows, deltas, _metadata(opts, prepared, started, status, t0, env))
    try:
        for i, group in enumerate(groups):
            progress.group_started(i, len(groups), group)
            result: GroupResult = run_group(group, progress.worker_event)
            rows.extend(result.rows)
            deltas[group_key(group)] = result.system_delta_bytes
            progress.group_finished(i, len(groups), group, result)
            write_outputs(out, rows, deltas, _metadata(opts, prepared, started, status, t0, env))
        status = "complete"
    except KeyboardInterrupt:
        status = "interrupted"
    summary = write_outputs(out, rows, deltas, _metadata(opts, prepared, started, status, t0, env))
    failed = any(s.failed_workers for s in summary)
    code = 130 if status == "interrupted" else (1 if failed else 0)
    return RunOutcome(out, rows, summary, code, status)

