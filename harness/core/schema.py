"""The one schema for result rows and summary rows: workers, CSV, HTML and tests all use it.

Data flows one way: spec -> workers -> `ResultRow` -> `SummaryRow` -> report. Columns are
declared once here, with their dtype and unit, and the CSV writers/readers, docs/results.md's
column table and the report's tables are all derived from these declarations.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field, fields
from typing import Any

from .vocab import (  # noqa: F401  (EP_STATES, MAPPED_STATES, MODES, disable_flag: their long-standing home)
    DISABLE_FLAGS,
    EP_STATES,
    MAPPED_STATES,
    MODES,
    EpState,
    Mode,
    PageCache,
    PathTaken,
    PeakPhase,
    Start,
    disable_flag,
)

#: The format version of the run folders this harness writes (metadata.json's
#: ``format_version``): bumped with each change of a file's shape (a column added, removed or
#: given another meaning), with the step in `harness.core.migrate` that brings a folder of the
#: version before up to it (docs/results.md, "Format versions").
FORMAT_VERSION = 4
#: The oldest format version this harness reads (and migrates when it loads a run folder).
OLDEST_FORMAT_VERSION = 1


def col(dtype: str, unit: str, doc: str, default: Any = None, *, since: int = 1) -> Any:
    """Declare a column: pandas dtype name, unit and meaning travel with the field.

    ``since``: the first format version whose tables all have the column. A table of an
    older version may lack it: migrating the folder on load adds it empty (not measured). A
    new column is declared ``since=FORMAT_VERSION`` after the bump it comes with."""
    return field(default=default, metadata={"dtype": dtype, "unit": unit, "doc": doc, "since": since})


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
        since=2,
    )
    ep_file_mapping: str = col(
        "string",
        "",
        "worst EP verdict over the worker's sessions: active | retried | mixed | "
        "disabled | ep-disabled | unavailable | option-ignored | ep-error | unknown; n/a off the qnn target; "
        "copied (any target): a mapped-mode worker whose private memory held the weights (copied_bytes), "
        "whatever its log or pipeline said: a silent copy, a failure",
    )
    init_s: float = col("Float64", "s", "load_s + create_s: time until the sessions exist")
    load_s: float = col("Float64", "s", "time to load (map or read) the weights")
    create_s: float = col("Float64", "s", "time to create the M InferenceSessions")
    first_run_s: float = col("Float64", "s", "first inference of the first session (of each model of a pipeline)")
    runs: int = col("Int64", "count", "timed inferences after the first (--runs R; 0 without)")
    latency_p50_s: float = col("Float64", "s", "median latency of those R inferences (empty without --runs)")
    latency_p90_s: float = col("Float64", "s", "90th percentile latency of the R inferences")
    latency_p99_s: float = col("Float64", "s", "99th percentile latency of the R inferences")
    warmup: int = col("Int64", "count", "untimed inferences before the timed ones (--warmup K)", since=2)
    concurrency: int = col(
        "Int64",
        "count",
        "inference threads running the timed inferences on one session (--concurrency C)",
        since=2,
    )
    latency_mean_s: float = col("Float64", "s", "mean latency of the R timed inferences", since=2)
    latency_stdev_s: float = col("Float64", "s", "sample standard deviation of the R latencies", since=2)
    latency_min_s: float = col("Float64", "s", "fastest of the R inferences", since=2)
    latency_p95_s: float = col("Float64", "s", "95th percentile latency of the R inferences", since=2)
    latency_max_s: float = col("Float64", "s", "slowest of the R inferences", since=2)
    inferences_per_s: float = col(
        "Float64", "count/s", "R over the wall time of the timed phase (C threads: their combined rate)", since=2
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
        since=2,
    )
    peak_phase: str = col("string", "", "start-up phase of that peak: start | load | create | first_run", since=2)
    peak_shared_bytes: int = col(
        "Int64",
        "bytes",
        "shared / file-backed resident bytes in the sample where the private figure peaked (Linux: statm "
        "shared; Windows: working set - private working set): a fallback holding the mapping and the copy "
        "shows both in one sample",
        since=2,
    )
    peak_rss_bytes: int = col(
        "Int64",
        "bytes",
        "kernel-kept peak resident set until ready (Linux VmHWM; Windows PeakWorkingSetSize): counts file pages",
        since=2,
    )
    peak_sample_hz: float = col(
        "Float64",
        "count/s",
        "samples per second the parent's peak watch achieved for this worker (1000 or more wanted; below, "
        "or empty: not watched, the run's notes say so)",
        since=2,
    )
    peak_sample_max_gap_s: float = col(
        "Float64",
        "s",
        "longest time between two of the parent's peak samples: a shorter transient can be missed",
        since=2,
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
        since=2,
    )
    ep_reason: str = col(
        "string",
        "",
        "why the EP did not map: e.g. 'embedded context', 'RPCMem unavailable', the retry error (qnn)",
        since=2,
    )
    ep_nodes: str = col(
        "string",
        "",
        "EPContext nodes over the worker's sessions whose context bin was mapped and that the EP "
        "disabled mapping for, e.g. 'mapped=1 disabled=1' (a mixed session) (qnn)",
        since=2,
    )
    memory_ok: bool = col(
        "boolean",
        "",
        "sampled at the barrier with figures physics allows for its mode "
        "(why not: memory_note; empty: written by an older harness, not checked)",
        since=2,
    )
    # -- what the memory is made of (issue 18): measured against the group's control worker --
    mapped_resident_bytes: int = col(
        "Int64",
        "bytes",
        "pages of the weights files resident in this worker, from its memory maps (read by the parent at the barrier)",
        since=2,
    )
    copied_bytes: int = col(
        "Int64",
        "bytes",
        "private memory attributable to weight copies: USS / private bytes minus the control's (runtime_bytes), "
        "minus weights-file pages only this worker maps (empty: no control, or out of physical range)",
        since=2,
    )
    runtime_bytes: int = col(
        "Int64",
        "bytes",
        "USS / private bytes of the group's control worker: same runtime, sessions and inputs, no weights",
        since=2,
    )
    # -- what the EP's faults left (cpu target: mapper_impl's counts) --
    stale_registrations: int = col(
        "Int64",
        "count",
        "failed DMA registrations left behind, never undone (upstream: cc7ec9e qnn_backend_manager.cc 886-893, "
        "onnxruntime-qnn #337's stale FastRPC registration); a worker holding any fails (cpu target)",
        since=3,
    )
    late_releases: int = col(
        "Int64",
        "count",
        "release callbacks of failed attempts that arrived late: during or after the direct read, or at "
        "teardown (onnxruntime-qnn PR #839) (cpu target)",
        since=3,
    )
    # -- how busy the machine was while the timings were taken --
    cpu_s: float = col("Float64", "s", "CPU time of the worker's measured work (all threads)", since=2)
    busy_s: float = col("Float64", "s", "wall time of the same work: cpu_s / busy_s < 0.5 is contention", since=2)
    load_avg: float = col("Float64", "", "1-minute load average at the barrier (empty where the OS has none)", since=2)
    cpu_count: int = col("Int64", "count", "CPUs this harness may run on", since=2)
    steal_s: float = col(
        "Float64", "s", "CPU time stolen by the hypervisor over the group, whole machine (Linux)", since=2
    )
    # -- the timing pass (issue 32) --
    start: str = col(
        "string",
        "",
        "concurrent: the group's N workers started together, memory sampled with all N alive | sequential: "
        "the timing pass, one worker at a time, each alone, no memory sampled (empty: concurrent)",
        since=3,
    )
    foreign_cpus: float = col(
        "Float64",
        "count",
        "sequential pass: CPUs' worth of time other processes used over this worker's life (the whole "
        "machine's busy time minus this worker's and the harness's); above cpu_count - 1 it had no CPU to itself",
        since=3,
    )
    floor_s: float = col(
        "Float64",
        "s",
        "time to map the weights file(s) read-only and touch nothing, in this worker before its load: the "
        "floor under any mapped load",
        since=3,
    )
    # -- the group's memory container (--memory-limit, capacity) --
    memory_limit_bytes: int = col(
        "Int64", "bytes", "the memory limit of the group's container (empty: no --memory-limit)", since=3
    )
    oom_killed: bool = col("boolean", "", "ended by the container's memory limit, by the kernel's own count", since=3)
    container_peak_bytes: int = col(
        "Int64", "bytes", "highest charge of the group's container (Linux: page cache included)", since=3
    )
    # -- the generate workload (--workload generate; empty for infer; docs/llm.md) --
    ttft_s: float = col("Float64", "s", "time to first token: prefill and its token, median over sessions", since=4)
    decode_tokens_per_s: float = col("Float64", "count/s", "tokens after the first over their decode time", since=4)
    token_latency_p50_s: float = col("Float64", "s", "median time of one decode step (one token)", since=4)
    token_latency_p90_s: float = col("Float64", "s", "90th percentile time of one decode step", since=4)
    token_latency_p99_s: float = col("Float64", "s", "99th percentile time of one decode step", since=4)
    kv_cache_bytes: int = col(
        "Int64", "bytes", "KV tensors at the last token, from their shapes, all sessions", since=4
    )
    prefill_private_bytes: int = col("Int64", "bytes", "private memory after the first session's prefill", since=4)
    last_token_private_bytes: int = col("Int64", "bytes", "private memory after the last session's last token", since=4)
    generated_tokens: str = col("string", "", "the first session's greedy token ids, space-separated", since=4)
    tokens_ok: bool = col("boolean", "", "every session generated the reference's ids (else the worker fails)", since=4)


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
    latency_mean_s: float = col("Float64", "s", "mean latency over every timed inference of the group", since=2)
    latency_stdev_s: float = col(
        "Float64", "s", "standard deviation over every timed inference of the group (pooled)", since=2
    )
    latency_min_s: float = col("Float64", "s", "fastest timed inference of the group", since=2)
    latency_p95_s_median: float = col("Float64", "s", "median over workers of latency_p95_s", since=2)
    latency_max_s: float = col("Float64", "s", "slowest timed inference of the group", since=2)
    inferences_per_s: float = col("Float64", "count/s", "median over workers of inferences_per_s", since=2)
    max_peak_private_bytes: int = col(
        "Int64",
        "bytes",
        "highest peak_private_bytes of the group's ok workers (one worker's start-up peak)",
        since=2,
    )
    sum_peak_private_bytes: int = col(
        "Int64",
        "bytes",
        "sum of the ok workers' peak_private_bytes: the group's peak if every worker peaked at once",
        since=2,
    )
    peak_phase: str = col("string", "", "phase(s) of the workers' peaks, '|'-joined", since=2)
    system_min_available_bytes: int = col(
        "Int64", "bytes", "lowest system available memory while the workers started", since=2
    )
    system_max_committed_bytes: int = col(
        "Int64", "bytes", "highest commit charge while the workers started (Linux Committed_AS)", since=2
    )
    system_commit_limit_bytes: int = col(
        "Int64", "bytes", "the system's commit limit (Linux CommitLimit, Windows GetPerformanceInfo)", since=2
    )
    system_start_available_bytes: int = col(
        "Int64", "bytes", "system available memory as the group started, before its first worker", since=2
    )
    system_start_committed_bytes: int = col(
        "Int64", "bytes", "commit charge as the group started, before its first worker", since=2
    )
    overcommit_mode: int = col(
        "Int64", "", "Linux vm.overcommit_memory (only 2 enforces the commit limit); empty elsewhere", since=2
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
        "Int64", "count", "sessions whose EP log gave no file-mapping evidence (qnn; empty elsewhere)", since=2
    )
    retried_sessions: int = col(
        "Int64", "count", "sessions where the EP retried with a direct read (qnn; empty elsewhere)", since=2
    )
    complete: bool = col(
        "boolean",
        "",
        "all N workers reached the barrier and were sampled with plausible "
        "figures: only complete groups have sums and enter ratios and gates",
        since=2,
    )
    system_noise_bytes: int = col(
        "Int64",
        "bytes",
        "change of the idle system available memory from before to "
        "after the group: the noise floor of system_delta_bytes",
        since=2,
    )
    note: str = col("string", "", "why the group is not complete, or why its system delta is unreliable", since=2)
    copied_bytes_median: int = col(
        "Int64", "bytes", "median copied_bytes over the ok workers (weight copies per worker)", since=2
    )
    mapped_resident_bytes_median: int = col(
        "Int64", "bytes", "median mapped_resident_bytes over the ok workers", since=2
    )
    runtime_bytes: int = col("Int64", "bytes", "the group's control worker's USS / private bytes", since=2)
    load_avg: float = col("Float64", "", "highest load_avg of the group's workers", since=2)
    cpu_share_min: float = col("Float64", "", "lowest cpu_s / busy_s of the group's ok workers", since=2)
    contended: bool = col(
        "boolean",
        "",
        "timings taken on a contended machine: load_avg above cpu_count, or a worker's CPU share below 0.5 "
        "(sequential pass: foreign_cpus above cpu_count - 1 instead of the load average)",
        since=2,
    )
    start: str = col("string", "", "concurrent | sequential (see results.csv)", since=3)
    foreign_cpus_max: float = col(
        "Float64", "count", "sequential pass: highest foreign_cpus of the group's workers", since=3
    )
    floor_s_median: float = col("Float64", "s", "median floor_s over the ok workers", since=3)
    memory_limit_bytes: int = col("Int64", "bytes", "the group's container memory limit", since=3)
    oom_workers: int = col("Int64", "count", "workers the container's memory limit ended", since=3)
    container_peak_bytes: int = col("Int64", "bytes", "highest charge of the group's container", since=3)
    ttft_s_median: float = col("Float64", "s", "median ttft_s over the ok workers", since=4)
    decode_tokens_per_s_median: float = col("Float64", "count/s", "median decode_tokens_per_s of ok workers", since=4)
    token_latency_p50_s_median: float = col("Float64", "s", "median over ok workers of token_latency_p50_s", since=4)
    token_latency_p99_s_median: float = col("Float64", "s", "median over ok workers of token_latency_p99_s", since=4)
    sum_kv_cache_bytes: int = col("Int64", "bytes", "sum of kv_cache_bytes over the N workers, if complete", since=4)


def columns(row_type: type) -> list[str]:
    """CSV column order of a row type."""
    return [f.name for f in fields(row_type)]


def dtypes(row_type: type) -> dict[str, str]:
    """pandas dtypes to read a CSV of ``row_type`` with (``pd.read_csv(dtype=...)``)."""
    return {f.name: f.metadata["dtype"] for f in fields(row_type)}


def column_docs(row_type: type) -> list[tuple[str, str, str, str]]:
    """(name, dtype, unit, meaning) for docs/results.md and the report."""
    return [(f.name, f.metadata["dtype"], f.metadata["unit"], f.metadata["doc"]) for f in fields(row_type)]


def required_columns(row_type: type, version: int = FORMAT_VERSION) -> list[str]:
    """Columns every table of ``row_type`` in format ``version`` has (see `col`)."""
    return [f.name for f in fields(row_type) if f.metadata["since"] <= version]


def columns_since(row_type: type, version: int) -> list[str]:
    """Columns of ``row_type`` that format ``version`` added: a table of the version before may
    lack them."""
    return [f.name for f in fields(row_type) if f.metadata["since"] == version]


@functools.cache
def _column_names(row_type: type) -> frozenset[str]:
    """The column names of ``row_type``, built once (a table's every row asks for them)."""
    return frozenset(f.name for f in fields(row_type))


def row_from_dict(row_type: type, data: dict) -> Any:
    """Build a row from a dict, ignoring unknown keys (newer writers) and keeping defaults."""
    names = _column_names(row_type)
    return row_type(**{k: v for k, v in data.items() if k in names})


#: The generate workload's columns (those format 4 added to results.csv): a worker's record has them too.
GENERATE_COLUMNS = tuple(columns_since(ResultRow, 4))
