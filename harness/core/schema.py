"""The one schema for result rows and summary rows: workers, CSV, HTML and tests all use it.

Data flows one way: spec -> workers -> `ResultRow` -> `SummaryRow` -> report. Columns are
declared once here, with their dtype and unit, and the CSV writers/readers, docs/results.md's
column table and the report's tables are all derived from these declarations.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field, fields
from typing import Any

#: Bumped whenever a column changes meaning or is removed (adding one is compatible).
FORMAT_VERSION = 1

MODES = ("mapped", "heap")
#: How the QNN EP treated file mapping in a session, from its own log (qnn target; see
#: harness/targets/qnn/eplog.py for the evidence each needs). Other targets record "n/a".
EP_STATES = (
    "active",
    "retried",
    "mixed",
    "disabled",
    "ep-disabled",
    "unavailable",
    "option-ignored",
    "ep-error",
    "unknown",
)
#: The only EP state a summary or gate may count as "weights came from the mapping".
MAPPED_STATES = ("active",)
#: The value of the provider option ``disable_file_mapped_weights`` each mode passes.
_DISABLE_FLAG = {"mapped": "0", "heap": "1"}


def disable_flag(mode: str) -> str:
    """``disable_file_mapped_weights`` for a mode: "0" (mapped) or "1" (heap); KeyError otherwise."""
    return _DISABLE_FLAG[mode]


def col(dtype: str, unit: str, doc: str, default: Any = None, *, required: bool = True) -> Any:
    """Declare a column: pandas dtype name, unit and meaning travel with the field.

    ``required``: every table of this format version has it, so a file without it is not one
    of ours. Columns added later are not required (older files lack them: compatible)."""
    return field(default=default, metadata={"dtype": dtype, "unit": unit, "doc": doc, "required": required})


@dataclass
class ResultRow:
    """One worker process, one mode, one repeat."""

    target: str = col("string", "", "cpu | ort-native | qnn")
    mode: str = col("string", "", "mapped (disable_file_mapped_weights=0) or heap (=1)")
    disable_file_mapped_weights: str = col("string", "", 'provider option value passed: "0" or "1"')
    processes: int = col("Int64", "count", "worker processes alive together (N)")
    sessions_per_process: int = col("Int64", "count", "ORT sessions in each worker (M)")
    repeat: int = col("Int64", "index", "repeat number, from 0")
    worker: int = col("Int64", "index", "worker number within the run, from 0")
    pid: int = col("Int64", "", "worker process id")
    path_taken: str = col(
        "string",
        "",
        "mapped | heap | fallback | unknown (how the weights were loaded; unknown: the EP log gave no evidence)",
    )
    map_attempts: int = col(
        "Int64", "count", "the most mapping attempts one session's load needed (mapper_impl; 1: the first try mapped)"
    )
    fallback_stage: str = col(
        "string",
        "",
        "the pipeline stage whose failure sent the weights to the direct read: "
        "map | register | create (empty when none)",
        required=False,
    )
    ep_file_mapping: str = col(
        "string",
        "",
        "worst EP verdict over the worker's sessions: active | retried | mixed | "
        "disabled | ep-disabled | unavailable | option-ignored | ep-error | unknown; n/a off the qnn target",
    )
    init_s: float = col("Float64", "s", "load_s + create_s: time until the sessions exist")
    load_s: float = col("Float64", "s", "time to load (map or read) the weights")
    create_s: float = col("Float64", "s", "time to create the M InferenceSessions")
    first_run_s: float = col("Float64", "s", "first inference of the first session (of each model of a pipeline)")
    runs: int = col("Int64", "count", "timed inferences after the first (--runs R; 0 without)")
    latency_p50_s: float = col("Float64", "s", "median latency of those R inferences (empty without --runs)")
    latency_p90_s: float = col("Float64", "s", "90th percentile latency of the R inferences")
    latency_p99_s: float = col("Float64", "s", "99th percentile latency of the R inferences")
    warmup: int = col("Int64", "count", "untimed inferences before the timed ones (--warmup K)", required=False)
    concurrency: int = col(
        "Int64",
        "count",
        "inference threads running the timed inferences on one session (--concurrency C)",
        required=False,
    )
    latency_mean_s: float = col("Float64", "s", "mean latency of the R timed inferences", required=False)
    latency_stdev_s: float = col("Float64", "s", "sample standard deviation of the R latencies", required=False)
    latency_min_s: float = col("Float64", "s", "fastest of the R inferences", required=False)
    latency_p95_s: float = col("Float64", "s", "95th percentile latency of the R inferences", required=False)
    latency_max_s: float = col("Float64", "s", "slowest of the R inferences", required=False)
    inferences_per_s: float = col(
        "Float64", "count/s", "R over the wall time of the timed phase (C threads: their combined rate)", required=False
    )
    page_cache: str = col("string", "", "warm | cold | cold-unverified: page-cache state of the weights at group start")
    weights_resident_bytes: int = col("Int64", "bytes", "weights bytes in the page cache as the group started (Linux)")
    rss_bytes: int = col("Int64", "bytes", "resident set / working set (counts shared pages)")
    uss_bytes: int = col("Int64", "bytes", "unique set size: pages only this process has")
    pss_bytes: int = col("Int64", "bytes", "proportional set size (Linux only; empty elsewhere)")
    private_bytes: int = col("Int64", "bytes", "Windows private bytes; USS on Linux")
    peak_bytes: int = col("Int64", "bytes", "peak resident / peak working set of the worker")
    peak_private_bytes: int = col(
        "Int64",
        "bytes",
        "highest private memory (Linux: anonymous pages of /proc/<pid>/statm; Windows: PrivateUsage, "
        "raised to PeakPagefileUsage) from the worker's start to ready, sampled by the parent at 1 kHz or "
        "faster and by the worker at each phase change",
        required=False,
    )
    peak_phase: str = col(
        "string", "", "start-up phase of that peak: start | load | create | first_run", required=False
    )
    peak_shared_bytes: int = col(
        "Int64",
        "bytes",
        "shared / file-backed resident bytes in the sample where the private figure peaked (Linux: statm "
        "shared; Windows: working set - private working set): a fallback holding the mapping and the copy "
        "shows both in one sample",
        required=False,
    )
    peak_rss_bytes: int = col(
        "Int64",
        "bytes",
        "kernel-kept peak resident set until ready (Linux VmHWM; Windows PeakWorkingSetSize): counts file pages",
        required=False,
    )
    peak_sample_hz: float = col(
        "Float64",
        "count/s",
        "samples per second the parent's peak watch achieved for this worker (1000 or more wanted; below, "
        "or empty: not watched, the run's notes say so)",
        required=False,
    )
    peak_sample_max_gap_s: float = col(
        "Float64",
        "s",
        "longest time between two of the parent's peak samples: a shorter transient can be missed",
        required=False,
    )
    weights_bytes: int = col("Int64", "bytes", "size of the weights file the sessions use")
    output_ok: bool = col("boolean", "", "first inference matched the reference output")
    error: str = col("string", "", "why the worker failed or fell back (empty when clean)")
    memory_note: str = col("string", "", "why a memory figure is empty (e.g. AccessDenied) or implausible")
    exit_code: int = col("Int64", "", "worker exit code (negative: killed by that signal)")
    map_errors: str = col("string", "", "mapping errors before a retry or fallback, '; '-joined")
    ep_log_tail: str = col("string", "", "last EP log lines about file mapping (qnn)")
    ep_sessions: str = col(
        "string",
        "",
        "EP verdict per state over the worker's M sessions, e.g. 'active=3 retried=1' (qnn)",
        required=False,
    )
    ep_reason: str = col(
        "string",
        "",
        "why the EP did not map: e.g. 'embedded context', 'RPCMem unavailable', the retry error (qnn)",
        required=False,
    )
    ep_nodes: str = col(
        "string",
        "",
        "EPContext nodes over the worker's sessions whose context bin was mapped and that the EP "
        "disabled mapping for, e.g. 'mapped=1 disabled=1' (a mixed session) (qnn)",
        required=False,
    )
    memory_ok: bool = col(
        "boolean",
        "",
        "sampled at the barrier with figures physics allows for its mode "
        "(why not: memory_note; empty: written by an older harness, not checked)",
        required=False,
    )
    # -- what the memory is made of (issue 18): measured against the group's control worker --
    mapped_resident_bytes: int = col(
        "Int64",
        "bytes",
        "pages of the weights files resident in this worker, from its memory maps (read by the parent at the barrier)",
        required=False,
    )
    copied_bytes: int = col(
        "Int64",
        "bytes",
        "private memory attributable to weight copies: USS / private bytes minus the control's (runtime_bytes), "
        "minus weights-file pages only this worker maps (empty: no control, or out of physical range)",
        required=False,
    )
    runtime_bytes: int = col(
        "Int64",
        "bytes",
        "USS / private bytes of the group's control worker: same runtime, sessions and inputs, no weights",
        required=False,
    )
    # -- how busy the machine was while the timings were taken --
    cpu_s: float = col("Float64", "s", "CPU time of the worker's measured work (all threads)", required=False)
    busy_s: float = col(
        "Float64", "s", "wall time of the same work: cpu_s / busy_s < 0.5 is contention", required=False
    )
    load_avg: float = col(
        "Float64", "", "1-minute load average at the barrier (empty where the OS has none)", required=False
    )
    cpu_count: int = col("Int64", "count", "CPUs this harness may run on", required=False)
    steal_s: float = col(
        "Float64", "s", "CPU time stolen by the hypervisor over the group, whole machine (Linux)", required=False
    )


@dataclass
class SummaryRow:
    """One target x mode x processes (x repeat) group of `ResultRow`s."""

    target: str = col("string", "", "cpu | ort-native | qnn")
    mode: str = col("string", "", "mapped | heap")
    processes: int = col("Int64", "count", "worker processes (N)")
    sessions_per_process: int = col("Int64", "count", "sessions per worker (M)")
    repeat: int = col("Int64", "index", "repeat number")
    init_s_median: float = col("Float64", "s", "median init_s over workers")
    create_s_median: float = col("Float64", "s", "median create_s over workers")
    first_run_s_median: float = col("Float64", "s", "median first_run_s over workers")
    startup_s_median: float = col("Float64", "s", "median init_s + first_run_s over workers: time to a first result")
    latency_p50_s_median: float = col("Float64", "s", "median over workers of latency_p50_s")
    latency_p90_s_median: float = col("Float64", "s", "median over workers of latency_p90_s")
    latency_p99_s_median: float = col("Float64", "s", "median over workers of latency_p99_s")
    latency_mean_s: float = col("Float64", "s", "mean latency over every timed inference of the group", required=False)
    latency_stdev_s: float = col(
        "Float64", "s", "standard deviation over every timed inference of the group (pooled)", required=False
    )
    latency_min_s: float = col("Float64", "s", "fastest timed inference of the group", required=False)
    latency_p95_s_median: float = col("Float64", "s", "median over workers of latency_p95_s", required=False)
    latency_max_s: float = col("Float64", "s", "slowest timed inference of the group", required=False)
    inferences_per_s: float = col("Float64", "count/s", "median over workers of inferences_per_s", required=False)
    max_peak_private_bytes: int = col(
        "Int64",
        "bytes",
        "highest peak_private_bytes of the group's ok workers (one worker's start-up peak)",
        required=False,
    )
    sum_peak_private_bytes: int = col(
        "Int64",
        "bytes",
        "sum of the ok workers' peak_private_bytes: the group's peak if every worker peaked at once",
        required=False,
    )
    peak_phase: str = col("string", "", "phase(s) of the workers' peaks, '|'-joined", required=False)
    system_min_available_bytes: int = col(
        "Int64", "bytes", "lowest system available memory while the workers started", required=False
    )
    system_max_committed_bytes: int = col(
        "Int64", "bytes", "highest commit charge while the workers started (Linux Committed_AS)", required=False
    )
    system_commit_limit_bytes: int = col(
        "Int64", "bytes", "the system's commit limit (Linux CommitLimit, Windows GetPerformanceInfo)", required=False
    )
    system_start_available_bytes: int = col(
        "Int64", "bytes", "system available memory as the group started, before its first worker", required=False
    )
    system_start_committed_bytes: int = col(
        "Int64", "bytes", "commit charge as the group started, before its first worker", required=False
    )
    overcommit_mode: int = col(
        "Int64", "", "Linux vm.overcommit_memory (only 2 enforces the commit limit); empty elsewhere", required=False
    )
    page_cache: str = col("string", "", "warm | cold | cold-unverified (see results.csv)")
    sum_rss_bytes: int = col(
        "Int64", "bytes", "sum of rss_bytes over the N workers (double-counts shared pages); empty unless complete"
    )
    sum_uss_bytes: int = col("Int64", "bytes", "sum of uss_bytes over the N workers; empty unless complete")
    sum_pss_bytes: int = col("Int64", "bytes", "sum of pss_bytes over the N workers (Linux); empty unless complete")
    sum_private_bytes: int = col("Int64", "bytes", "sum of private_bytes over the N workers; empty unless complete")
    system_delta_bytes: int = col(
        "Int64", "bytes", "drop in system available memory while all were alive (see system_noise_bytes)"
    )
    weights_bytes: int = col("Int64", "bytes", "weights file size")
    ok_workers: int = col("Int64", "count", "workers that finished with a correct output")
    failed_workers: int = col("Int64", "count", "workers that crashed, hung, raised or were wrong")
    fallback_workers: int = col("Int64", "count", "workers whose weights fell back to the heap")
    ep_file_mapping: str = col("string", "", "EP path(s) seen, '|'-joined")
    unknown_sessions: int = col(
        "Int64", "count", "sessions whose EP log gave no file-mapping evidence (qnn; empty elsewhere)", required=False
    )
    retried_sessions: int = col(
        "Int64", "count", "sessions where the EP retried with a direct read (qnn; empty elsewhere)", required=False
    )
    complete: bool = col(
        "boolean",
        "",
        "all N workers reached the barrier and were sampled with plausible "
        "figures: only complete groups have sums and enter ratios and gates",
        required=False,
    )
    system_noise_bytes: int = col(
        "Int64",
        "bytes",
        "change of the idle system available memory from before to "
        "after the group: the noise floor of system_delta_bytes",
        required=False,
    )
    note: str = col(
        "string", "", "why the group is not complete, or why its system delta is unreliable", required=False
    )
    copied_bytes_median: int = col(
        "Int64", "bytes", "median copied_bytes over the ok workers (weight copies per worker)", required=False
    )
    mapped_resident_bytes_median: int = col(
        "Int64", "bytes", "median mapped_resident_bytes over the ok workers", required=False
    )
    runtime_bytes: int = col("Int64", "bytes", "the group's control worker's USS / private bytes", required=False)
    load_avg: float = col("Float64", "", "highest load_avg of the group's workers", required=False)
    cpu_share_min: float = col("Float64", "", "lowest cpu_s / busy_s of the group's ok workers", required=False)
    contended: bool = col(
        "boolean",
        "",
        "timings taken on a contended machine: load_avg above cpu_count, or a worker's CPU share below 0.5",
        required=False,
    )


def columns(row_type: type) -> list[str]:
    """CSV column order of a row type."""
    return [f.name for f in fields(row_type)]


def dtypes(row_type: type) -> dict[str, str]:
    """pandas dtypes to read a CSV of ``row_type`` with (``pd.read_csv(dtype=...)``)."""
    return {f.name: f.metadata["dtype"] for f in fields(row_type)}


def column_docs(row_type: type) -> list[tuple[str, str, str, str]]:
    """(name, dtype, unit, meaning) for docs/results.md and the report."""
    return [(f.name, f.metadata["dtype"], f.metadata["unit"], f.metadata["doc"]) for f in fields(row_type)]


def required_columns(row_type: type) -> list[str]:
    """Columns every table of ``row_type`` in this format version has (see `col`)."""
    return [f.name for f in fields(row_type) if f.metadata.get("required", True)]


def row_from_dict(row_type: type, data: dict) -> Any:
    """Build a row from a dict, ignoring unknown keys (newer writers) and keeping defaults."""
    names = _column_meta(row_type).keys()
    return row_type(**{k: v for k, v in data.items() if k in names})


# --- what a cell may hold: every reader of a run folder checks each value against these ---

#: The largest byte figure any cell may hold: 1 PiB (2**50). No machine this harness measures
#: has that much memory or disk, so a larger figure is corruption or forgery, not a measurement.
MAX_BYTES = 2**50
#: The longest time a cell may hold: one week. A worker is killed long before (--worker-timeout
#: is bounded), so a longer time is no measurement.
MAX_SECONDS = 7 * 24 * 3600.0
#: The largest count or index a cell may hold (processes, sessions, repeats, runs, pids).
MAX_COUNT = 2**31
#: Columns whose figures may be negative: a change of available memory, a signal's exit code.
SIGNED_COLUMNS = frozenset({"system_delta_bytes", "system_noise_bytes", "exit_code"})
#: Columns that must be at least 1 (a group of zero processes measures nothing).
AT_LEAST_ONE = frozenset({"processes", "sessions_per_process"})
#: Text columns with a closed set of values ('|'-joined in a summary row).
CHOICES: dict[str, tuple[str, ...]] = {
    "mode": MODES,
    "disable_file_mapped_weights": tuple(_DISABLE_FLAG.values()),
    "path_taken": ("mapped", "heap", "fallback", "unknown"),
    "page_cache": ("warm", "cold", "cold-unverified"),
    "ep_file_mapping": (*EP_STATES, "n/a"),
    "peak_phase": ("start", "load", "create", "first_run"),
}


def _number_problem(name: str, unit: str, value: float | int) -> str | None:
    """Why a numeric value cannot be a figure of its column (None: it can)."""
    import math

    if isinstance(value, float) and not math.isfinite(value):
        return f"{value!r} is not a finite number"
    low = -MAX_BYTES if name in SIGNED_COLUMNS and unit == "bytes" else 0
    if name == "exit_code":
        low = -255
    if name in AT_LEAST_ONE:
        low = 1
    high = {"bytes": MAX_BYTES, "s": MAX_SECONDS}.get(unit, MAX_COUNT)
    if name == "exit_code":
        high = 255
    if not low <= value < high:
        return f"{value!r} is outside {low}..{high:g}"
    return None


@functools.cache
def _column_meta(row_type: type) -> dict[str, Any]:
    """name -> metadata of every column of ``row_type``, built once (`cell_problem` runs per
    cell: rebuilding it each time made a 100 000-row results.csv take minutes to read)."""
    return {f.name: f.metadata for f in fields(row_type)}


def cell_problem(row_type: type, name: str, value: Any) -> str | None:
    """Why ``value`` cannot be the ``name`` cell of a ``row_type`` row (None: it can): the
    one range and choice check every reader of a run folder applies (empty is always fine)."""
    meta = _column_meta(row_type).get(name)
    if meta is None or value is None:
        return None
    if meta["dtype"] in ("Int64", "Float64"):
        return _number_problem(name, meta["unit"], value)
    allowed = CHOICES.get(name)
    if allowed is not None and meta["dtype"] == "string":
        parts = str(value).split("|") if row_type is SummaryRow else [str(value)]
        bad = [p for p in parts if p not in allowed]
        if bad:
            return f"a {len(bad[0])}-character value that is not one of {', '.join(allowed)}"
    return None
