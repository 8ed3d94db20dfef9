"""Every figure of a group declared once (a `Figure`): the terminal table, summary.csv,
headline.json, the sentence, gates, report, history, ``--baseline`` and docs/gates.md derive from it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, fields
from typing import Any

from .schema import ResultRow, SummaryRow
from .vocab import Aggregate

ALL_SYSTEMS = frozenset({"Linux", "Windows", "Darwin"})
_UNITS = {f.name: f.metadata["unit"] for f in fields(SummaryRow)}


@dataclass(frozen=True)
class Figure:
    """One group figure and every place it appears (see the module docstring)."""

    column: str  # the SummaryRow column
    label: str  # what people call it: the report (capitalised) and --baseline ("mapped " + label)
    short: str = ""  # the name inside longer labels ("PSS ratio mapped/heap"); default: label
    #: the worker's figure a group aggregates (a ResultRow column or a function); None: computed elsewhere
    source: str | Callable[[ResultRow], float | None] | None = None
    aggregate: Aggregate = Aggregate.MEDIAN
    ratio: str = ""  # the headline/gate metric mapped/heap of it ("": none)
    terminal: str = ""  # its line in the terminal table ("": not shown there)
    hint: str = ""  # how to read it, in the report's headline table ("": not shown there)
    stat: str = ""  # its name in the latency table and headline.json's ``latency`` ("": not there)
    per_n: bool = True  # given per mode in headline.json's per_n
    positive: bool = True  # a live process's figure: a ratio at or below 0 is implausible
    higher_is_better: bool = False
    #: --baseline: the key stem of its per-mode figures (mapped_<stem>, heap_<stem>; "": not compared)
    compare: str = ""
    compare_ratio: bool = False  # --baseline compares its ratio too
    saving: bool = False  # --baseline compares heap - mapped ("saving_<stem>")
    ratio_regression: bool = False  # a worse ratio is a regression (the mapped figure's always is)
    once: bool = False  # the same in both modes (the control worker): compared once, by its stem
    always: bool = False  # every run measures it: --baseline lists it even when neither run has it
    sentence: bool = False  # the run's sentence names it mapped vs heap, with its ratio's spread, when measured
    systems: frozenset[str] = ALL_SYSTEMS  # the systems that can measure it

    @property
    def unit(self) -> str:
        return _UNITS[self.column]

    @property
    def timing(self) -> bool:
        """Measured in time (s, or count/s): judged on repeats, from the timing pass."""
        return self.unit in ("s", "count/s")

    @property
    def name(self) -> str:
        return self.short or self.label

    def worker_value(self, row: ResultRow) -> Any:
        """One worker's figure behind the group's (None: the figure has no worker `source`)."""
        if self.source is None:
            return None
        return self.source(row) if callable(self.source) else getattr(row, self.source)

    def group_value(self, members: Sequence[ResultRow], ok: Sequence[ResultRow], complete: bool) -> Any:
        """The group's figure from its worker rows (sums: every member, complete groups only)."""
        if self.aggregate == Aggregate.SUM:
            values = [self.worker_value(r) for r in members]
            return int(sum(values)) if complete and values and None not in values else None
        present = [v for v in map(self.worker_value, ok) if v is not None]
        if not present:
            return None
        import statistics  # not at import: the worker imports the registry (`latency`) before its timed runs

        return {Aggregate.MEDIAN: statistics.median, Aggregate.MAX: max, Aggregate.MIN: min}[self.aggregate](present)


def _startup(row: ResultRow) -> float | None:
    return row.init_s + row.first_run_s if row.init_s is not None and row.first_run_s is not None else None


