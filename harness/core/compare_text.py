"""A `Comparison` shown three ways from the same calls: display cells (terminal and
report.html), plain-text lines, and the ``--json`` document (every figure with both values,
the delta, the p-value, the threshold and the call), plus one line per regression for
``--fail-on-regression``.

JSON format (``format_version`` 1; keys are only ever added within a version):
``{format_version, kind: "comparison", test, alpha, min_repeats, min_effect, comparisons: [
{baseline, current, at, warnings, versions, regressions: [key], likely_cause (the package
versions that differ when a change is called, else null), figures: [{key, label, unit,
kind, baseline: {value, repeats}, current: {value, repeats}, delta, percent, p_value, scale,
threshold, call, not_called_because, changed, regression}]}]}`` (``scale``: "log" when the
test ran on log values; ``not_called_because``: why other processes move the figure, PSS's,
else null). Bytes and seconds are plain numbers; ``percent`` is a fraction (0.05 = +5 %);
``p_value`` is null below 2 repeats a side.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .compare import Change, Comparison, MinEffect
from .stats import ALPHA, MIN_REPEATS
from .units import fmt_bytes, fmt_percent, fmt_value

COMPARISON_FORMAT_VERSION = 1
TEST_NAME = "Welch's t-test, two-sided, on per-repeat values"


def fmt_range(values: Sequence[float], unit: str) -> str:
    if len(values) < 2:
        return "-"
    return f"{fmt_value(min(values), unit)} .. {fmt_value(max(values), unit)}"


def fmt_p(p: float | None) -> str:
    return "-" if p is None else "<0.0001" if p < 1e-4 else f"{p:.4f}"


def _threshold_text(change: Change) -> str:
    threshold = change.threshold
    return "-" if threshold is None else fmt_value(threshold, change.metric.unit)


def comparison_rows(comparison: Comparison) -> list[dict[str, Any]]:
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
            "repeats": f"{len(c.baseline)} / {len(c.current)}",
            "p": fmt_p(c.p_value),
            "threshold": _threshold_text(c),
            "call": c.call + (" (REGRESSION)" if c.regressed else ""),
            "css": "worse" if c.regressed else "changed" if c.changed else "",
        }
        for c in comparison.changes
    ]


def rule_text(min_effect: MinEffect) -> str:
    """How a change is called, in one sentence (terminal, report, --help)."""
    return (
        f"a change is called when {TEST_NAME} gives p < {ALPHA:g} and the value moved by at least the "
        f"minimum effect (memory {min_effect.memory:.1%} and {fmt_bytes(min_effect.memory_bytes)}, time "
        f"{min_effect.time:.1%}); below {MIN_REPEATS} repeats in either run none is called; memory changes are "
        "called on USS, weight copies and start-up peaks, never on PSS (other processes move it)"
    )


#: Version keys that name the machine, not a package: never the likely cause of a change.
MACHINE_KEYS = frozenset(("hostname", "system", "arch", "cpu"))


def likely_cause(comparison: Comparison) -> str:
    """What most likely caused the changes called ("" when none is called): the package
    versions (and the commit) that differ between the two runs, or that none does."""
    if not any(c.changed for c in comparison.changes):
        return ""
    differing = [f"{k} {b} -> {c}" for k, b, c in comparison.versions if b != c and k not in MACHINE_KEYS]
    if differing:
        return "likely cause: " + "; ".join(differing)
    return "likely cause: not a package (no version differs): the machine, or what it ran beside the runs"


def comparison_lines(comparison: Comparison) -> list[str]:
    """Plain-text table, like ``pyperf compare_to``: baseline, current, delta, change, p, call."""
    head = ("figure", "baseline", "current", "delta", "change", "repeats", "p", "threshold", "call")
    rows = [
        (
            r["label"],
            r["baseline"],
            r["current"],
            r["delta"],
            r["percent"],
            r["repeats"],
            r["p"],
            r["threshold"],
            r["call"],
        )
        for r in comparison_rows(comparison)
    ]
    widths = [max(len(str(row[i])) for row in [head, *rows]) for i in range(len(head))]
    last = len(head) - 1

    def line(row) -> str:
        cells = [str(row[0]).ljust(widths[0])]
        cells += [str(c).rjust(w) for c, w in zip(row[1:last], widths[1:last], strict=True)]
        return "  ".join([*cells, str(row[last])]).rstrip()

    base, cur = comparison.baseline, comparison.current
    out = [
        f"baseline: {base.run_id} ({base.target}); current: {cur.run_id} ({cur.target}); compared at {comparison.at}",
        line(head),
        *(line(r) for r in rows),
    ]
    differing = [(k, b, c) for k, b, c in comparison.versions if b != c]
    cause = likely_cause(comparison)
    if cause:
        out.append(cause)
    elif differing:
        out.append("versions that differ: " + "; ".join(f"{k} {b} -> {c}" for k, b, c in differing))
    out += [f"warning: {w}" for w in comparison.warnings]
    out.append(f"rule: {rule_text(comparison.min_effect)}")
    return out


def regression_lines(comparison: Comparison) -> list[str]:
    """One line per regressed figure: what, both values, the delta, p and the threshold."""
    out = []
    cause = likely_cause(comparison)
    for c in comparison.regressions:
        unit = c.metric.unit
        out.append(
            f"regression [{comparison.current.run_id} vs {comparison.baseline.run_id}]: {c.metric.label} {c.call}: "
            f"{fmt_value(c.baseline_value, unit)} -> {fmt_value(c.current_value, unit)} "
            f"({fmt_value(c.delta, unit, signed=True)}, {fmt_percent(c.percent, signed=True)}), "
            f"p{'' if fmt_p(c.p_value).startswith('<') else '='}{fmt_p(c.p_value)}, minimum effect {_threshold_text(c)}"
            f"; {cause}"
        )
    return out


def _figure(change: Change) -> dict[str, Any]:
    m = change.metric
    return {
        "key": m.key,
        "label": m.label,
        "unit": m.unit,
        "kind": m.kind,
        "baseline": {"value": change.baseline_value, "repeats": list(change.baseline)},
        "current": {"value": change.current_value, "repeats": list(change.current)},
        "delta": change.delta,
        "percent": change.percent,
        "p_value": change.p_value,
        "scale": change.scale,
        "threshold": change.threshold,
        "call": change.call,
        "not_called_because": m.foreign or None,
        "changed": change.changed,
        "regression": change.regressed,
    }


def comparison_document(comparisons: Sequence[Comparison]) -> dict[str, Any]:
    """The ``report --json`` content (see the module docstring)."""
    min_effect = comparisons[0].min_effect if comparisons else MinEffect()
    return {
        "format_version": COMPARISON_FORMAT_VERSION,
        "kind": "comparison",
        "test": TEST_NAME,
        "alpha": ALPHA,
        "min_repeats": MIN_REPEATS,
        "min_effect": min_effect.as_dict(),
        "comparisons": [
            {
                "baseline": c.baseline.run_id,
                "current": c.current.run_id,
                "at": c.at,
                "warnings": list(c.warnings),
                "versions": [{"name": k, "baseline": b, "current": v} for k, b, v in c.versions],
                "regressions": [x.metric.key for x in c.regressions],
                "likely_cause": likely_cause(c) or None,
                "figures": [_figure(x) for x in c.changes],
            }
            for c in comparisons
        ],
    }
