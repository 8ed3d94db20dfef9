"""A run against a baseline run (``harness report RUN --baseline RUN0``): both values, the
delta, and a change *called* only when it is both significant and large enough.

Where: both runs are compared at the largest (N, M) that both measured in both modes; when they
share none, each at its own headline N x M, and no change is called (figures of different
sizes differ by construction).

Values: each figure is taken per repeat (summed memory of the group, median init of its
workers, mapped/heap ratio of the repeat's pair); a run's value is the median over its repeats,
as the headline is.

The call (`harness.core.stats` says why this test): a change is called when Welch's t-test on
the two runs' per-repeat values (times and ratios on the log scale, see `Change.scale`) gives
p < 0.01 AND the change of the median is at least the figure's minimum effect (memory: 1 % of
the baseline and 1 MiB; time: 5 %; ``--min-effect``). With fewer than 3 repeats in either run
no change is called. Words: "no significant change", "smaller"/"larger" (memory, ratios),
"faster"/"slower" (times); never better/worse. A
*regression* is a called change in the bad direction of a figure that judges the feature: the
mapped mode's memory, the saving, init and latency (``--fail-on-regression``).
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from .errors import InputError
from .headline import fair_metric, versions
from .rundata import RunData
from .schema import SummaryRow
from .stats import ALPHA, MIN_REPEATS, welch
from .summary import median, paired, ratio
from .units import fmt_bytes, parse_size

Pair = tuple[SummaryRow, SummaryRow]
TOO_FEW = f"too few repeats to call a change (need {MIN_REPEATS})"
NO_CHANGE = "no significant change"
KINDS = ("memory", "time")


@dataclass(frozen=True)
class MinEffect:
    """The smallest change worth calling, per kind of figure: a fraction of the baseline value,
    and for memory in bytes also an absolute floor (1 % of a 20 MiB overhead is page noise)."""

    memory: float = 0.01
    memory_bytes: int = 1024**2
    time: float = 0.05

    def threshold(self, kind: str, unit: str, baseline: float) -> float:
        """The smallest |delta| called a change, in the figure's own unit."""
        relative = (self.memory if kind == "memory" else self.time) * abs(baseline)
        return max(relative, float(self.memory_bytes)) if unit == "bytes" else relative

    def as_dict(self) -> dict[str, float | int]:
        return {"memory": self.memory, "memory_bytes": self.memory_bytes, "time": self.time}


def parse_min_effect(texts: Iterable[str]) -> MinEffect:
    """``["memory=2%", "memory=4MiB", "time=10%"]`` -> `MinEffect`; InputError (one line) for an
    unknown kind, a value that is not a percent (or, for memory, a size), or a repeated one."""
    values: dict[str, float | int] = {}
    for text in texts:
        kind, sep, value = text.partition("=")
        kind, value = kind.strip(), value.strip()
        if not sep or kind not in KINDS:
            raise InputError(f"--min-effect {text!r}: expected KIND=VALUE with KIND one of {', '.join(KINDS)}")
        percent = re.fullmatch(r"(\d+(?:\.\d*)?|\.\d+)\s*%", value, re.ASCII)
        if percent:
            key, number = kind, float(percent.group(1)) / 100
            if not number < 1:
                raise InputError(f"--min-effect {text!r}: a percent below 100 is expected")
        elif kind == "memory":
            try:
                key, number = "memory_bytes", parse_size(value)
            except InputError as err:
                raise InputError(f"--min-effect {text!r}: neither a percent (1%) nor a size: {err}") from None
        else:
            raise InputError(f"--min-effect {text!r}: a time effect is a percent, e.g. time=5%")
        if key in values:
            raise InputError(f"--min-effect {text!r}: {key.replace('_', ' ')} given twice")
        values[key] = number
    return MinEffect(**values)


@dataclass(frozen=True)
class Metric:
    """One compared figure: how to read it off a (mapped, heap) pair, its unit, its kind
    (memory or time: which minimum effect), which direction is better and whether a change for
    the worse is a regression of the feature."""

    key: str
    label: str
    unit: str  # "bytes" | "s" | "ratio" | "count/s"
    value: Callable[[SummaryRow, SummaryRow], float | None]
    kind: str = "memory"
    lower_is_better: bool = True
    regression: bool = False


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
        Metric("mapped_fair", f"mapped summed {label}", "bytes", _column("mapped", column), regression=True),
        Metric("heap_fair", f"heap summed {label}", "bytes", _column("heap", column)),
        Metric(
            "saving",
            f"saving (heap - mapped {label})",
            "bytes",
            _saving(column),
            lower_is_better=False,
            regression=True,
        ),
        Metric("mapped_uss", "mapped summed USS", "bytes", _column("mapped", "sum_uss_bytes"), regression=True),
        Metric("mapped_init", "mapped median init", "s", _column("mapped", "init_s_median"), "time", regression=True),
        Metric("heap_init", "heap median init", "s", _column("heap", "init_s_median"), "time"),
        Metric(f"mapped_{fair}_ratio", f"{label} ratio mapped/heap", "ratio", _ratio(column)),
        Metric("mapped_uss_ratio", "USS ratio mapped/heap", "ratio", _ratio("sum_uss_bytes")),
        Metric("init_ratio", "init ratio mapped/heap", "ratio", _ratio("init_s_median"), "time", regression=True),
        *startup_metrics(),
    ]