_SUM = {"aggregate": Aggregate.SUM}
#: In the order of the headline's keys (the history file's columns follow it).
FIGURES: tuple[Figure, ...] = (
    Figure(
        "sum_pss_bytes", "summed PSS", "PSS", "pss_bytes", **_SUM, ratio="mapped_pss_ratio", terminal="sum PSS",
        hint="each shared page split between its sharers: the fair total (Linux)", systems=frozenset({"Linux"}),
    ),
    Figure(
        "sum_uss_bytes", "summed USS", "USS", "uss_bytes", **_SUM, ratio="mapped_uss_ratio", terminal="sum USS",
        hint="pages only one process has", compare="uss", compare_ratio=True, saving=True, always=True,
    ),
    Figure(
        "sum_rss_bytes", "summed RSS", "RSS", "rss_bytes", **_SUM, ratio="mapped_rss_ratio", terminal="sum RSS",
        hint="counts shared pages in every process: cannot show the saving",
    ),
    Figure(
        "sum_private_bytes", "summed private bytes", "private bytes", "private_bytes", **_SUM,
        ratio="mapped_private_ratio", terminal="sum private",
        hint="committed private memory (Windows); equals USS on Linux",
    ),
    Figure(
        "system_delta_bytes", "drop in system available memory", ratio="system_delta_ratio",
        terminal="system delta", hint="what the machine as a whole lost while all workers were alive", positive=False,
    ),
    Figure(
        "init_s_median", "median init", "init", "init_s", ratio="init_ratio", terminal="median init",
        hint="load + create: time until the sessions exist", compare="init", compare_ratio=True,
        ratio_regression=True, always=True,
    ),
    Figure(
        "create_s_median", "median session creation", "create", "create_s", ratio="create_ratio",
        hint="InferenceSession construction alone",
    ),
    Figure(
        "latency_p50_s_median", "latency p50", source="latency_p50_s", ratio="latency_p50_ratio",
        compare="latency_p50", compare_ratio=True, stat="p50",
    ),
    Figure("latency_p90_s_median", "latency p90", source="latency_p90_s", ratio="latency_p90_ratio", stat="p90"),
    Figure(
        "latency_p99_s_median", "latency p99", source="latency_p99_s", ratio="latency_p99_ratio",
        compare="latency_p99", stat="p99",
    ),
    Figure("latency_mean_s", "latency mean", ratio="latency_mean_ratio", stat="mean"),
    Figure(
        "first_run_s_median", "median first inference", "first inference", "first_run_s", ratio="first_run_ratio",
        compare_ratio=True,
    ),
    Figure(
        "startup_s_median", "init + first inference", source=_startup, ratio="startup_ratio",
        terminal="init + 1st run", compare="startup", compare_ratio=True,
    ),
    Figure(
        "inferences_per_s", "inferences/s", source="inferences_per_s", ratio="throughput_ratio",
        higher_is_better=True, compare="inferences_per_s",
    ),
    Figure(
        "max_peak_private_bytes", "start-up peak private", "start-up peak", ratio="peak_private_ratio",
        terminal="peak private", compare="peak_private", compare_ratio=True,
    ),
    Figure("latency_stdev_s", "latency stdev", stat="stdev"),
    Figure("latency_min_s", "latency min", source="latency_min_s", aggregate=Aggregate.MIN, stat="min"),
    Figure("latency_p95_s_median", "latency p95", source="latency_p95_s", stat="p95"),
    Figure("latency_max_s", "latency max", source="latency_max_s", aggregate=Aggregate.MAX, stat="max"),
    Figure("sum_peak_private_bytes", "summed start-up peak private"),
    Figure("floor_s_median", "median floor", "floor", "floor_s", per_n=False),
    Figure("system_min_available_bytes", "lowest system available memory"),
    Figure("system_max_committed_bytes", "highest commit charge"),
    Figure(
        "copied_bytes_median", "weight copies per worker", compare="copies",
        hint="private memory beyond the control worker's: what each worker copied (median)",
    ),
    Figure(
        "mapped_resident_bytes_median", "mapped weight pages per worker",
        hint="pages of the weights files resident in each worker (median)",
    ),
    Figure(
        "runtime_bytes", "control worker (runtime)", compare="runtime", once=True,
        hint="same runtime, sessions and inputs, no weights: the floor",
    ),
    Figure(
        "ttft_s_median", "median time to first token", "TTFT", "ttft_s", ratio="ttft_ratio", terminal="median TTFT",
        hint="prefill and its token (--workload generate)", compare="ttft", compare_ratio=True, ratio_regression=True,
        sentence=True,
    ),
    Figure(
        "decode_tokens_per_s_median", "decode tokens/s", source="decode_tokens_per_s", ratio="decode_throughput_ratio",
        terminal="decode tokens/s", hint="tokens after the first over their decode steps' time",
        higher_is_better=True, compare="decode_tokens_per_s", compare_ratio=True, ratio_regression=True,
        sentence=True,
    ),
    Figure(
        "token_latency_p50_s_median", "token latency p50", source="token_latency_p50_s",
        ratio="token_latency_p50_ratio", compare="token_latency_p50",
    ),
    Figure(
        "token_latency_p99_s_median", "token latency p99", source="token_latency_p99_s",
        ratio="token_latency_p99_ratio", compare="token_latency_p99",
    ),
    Figure(
        "sum_kv_cache_bytes", "summed KV cache", "KV cache", "kv_cache_bytes", **_SUM, terminal="sum KV cache",
        hint="the KV tensors at the last token, from their shapes: alive in the memory figures", compare="kv_cache",
    ),
)  # fmt: skip
BY_COLUMN = {f.column: f for f in FIGURES}
#: The latency statistics (`Figure.stat`) -> their SummaryRow column.
LATENCY_STATS = {f.stat: f.column for f in FIGURES if f.stat}
#: Headline metric -> the SummaryRow column whose mapped/heap ratio it is.
RATIO_COLUMNS = {f.ratio: f.column for f in FIGURES if f.ratio}
BY_RATIO = {f.ratio: f for f in FIGURES if f.ratio}
#: The fair memory figures, preferred first: PSS splits a shared page; private bytes charge it to nobody.
FAIR = (BY_COLUMN["sum_pss_bytes"], BY_COLUMN["sum_private_bytes"])

