"""A run against a baseline run: absolute values, deltas, percent change, and whether a
change exceeds the run-to-run spread (``harness report RUN --baseline RUN0``).

Where: both runs are compared at the largest (N, M) that both measured in both modes; when they
share none, each at its own headline N x M (and the comparison says so).

Values: each figure is taken per repeat (summed memory of the group, median init of its
workers, mapped/heap ratio of the repeat's pair), and a run's value is the median over its
repeats, as the headline is.

The spread rule: a change *exceeds the run-to-run spread* when the ranges [min, max] of the
two runs' per-repeat values do not overlap (every repeat of one run lies beyond every repeat of
the other). It needs a spread to compare with: the baseline must have at least 2 repeats,
otherwise the verdict is "unknown". With 3 repeats on each side, two runs drawn from the same
distribution have non-overlapping ranges with probability 2 x 3! x 3! / 6! = 10 %; with 5 each,
under 1 %: run more repeats for a stricter test. Non-overlap is deliberately simple: it makes no
normality assumption and a reader can check it by eye from the two ranges shown.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field

from .headline import fair_metric, versions
from .rundata import RunData
from .schema import SummaryRow
from .summary import median, paired, ratio
from .units import fmt_bytes, fmt_percent, fmt_ratio, fmt_seconds

Pair = tuple[SummaryRow, SummaryRow]


@dataclass(frozen=True)
class Metric:
    """One compared figure: how to read it off a (mapped, heap) pair, its unit and which
    direction is better."""

    key: str
    label: str
    unit: str  # "bytes" | "s" | "ratio" | "count/s"
    value: Callable[[SummaryRow, SummaryRow], float | None]
    lower_is_better: bool = True


def _column(mode: str, column: str) -> Callable[[SummaryRow, SummaryRow], float | None]:
    return lambda m, h: getattr(m if mode == "mapped" else h, column)


def _ratio(column: str) -> Callable[[SummaryRow, SummaryRow], float | None]:
    return lambda m, h: ratio(getattr(m, column), getattr(h, column))


def _saving(column: str) -> Callable[[SummaryRow, SummaryRow], float | None]:
    def value(m: SummaryRow, h: SummaryRow) -> float | None:
        a, b = getattr(m, column), getattr(h, column)
        return None if a is None or b is None else b - a

    return value


def metrics_for(metric: str | None) -> list[Metric]:
    """The compared figures; ``metric`` is the fair memory figure both runs have (pss/private)."""
    fair = metric or "private"
    label = "PSS" if fair == "pss" else "private bytes"
    column = f"sum_{fair}_bytes"
    return [
        Metric("mapped_fair", f"mapped summed {label}", "bytes", _column("mapped", column)),
        Metric("heap_fair", f"heap summed {label}", "bytes", _column("heap", column)),
        Metric("saving", f"saving (heap - mapped {label})", "bytes", _saving(column), lower_is_better=False),
        Metric("mapped_uss", "mapped summed USS", "bytes", _column("mapped", "sum_uss_bytes")),
        Metric("mapped_init", "mapped median init", "s", _column("mapped", "init_s_median")),
        Metric("heap_init", "heap median init", "s", _column("heap", "init_s_median")),
        Metric(f"mapped_{fair}_ratio", f"{label} ratio mapped/heap", "ratio", _ratio(column)),
        Metric("mapped_uss_ratio", "USS ratio mapped/heap", "ratio", _ratio("sum_uss_bytes")),
        Metric("init_ratio", "init ratio mapped/heap", "ratio", _ratio("init_s_median")),
        *startup_metrics(),
    ]


def startup_metrics() -> list[Metric]:
    """Start-up peak, init + first inference and latency (issue 20): per mode and as ratios."""
    out = []
    for mode in ("mapped", "heap"):
        out += [
            Metric(
                f"{mode}_peak_private",
                f"{mode} start-up peak private",
                "bytes",
                _column(mode, "max_peak_private_bytes"),
            ),
            Metric(f"{mode}_startup", f"{mode} init + first inference", "s", _column(mode, "startup_s_median")),
            Metric(f"{mode}_latency_p50", f"{mode} latency p50", "s", _column(mode, "latency_p50_s_median")),
            Metric(f"{mode}_latency_p99", f"{mode} latency p99", "s", _column(mode, "latency_p99_s_median")),
            Metric(
                f"{mode}_inferences_per_s", f"{mode} inferences/s", "count/s", _column(mode, "inferences_per_s"), False
            ),
        ]
    return out + [
        Metric("peak_private_ratio", "start-up peak ratio mapped/heap", "ratio", _ratio("max_peak_private_bytes")),
        Metric("startup_ratio", "init + first inference ratio mapped/heap", "ratio", _ratio("startup_s_median")),
        Metric("first_run_ratio", "first inference ratio mapped/heap", "ratio", _ratio("first_run_s_median")),
        Metric("latency_p50_ratio", "latency p50 ratio mapped/heap", "ratio", _ratio("latency_p50_s_median")),
    ]


@dataclass
class Change:
    metric: Metric
    baseline: list[float]  # per-repeat values
    current: list[float]

    @property
    def baseline_value(self) -> float | None:
        return median(self.baseline)

    @property
    def current_value(self) -> float | None:
        return median(self.current)

    @property
    def delta(self) -> float | None:
        a, b = self.baseline_value, self.current_value
        return None if a is None or b is None else b - a

    @property
    def percent(self) -> float | None:
        """Relative change, current over baseline minus one (None when the baseline is 0)."""
        a, d = self.baseline_value, self.delta
        return None if d is None or not a else d / abs(a)

    @property
    def beyond_spread(self) -> bool | None:
        """True when the per-repeat ranges do not overlap; None without a baseline spread."""
        if len(self.baseline) < 2 or not self.current:
            return None
        return max(self.current) < min(self.baseline) or min(self.current) > max(self.baseline)

    @property
    def assessment(self) -> str:
        """ "better" / "worse" (beyond the spread), "within spread", or why it is unknown."""
        if self.delta is None:
            return "not measured"
        spread = self.beyond_spread
        if spread is None:
            return "unknown (baseline needs --repeat >= 2)"
        if not spread:
            return "within spread"
        improved = (self.delta < 0) == self.metric.lower_is_better
        return "better (beyond spread)" if improved else "WORSE (beyond spread)"


@dataclass
class Comparison:
    baseline: RunData
    current: RunData
    at: str  # where the runs were compared, in words
    changes: list[Change]
    versions: list[tuple[str, str, str]] = field(default_factory=list)  # (name, baseline, current)
    warnings: list[str] = field(default_factory=list)


def _own_pairs(run: RunData) -> dict[tuple[int, int], list[Pair]]:
    by_size: dict[tuple[int, int], list[Pair]] = defaultdict(list)
    for mapped, heap in paired(s for s in run.summary if s.target == run.target):
        by_size[(mapped.processes, mapped.sessions_per_process)].append((mapped, heap))
    return by_size


def _largest(sizes) -> tuple[int, int] | None:
    return max(sizes, key=lambda nm: (nm[0] * nm[1], nm[0]), default=None)


def compare(current: RunData, baseline: RunData) -> Comparison:
    """``current`` against ``baseline`` (see the module docstring for where and how)."""
    mine, theirs = _own_pairs(current), _own_pairs(baseline)
    warnings = []
    common = _largest(mine.keys() & theirs.keys())
    if common is not None:
        at_current = at_baseline = common
        at = f"N={common[0]} processes x M={common[1]} session(s), the largest size both runs measured"
    else:
        at_current, at_baseline = _largest(mine), _largest(theirs)
        at = f"each run's largest size (current {_size(at_current)}, baseline {_size(at_baseline)})"
        if at_current and at_baseline:
            warnings.append(
                "the runs share no N x M measured in both modes: figures are compared at different "
                "sizes and their differences are not a regression"
            )
    cur_pairs, base_pairs = mine.get(at_current, []), theirs.get(at_baseline, [])
    if not cur_pairs or not base_pairs:
        warnings.append("a run has no mapped/heap pair: nothing to compare")
    if current.target != baseline.target:
        warnings.append(f"different targets: current {current.target}, baseline {baseline.target}")
    if _model(current) != _model(baseline):
        warnings.append(
            f"different models: current {_model_text(current)}, baseline {_model_text(baseline)}: "
            "their differences are not a regression"
        )
    rows = [s for pair in cur_pairs + base_pairs for s in pair]
    changes = []
    optional = {m.key for m in startup_metrics()}  # figures older runs (or runs without --runs) lack
    for metric in metrics_for(fair_metric(rows)):
        change = Change(metric, _values(metric, base_pairs), _values(metric, cur_pairs))
        if metric.key not in optional or change.baseline or change.current:
            changes.append(change)
    cur_v, base_v = versions(current.env), versions(baseline.env)
    version_rows = [(k, str(base_v.get(k) or "-"), str(cur_v.get(k) or "-")) for k in cur_v]
    return Comparison(baseline, current, at, changes, version_rows, warnings)


def _size(nm: tuple[int, int] | None) -> str:
    return "nothing measured in both modes" if nm is None else f"N={nm[0]} x M={nm[1]}"


def _model(run: RunData) -> tuple[str, int | None]:
    """What a run measured: its model and the bytes of weights its sessions load."""
    return str(run.run.get("model") or ""), run.weights_bytes


def _model_text(run: RunData) -> str:
    name, size = _model(run)
    return f"{name or 'unknown model'} ({fmt_bytes(size) if size else 'unknown size'} of weights)"


def _values(metric: Metric, pairs: list[Pair]) -> list[float]:
    return [v for v in (metric.value(m, h) for m, h in pairs) if v is not None]


def fmt_value(value: float | None, unit: str, *, signed: bool = False) -> str:
    if value is None:
        return "-"
    sign = "+" if signed and value > 0 else ""
    if unit == "bytes":
        return sign + fmt_bytes(value)
    if unit == "s":
        return sign + fmt_seconds(value) if value >= 0 else "-" + fmt_seconds(-value)
    if unit == "count/s":
        return f"{value:+.1f}/s" if signed else f"{value:.1f}/s"
    return f"{value:+.3f}" if signed else fmt_ratio(value)


def fmt_range(values: list[float], unit: str) -> str:
    if len(values) < 2:
        return "-"
    return f"{fmt_value(min(values), unit)} .. {fmt_value(max(values), unit)}"


def comparison_rows(comparison: Comparison) -> list[dict[str, str]]:
    """Display-ready cells for the terminal and the HTML report."""
    return [
        {
            "label": c.metric.label,
            "baseline": fmt_value(c.baseline_value, c.metric.unit),
            "current": fmt_value(c.current_value, c.metric.unit),
            "delta": fmt_value(c.delta, c.metric.unit, signed=True),
            "percent": fmt_percent(c.percent, signed=True),
            "baseline_range": fmt_range(c.baseline, c.metric.unit),
            "current_range": fmt_range(c.current, c.metric.unit),
            "assessment": c.assessment,
            "repeats": f"{len(c.baseline)} / {len(c.current)}",
        }
        for c in comparison.changes
    ]


def comparison_lines(comparison: Comparison) -> list[str]:
    """Plain-text table, like ``pyperf compare_to``: baseline, current, delta, change, spread."""
    head = ("figure", "baseline", "current", "delta", "change", "vs run-to-run spread")
    rows = [
        (r["label"], r["baseline"], r["current"], r["delta"], r["percent"], r["assessment"])
        for r in comparison_rows(comparison)
    ]
    widths = [max(len(str(row[i])) for row in [head, *rows]) for i in range(len(head))]

    def line(row) -> str:
        cells = [str(row[0]).ljust(widths[0])] + [str(c).rjust(w) for c, w in zip(row[1:5], widths[1:5], strict=True)]
        return "  ".join([*cells, str(row[5])]).rstrip()

    base, cur = comparison.baseline, comparison.current
    out = [
        f"baseline: {base.run_id} ({base.target}); current: {cur.run_id} ({cur.target}); compared at {comparison.at}",
        line(head),
        *(line(r) for r in rows),
    ]
    differing = [(k, b, c) for k, b, c in comparison.versions if b != c]
    if differing:
        out.append("versions that differ: " + "; ".join(f"{k} {b} -> {c}" for k, b, c in differing))
    out += [f"warning: {w}" for w in comparison.warnings]
    out.append(
        "spread rule: a change exceeds the run-to-run spread when the min..max ranges of the two runs' "
        "repeats do not overlap (the baseline needs >= 2 repeats)"
    )
    return out
