"""`harness run`: plan the groups, run them, write results, summary, metadata and report.

Data flows one way: options -> prepared model -> groups of workers -> `ResultRow`s ->
`SummaryRow`s -> CSV / stdout table / HTML report. results.csv and summary.csv are
rewritten (atomically) after every group, and metadata.json says whether the run is
"running", "complete" or "interrupted", so a partial run never looks complete.
"""

from __future__ import annotations

import datetime as dt
import json
import shlex
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from harness.core.errors import InputError
from harness.core.schema import FORMAT_VERSION, ResultRow, SummaryRow
from harness.core.summary import summarize
from harness.models import PreparedModel
from harness.runner.group import GroupResult, GroupSpec, run_group
from harness.runner.spec import write_json_atomic

#: Memory a worker needs beyond the weights (Python, numpy, ORT, arenas): measured ~60-120 MiB
#: here; 200 MiB keeps the refusal conservative.
WORKER_OVERHEAD_BYTES = 200 * 1024**2
#: Share of the available memory a run may plan to use before it is refused.
MEMORY_BUDGET_SHARE = 0.85


@dataclass
class RunOptions:
    target: str = "cpu"
    model: Path | None = None
    model_size: int = 256 * 1024**2
    shapes: dict[str, list[int]] = field(default_factory=dict)
    processes: list[int] = field(default_factory=lambda: [4])
    sessions_per_process: int = 1
    modes: list[str] = field(default_factory=lambda: ["mapped", "heap"])
    repeat: int = 1
    map_failures: int = 0
    max_attempts: int = 3
    worker_timeout_s: float = 300.0
    out: Path | None = None
    embed_mode: int = 0
    share_ep_contexts: bool = False
    cache_dir: Path | None = None
    gates: list[str] = field(default_factory=list)
    gates_file: Path | None = None
    default_gates: bool = True
    history: Path | None = None
    report: bool = True
    fault_actions: dict[int, str] = field(default_factory=dict)
    command: str = ""


@dataclass
class RunOutcome:
    out: Path
    rows: list[ResultRow]
    summary: list[SummaryRow]
    exit_code: int
    notes: list[str]


def prepare_model(opts: RunOptions) -> tuple[PreparedModel, str, int]:
    """The model folder workers load, for qnn the compiled EPContext model path, and the
    bytes the sessions load (weights file, or QNN context binary)."""
    from harness import models

    if opts.target == "qnn":
        from harness.targets.qnn.compile import prepare_qnn_model

        return prepare_qnn_model(opts)
    if opts.model is not None:
        model = models.prepare_user_model(opts.model, opts.shapes, cache_dir=opts.cache_dir)
    else:
        model = models.generated_matmul_chain(opts.model_size, cache_dir=opts.cache_dir)
    return model, "", model.weights_bytes


def estimated_peak_bytes(opts: RunOptions, weights_bytes: int) -> int:
    """Memory the largest group needs: heap copies every session's weights, mapping once."""
    n = max(opts.processes)
    sessions = n * opts.sessions_per_process
    heap_like = "heap" in opts.modes or opts.map_failures >= opts.max_attempts
    weights = sessions * weights_bytes if heap_like else weights_bytes
    return weights + n * WORKER_OVERHEAD_BYTES


def expected_weights_bytes(opts: RunOptions) -> int:
    """Weights size known before any model is built or read: a run that cannot fit is
    refused before it spends minutes generating a model."""
    if opts.model is not None:
        try:
            return opts.model.stat().st_size
        except OSError:
            return 0  # prepare_model reports the missing file
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
    """Read the weights once so both modes start from a warm page cache: init times then
    compare mapping with copying, not a cold disk with a warm one."""
    with open(path, "rb", buffering=0) as f:
        while f.read(16 * 1024**2):
            pass


def check_creatable(path: Path, option: str, *, folder: bool) -> None:
    """Refuse, before anything is built or measured, a path the run could never write: a
    file on its way, or (``folder``) a file where the folder should be, or (not ``folder``)
    a folder where the file should be. Creates nothing."""
    if path.exists() and path.is_dir() != folder:
        found, wanted = ("file", "folder") if folder else ("folder", "file")
        raise InputError(f"{option} {path}: is a {found}, not a {wanted}")
    for parent in path.parents:
        if parent.exists():
            if not parent.is_dir():
                raise InputError(f"{option} {path}: {parent} is a file, not a folder")
            return


def make_out_dir(out: Path) -> None:
    """Create the output folder; InputError (not a traceback) when the OS refuses."""
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise InputError(f"--out {out}: cannot create the folder ({err.strerror or err})") from None


def default_out_dir() -> Path:
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    return Path("results") / f"run-{stamp}"