#: Headline metrics that are no figure's ratio: (name, what it means, compares mapped with heap).
OTHER_METRICS: tuple[tuple[str, str, bool], ...] = (
    (
        "mapped_weight_copies",
        "mapped summed PSS (private bytes where there is no PSS) minus the heap run's non-weight overhead, in "
        "weights: ~1 when every session shares one copy",
        True,
    ),
    (
        "heap_copies_per_session",
        "heap summed PSS (private bytes where there is no PSS) over sessions x weights: >= 1 when every heap "
        "session holds its own copy",
        True,
    ),
    (
        "mapped_memory_budget_ratio",
        "mapped summed PSS (private bytes where there is no PSS) over one copy of the weights plus N x the control "
        "worker's private memory (its runtime, KV cache included): <= 1.1 when the sessions share one copy",
        True,
    ),
    ("peer_init_ratio", "median init of the mapped target over the peer target's mapped init (--peer)", False),
    ("failed_workers", "workers that crashed, hung, raised or were wrong, over every group", False),
    (
        "unknown_sessions",
        "sessions whose EP log gave no file-mapping evidence, over every group (qnn; not measured elsewhere)",
        False,
    ),
    ("retried_sessions", "sessions where the EP retried with a direct read, over every group (qnn)", False),
    ("fallback_workers", "workers whose weights fell back to the heap, over every group", False),
    ("processes", "N of the headline (the largest N x M measured in both modes)", False),
    ("sessions", "N x M of the headline", False),
    (
        "contended_groups",
        "headline groups timed on a contended machine (load above the CPU count, or a worker below half a CPU): "
        "timing gates read 'contended' when above 0",
        False,
    ),
)
#: Headline metrics that compare the mapped and heap modes: they need both modes measured.
PAIR_METRICS = (*RATIO_COLUMNS, *(name for name, _, pair in OTHER_METRICS if pair))
#: Headline metrics in time besides the ratios of a figure in time.
PEER_TIMING = ("peer_init_ratio",)


def is_timing(metric: str) -> bool:
    """A gate metric measured in time: judged on its repeats' interval, from the timing pass."""
    return metric in PEER_TIMING or (metric in BY_RATIO and BY_RATIO[metric].timing)


def fair_figure(rows: Iterable[SummaryRow]) -> Figure | None:
    """The fair memory figure every one of ``rows`` has (`FAIR`), None when none has it."""
    rows = list(rows)
    return next((f for f in FAIR if rows and all(getattr(r, f.column) is not None for r in rows)), None)


def fair_bytes(row: SummaryRow) -> int | None:
    """One group's fair memory: its first `FAIR` figure measured."""
    return next((v for v in (getattr(row, f.column) for f in FAIR) if v is not None), None)


def fair_key(figure: Figure | None) -> str | None:
    """ "pss" | "private" (headline.json's ``saving.metric``), None without a figure."""
    return figure.column.removeprefix("sum_").removesuffix("_bytes") if figure else None


def group_figures(members: Sequence[ResultRow], ok: Sequence[ResultRow], complete: bool) -> dict[str, Any]:
    """The SummaryRow columns of every figure with a worker `Figure.source`, for one group."""
    return {f.column: f.group_value(members, ok, complete) for f in FIGURES if f.source is not None}


FAIR_BY_KEY = {fair_key(f): f for f in FAIR}