def startup_metrics() -> list[Metric]:
    """Start-up peak, init + first inference and latency (issue 20): per mode and as ratios; the
    mapped mode's are regression figures (its memory, start-up and latency)."""
    out = []
    for mode in ("mapped", "heap"):
        mine = mode == "mapped"
        out += [
            Metric(
                f"{mode}_peak_private",
                f"{mode} start-up peak private",
                "bytes",
                _column(mode, "max_peak_private_bytes"),
                regression=mine,
            ),
            Metric(
                f"{mode}_startup",
                f"{mode} init + first inference",
                "s",
                _column(mode, "startup_s_median"),
                "time",
                regression=mine,
            ),
            Metric(
                f"{mode}_latency_p50",
                f"{mode} latency p50",
                "s",
                _column(mode, "latency_p50_s_median"),
                "time",
                regression=mine,
            ),
            Metric(
                f"{mode}_latency_p99",
                f"{mode} latency p99",
                "s",
                _column(mode, "latency_p99_s_median"),
                "time",
                regression=mine,
            ),
            Metric(
                f"{mode}_inferences_per_s",
                f"{mode} inferences/s",
                "count/s",
                _column(mode, "inferences_per_s"),
                "time",
                lower_is_better=False,
                regression=mine,
            ),
        ]
    return out + [
        Metric("peak_private_ratio", "start-up peak ratio mapped/heap", "ratio", _ratio("max_peak_private_bytes")),
        Metric(
            "startup_ratio", "init + first inference ratio mapped/heap", "ratio", _ratio("startup_s_median"), "time"
        ),
        Metric("first_run_ratio", "first inference ratio mapped/heap", "ratio", _ratio("first_run_s_median"), "time"),
        Metric("latency_p50_ratio", "latency p50 ratio mapped/heap", "ratio", _ratio("latency_p50_s_median"), "time"),
    ]


@dataclass
class Change:
    metric: Metric
    baseline: list[float]  # per-repeat values
    current: list[float]
    min_effect: MinEffect = field(default_factory=MinEffect)
    not_comparable: str = ""  # why no change may be called at all (different sizes)

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
    def scale(self) -> str:
        """ "log" for times and ratios (their noise is multiplicative: a loaded machine slows a
        run by a factor, and one slow repeat must not hide a tenfold change), "linear" for bytes
        (page noise adds) and wherever a value is not positive."""
        positive = all(v > 0 for v in (*self.baseline, *self.current))
        return "log" if self.metric.unit != "bytes" and positive else "linear"

    @property
    def p_value(self) -> float | None:
        """Welch's two-sided p-value on `scale`, when both runs have at least 2 repeats."""
        if len(self.baseline) < 2 or len(self.current) < 2:
            return None
        a, b = self.baseline, self.current
        if self.scale == "log":
            a, b = [math.log(v) for v in a], [math.log(v) for v in b]
        return welch(a, b).p

    @property
    def threshold(self) -> float | None:
        """The minimum effect, in the figure's unit (None without a baseline value)."""
        base = self.baseline_value
        return None if base is None else self.min_effect.threshold(self.metric.kind, self.metric.unit, base)

    @property
    def changed(self) -> bool:
        """Significant (p < `ALPHA`) and at least the minimum effect, with enough repeats."""
        if self.delta is None or self.not_comparable or min(len(self.baseline), len(self.current)) < MIN_REPEATS:
            return False
        p, threshold = self.p_value, self.threshold
        return p is not None and p < ALPHA and threshold is not None and abs(self.delta) >= threshold

    @property
    def call(self) -> str:
        """ "no significant change", a direction word, or why no change can be called."""
        if self.delta is None:
            return "not measured"
        if self.not_comparable:
            return f"not called: {self.not_comparable}"
        if min(len(self.baseline), len(self.current)) < MIN_REPEATS:
            return TOO_FEW
        if not self.changed:
            return NO_CHANGE
        down, up = {"s": ("faster", "slower"), "count/s": ("slower", "faster")}.get(
            self.metric.unit, ("smaller", "larger")
        )
        return down if self.delta < 0 else up  # type: ignore[operator]

    @property
    def regressed(self) -> bool:
        """A called change for the worse of a figure that judges the feature."""
        if not self.metric.regression or not self.changed:
            return False
        return (self.delta > 0) == self.metric.lower_is_better  # type: ignore[operator]


