"""A run against a baseline run (``harness report RUN --baseline RUN0``): both values, the
delta, and a change *called* only when it is both significant and large enough.

Where: the largest (N, M) both runs measured in both modes (none shared: each at its own, and
nothing called); two runs of another target, model content, target options or workload call
nothing either, their differences named first. Values per repeat, a run's value as the headline
defines it. The call: Welch's t-test (times and ratios on the log scale) p < 0.01 AND at least
the figure's minimum effect (``--min-effect``), with at least 3 repeats a side; a *regression*
is a called change for the worse of a figure that judges the feature. Memory is called only on
figures other processes cannot move (not PSS). docs/reports.md has the rule and its figures.
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

from .compare_metrics import Metric, Pair, metrics_for
from .errors import InputError
from .headline import versions
from .metrics import fair_figure
from .passes import memory_view
from .rundata import RunData
from .stats import ALPHA, MIN_REPEATS, MIN_TIME_EFFECT, welch
from .summary import complete_pair, median, paired
from .units import fmt_bytes, parse_size

TOO_FEW = f"too few repeats to call a change (need {MIN_REPEATS})"
NO_CHANGE = "no significant change"
KINDS = ("memory", "time")


@dataclass(frozen=True)
class MinEffect:
    """The smallest change worth calling, per kind of figure: a fraction of the baseline value,
    and for memory in bytes also an absolute floor (1 % of a 20 MiB overhead is page noise)."""

    memory: float = 0.01
    memory_bytes: int = 1024**2
    time: float = MIN_TIME_EFFECT

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


@dataclass
class Change:
    metric: Metric
    baseline: list[float]  # per-repeat values
    current: list[float]
    min_effect: MinEffect = field(default_factory=MinEffect)
    not_comparable: str = ""  # why no change may be called at all (different sizes)
    #: (baseline, current) run values as the headline defines them (`Metric.summary`); None:
    #: the medians of the per-repeat values.
    values: tuple[float | None, float | None] | None = None

    @property
    def baseline_value(self) -> float | None:
        return self.values[0] if self.values is not None else median(self.baseline)

    @property
    def current_value(self) -> float | None:
        return self.values[1] if self.values is not None else median(self.current)

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
        """Significant (p < `ALPHA`) and at least the minimum effect, with enough repeats, on a
        figure other processes cannot move."""
        if self.delta is None or self.not_comparable or self.metric.foreign:
            return False
        if min(len(self.baseline), len(self.current)) < MIN_REPEATS:
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
        if self.metric.foreign:
            return f"not called: {self.metric.foreign}"
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
    differences: list[str] = field(default_factory=list)  # what the two runs measured differently

    @property
    def regressions(self) -> list[Change]:
        return [c for c in self.changes if c.regressed]


def _own_pairs(run: RunData) -> dict[tuple[int, int], list[Pair]]:
    """The run's complete (mapped, heap) pairs by size, as the headline takes them (`per_n`)."""
    by_size: dict[tuple[int, int], list[Pair]] = defaultdict(list)
    # the concurrent pass, as runs without a timing pass have it: a baseline compares like with like
    for mapped, heap in paired(s for s in memory_view(run.summary) if s.target == run.target):
        if complete_pair(mapped, heap):
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
    differences = differences_between(current, baseline)  # named first; no change is called across them
    not_comparable = "; ".join(differences + ([not_comparable] if not_comparable else []))
    warnings = list(differences)
    if not_comparable and at_current and at_baseline and not differences:
        warnings.append(
            "the runs share no N x M measured in both modes: figures are shown at different sizes and no "
            "change is called"
        )
    cur_pairs, base_pairs = mine.get(at_current, []), theirs.get(at_baseline, [])
    if not cur_pairs or not base_pairs:
        warnings.append("a run has no mapped/heap pair: nothing to compare")
    rows = [s for pair in cur_pairs + base_pairs for s in pair]
    changes = []
    for metric in metrics_for(fair_figure(rows)):
        change = Change(metric, _values(metric, base_pairs), _values(metric, cur_pairs), min_effect, not_comparable)
        if metric.summary is not None:
            change.values = (metric.summary(base_pairs), metric.summary(cur_pairs))
        if not metric.optional or change.baseline or change.current:
            changes.append(change)
    cur_v, base_v = versions(current.env), versions(baseline.env)
    version_rows = [(k, str(base_v.get(k) or "-"), str(cur_v.get(k) or "-")) for k in cur_v]
    return Comparison(baseline, current, at, changes, version_rows, warnings, min_effect, differences)


#: What a run's workload is besides its model and target (metadata ``run`` keys): any of them moves every figure.
WORKLOAD_KEYS = ("session", "inputs", "runs", "warmup", "concurrency", "page_cache", "memory_limit_bytes")


def differences_between(current: RunData, baseline: RunData) -> list[str]:
    """What makes two runs measure different things (target, model content, workload), in words."""
    out = []
    if current.target != baseline.target:
        out.append(f"different targets: current {current.target}, baseline {baseline.target}")
    prints = (current.run.get("model_fingerprint"), baseline.run.get("model_fingerprint"))
    if (prints[0] != prints[1]) if all(prints) else _model(current) != _model(baseline):
        out.append(f"different models: current {_model_text(current)}, baseline {_model_text(baseline)}")
    mine_o, theirs_o = current.target_options, baseline.target_options
    differ = sorted(k for k in mine_o.keys() | theirs_o.keys() if mine_o.get(k) != theirs_o.get(k))
    if differ and current.target == baseline.target:
        out.append(f"different {current.target} options ({', '.join(differ)})")
    workload = [k for k in WORKLOAD_KEYS if current.run.get(k) != baseline.run.get(k)]
    workload += ["workload"] if _generation(current) != _generation(baseline) else []
    return out + ([f"different workload ({', '.join(workload)})"] if workload else [])


def _generation(run: RunData) -> tuple:
    """The workload and what a generate run fed (an older folder has no key: it ran one inference)."""
    given = run.run.get("generate") if isinstance(run.run.get("generate"), dict) else {}
    return run.run.get("workload") or "infer", given.get("prompt_ids"), given.get("new_tokens")


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