def plan_groups(opts: RunOptions, model: PreparedModel, qnn_onnx: str, weights_bytes: int,
                out: Path) -> list[GroupSpec]:
    groups = []
    for repeat in range(opts.repeat):
        for n in opts.processes:
            for mode in opts.modes:
                groups.append(GroupSpec(
                    target=opts.target, mode=mode, processes=n,
                    sessions_per_process=opts.sessions_per_process, repeat=repeat,
                    model_folder=model.folder.resolve(),
                    workdir=(out / "workers" / f"{opts.target}-{mode}-n{n}-r{repeat}").resolve(),
                    worker_timeout_s=opts.worker_timeout_s, map_failures=opts.map_failures,
                    max_attempts=opts.max_attempts, share_ep_contexts=opts.share_ep_contexts,
                    qnn_onnx=qnn_onnx, weights_bytes=weights_bytes, fault_actions=opts.fault_actions,
                ))
    return groups


def run_notes(opts: RunOptions, rows: list[ResultRow]) -> list[str]:
    """Plain-language notes that travel with the results (and lead the report)."""
    notes = []
    if any(r.ep_file_mapping == "unavailable" for r in rows):
        notes.append("The QNN EP's file-mapped weights feature is unavailable on this platform "
                     "(it needs Windows on ARM64): mapped and heap runs both took the heap path, "
                     "so no difference between them is expected here.")
    if sys.platform.startswith("linux") and 1 in opts.processes:
        notes.append("With N=1 a mapped file's pages are private to the one process, so USS counts "
                     "them; sharing shows from N=2 on.")
    fallbacks = [r for r in rows if r.path_taken == "fallback"]
    if fallbacks:
        notes.append(f"{len(fallbacks)} worker(s) fell back to the heap after mapping failed.")
    return notes


def _metadata(opts: RunOptions, model: PreparedModel, weights_bytes: int, started: str, status: str, t0: float,
              notes: list[str], env: dict) -> dict:
    return {
        "format_version": FORMAT_VERSION,
        "status": status,
        "run": {
            "target": opts.target, "model": model.source, "weights_bytes": weights_bytes,
            "processes": opts.processes, "sessions_per_process": opts.sessions_per_process,
            "modes": opts.modes, "repeat": opts.repeat, "map_failures": opts.map_failures,
            "max_attempts": opts.max_attempts, "embed_mode": opts.embed_mode,
            "share_ep_contexts": opts.share_ep_contexts, "started": started,
            "finished": dt.datetime.now().astimezone().isoformat(timespec="seconds"),
            "duration_s": round(time.monotonic() - t0, 3), "command": opts.command,
        },
        "env": env,
        "notes": notes,
    }


def write_outputs(out: Path, rows: list[ResultRow], deltas: dict, meta: dict) -> list[SummaryRow]:
    from harness.core.tables import write_run_tables

    summary = summarize(rows, deltas)
    write_run_tables(out, rows, summary, run_id=out.name)
    write_json_atomic(out / "metadata.json", meta)
    return summary


def execute(opts: RunOptions, progress) -> RunOutcome:
    """Run every group; on Ctrl-C, write what was measured and mark the run interrupted."""
    from harness.core.metadata import environment
    from harness.runner.memory import system_available_bytes

    check_memory_budget(opts, expected_weights_bytes(opts), system_available_bytes())
    out = opts.out or default_out_dir()
    check_creatable(out, "--out", folder=True)
    if opts.history is not None:
        check_creatable(opts.history, "--history", folder=False)
    progress.note(f"preparing the {opts.target} model (built once, then cached)...")
    model, qnn_onnx, weights_bytes = prepare_model(opts)
    progress.note(f"model: {model.source}, {weights_bytes} bytes of weights")
    check_memory_budget(opts, weights_bytes, system_available_bytes())
    make_out_dir(out)
    started = dt.datetime.now().astimezone().isoformat(timespec="seconds")
    t0 = time.monotonic()
    if opts.target == "qnn":
        for path in (Path(qnn_onnx), *Path(qnn_onnx).parent.glob("*.bin")):
            warm_page_cache(path)
    else:
        warm_page_cache(model.weights_path)
    groups = plan_groups(opts, model, qnn_onnx, weights_bytes, out)
    env = environment()
    rows: list[ResultRow] = []
    deltas: dict[tuple, int | None] = {}
    status = "running"
    write_outputs(out, rows, deltas, _metadata(opts, model, weights_bytes, started, status, t0, [], env))
    try:
        for i, group in enumerate(groups):
            progress.group_started(i, len(groups), group)
            result: GroupResult = run_group(group)
            rows.extend(result.rows)
            deltas[(group.target, group.mode, group.processes, group.sessions_per_process,
                    group.repeat)] = result.system_delta_bytes
            progress.group_finished(i, len(groups), group, result)
            write_outputs(out, rows, deltas, _metadata(opts, model, weights_bytes, started, status, t0, [], env))
        status = "complete"
    except KeyboardInterrupt:
        status = "interrupted"
    notes = run_notes(opts, rows)
    summary = write_outputs(out, rows, deltas, _metadata(opts, model, weights_bytes, started, status, t0, notes, env))
    failed = any(s.failed_workers for s in summary)
    code = 130 if status == "interrupted" else (1 if failed else 0)
    return RunOutcome(out, rows, summary, code, notes)


def command_line(argv: list[str]) -> str:
    return " ".join(shlex.quote(a) for a in ["python", "-m", "harness", *argv])


def load_metadata(out: Path) -> dict:
    return json.loads((out / "metadata.json").read_text())