@dataclass
class Comparison:
    baseline: RunData
    current: RunData
    at: str  # where the runs were compared, in words
    changes: list[Change]
    versions: list[tuple[str, str, str]] = field(default_factory=list)  # (name, baseline, current)
    warnings: list[str] = field(default_factory=list)
    min_effect: MinEffect = field(default_factory=MinEffect)

    @property
    def regressions(self) -> list[Change]:
        return [c for c in self.changes if c.regressed]


def _own_pairs(run: RunData) -> dict[tuple[int, int], list[Pair]]:
    by_size: dict[tuple[int, int], list[Pair]] = defaultdict(list)
    for mapped, heap in paired(s for s in run.summary if s.target == run.target):
        by_size[(mapped.processes, mapped.sessions_per_process)].append((mapped, heap))
    return by_size


def _largest(sizes) -> tuple[int, int] | None:
    return max(sizes, key=lambda nm: (nm[0] * nm[1], nm[0]), default=None)


def _where(mine: dict, theirs: dict) -> tuple[tuple | None, tuple | None, str, str]:
    """(current size, baseline size, where in words, why no change may be called or "")."""
    common = _largest(mine.keys() & theirs.keys())
    if common is not None:
        return (
            common,
            common,
            f"N={common[0]} processes x M={common[1]} session(s), the largest size both runs measured",
            "",
        )
    at_current, at_baseline = _largest(mine), _largest(theirs)
    at = f"each run's largest size (current {_size(at_current)}, baseline {_size(at_baseline)})"
    return at_current, at_baseline, at, "the runs were measured at different sizes"


def compare(current: RunData, baseline: RunData, min_effect: MinEffect | None = None) -> Comparison:
    """``current`` against ``baseline`` (see the module docstring for where and how)."""
    min_effect = min_effect or MinEffect()
    mine, theirs = _own_pairs(current), _own_pairs(baseline)
    at_current, at_baseline, at, not_comparable = _where(mine, theirs)
    warnings = []
    if not_comparable and at_current and at_baseline:
        warnings.append(
            "the runs share no N x M measured in both modes: figures are shown at different sizes and no "
            "change is called"
        )
    cur_pairs, base_pairs = mine.get(at_current, []), theirs.get(at_baseline, [])
    if not cur_pairs or not base_pairs:
        warnings.append("a run has no mapped/heap pair: nothing to compare")
    if current.target != baseline.target:
        warnings.append(f"different targets: current {current.target}, baseline {baseline.target}")
    if _model(current) != _model(baseline):
        warnings.append(
            f"different models: current {_model_text(current)}, baseline {_model_text(baseline)}: "
            "a change comes from the model as much as from the code"
        )
    rows = [s for pair in cur_pairs + base_pairs for s in pair]
    changes = []
    optional = {m.key for m in startup_metrics()}  # figures older runs (or runs without --runs) lack
    for metric in metrics_for(fair_metric(rows)):
        change = Change(metric, _values(metric, base_pairs), _values(metric, cur_pairs), min_effect, not_comparable)
        if metric.key not in optional or change.baseline or change.current:
            changes.append(change)
    cur_v, base_v = versions(current.env), versions(baseline.env)
    version_rows = [(k, str(base_v.get(k) or "-"), str(cur_v.get(k) or "-")) for k in cur_v]
    return Comparison(baseline, current, at, changes, version_rows, warnings, min_effect)


def _size(nm: tuple[int, int] | None) -> str:
    return "nothing measured in both modes" if nm is None else f"N={nm[0]} x M={nm[1]}"


def _model(run: RunData) -> tuple[str, int | None]:
    """What a run measured: its model and the bytes of weights its sessions load."""
    return str(run.run.get("model") or ""), run.weights_bytes


def _model_text(run: RunData) -> str:
    name, size = _model(run)
    return f"{name or 'unknown model'} ({fmt_bytes(size) if size else 'unknown size'} of weights)"


def _values(metric: Metric, pairs: list[Pair]) -> list[float]:
    """Per-repeat values, from complete pairs only (an incomplete group has no sums)."""
    return [v for v in (metric.value(m, h) for m, h in pairs) if v is not None]
