"""What `harness.core.compare` compares: each figure of a run against its baseline (a
`Metric`): how it is read off a (mapped, heap) pair of summary rows, its unit and kind, which
direction is better, whether a change for the worse is a regression, and why other processes
can move it (then no change is called on it)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .schema import SummaryRow
from .summary import median, median_ratio, ratio
from .vocab import Mode

Pair = tuple[SummaryRow, SummaryRow]


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
    #: A run's value from its pairs, as the headline defines it (None: the median of the values).
    summary: Callable[[list[Pair]], float | None] | None = None
    #: Why other processes move this figure, so no change is called on it ("": none can).
    foreign: str = ""


def _column(mode: str, column: str) -> Callable[[SummaryRow, SummaryRow], float | None]:
    return lambda m, h: getattr(m if mode == Mode.MAPPED else h, column)


def _ratio(column: str) -> Callable[[SummaryRow, SummaryRow], float | None]:
    return lambda m, h: ratio(getattr(m, column), getattr(h, column))


def _saving(column: str) -> Callable[[SummaryRow, SummaryRow], float | None]:
    def value(m: SummaryRow, h: SummaryRow) -> float | None:
        a, b = getattr(m, column), getattr(h, column)
        return None if a is None or b is None else b - a

    return value


def _median_saving(column: str) -> Callable[[list[Pair]], float | None]:
    """The headline's saving: heap's median minus mapped's, over the pairs that have both."""

    def value(pairs: list[Pair]) -> float | None:
        usable = [(m, h) for m, h in pairs if getattr(m, column) is not None and getattr(h, column) is not None]
        a, b = median(getattr(m, column) for m, _ in usable), median(getattr(h, column) for _, h in usable)
        return None if a is None or b is None else b - a

    return value


#: Why no change is called on a PSS figure (the module docstring has the measurement).
PSS_FOREIGN = "other processes sharing ORT's pages move PSS"


def metrics_for(metric: str | None) -> list[Metric]:
    """The compared figures; ``metric`` is the fair memory figure both runs have (pss/private).
    PSS figures are shown, never called (`PSS_FOREIGN`); USS and the split against the control
    worker are the memory figures changes are called on."""
    fair = metric or "private"
    label = "PSS" if fair == "pss" else "private bytes"
    column = f"sum_{fair}_bytes"
    foreign = PSS_FOREIGN if fair == "pss" else ""
    uss = "sum_uss_bytes"
    return [
        Metric("mapped_fair", f"mapped summed {label}", "bytes", _column(Mode.MAPPED, column), foreign=foreign),
        Metric("heap_fair", f"heap summed {label}", "bytes", _column(Mode.HEAP, column), foreign=foreign),
        Metric(
            "saving",
            f"saving (heap - mapped {label})",
            "bytes",
            _saving(column),
            lower_is_better=False,
            regression=not foreign,
            summary=_median_saving(column),
            foreign=foreign,
        ),
        Metric("mapped_uss", "mapped summed USS", "bytes", _column(Mode.MAPPED, uss), regression=True),
        Metric("heap_uss", "heap summed USS", "bytes", _column(Mode.HEAP, uss)),
        Metric(
            "saving_uss",
            "saving (heap - mapped USS)",
            "bytes",
            _saving(uss),
            lower_is_better=False,
            regression=True,
            summary=_median_saving(uss),
        ),
        Metric(
            "mapped_copies",
            "mapped weight copies per worker",
            "bytes",
            _column(Mode.MAPPED, "copied_bytes_median"),
            regression=True,
        ),
        Metric("heap_copies", "heap weight copies per worker", "bytes", _column(Mode.HEAP, "copied_bytes_median")),
        Metric("runtime", "control worker (runtime)", "bytes", _column(Mode.MAPPED, "runtime_bytes")),
        Metric(
            "mapped_init", "mapped median init", "s", _column(Mode.MAPPED, "init_s_median"), "time", regression=True
        ),
        Metric("heap_init", "heap median init", "s", _column(Mode.HEAP, "init_s_median"), "time"),
        ratio_metric(f"mapped_{fair}_ratio", f"{label} ratio mapped/heap", column, foreign=foreign),
        ratio_metric("mapped_uss_ratio", "USS ratio mapped/heap", uss),
        ratio_metric("init_ratio", "init ratio mapped/heap", "init_s_median", "time", regression=True),
        *startup_metrics(),
    ]


def startup_metrics() -> list[Metric]:
    """Start-up peak, init + first inference and latency (issue 20): per mode and as ratios; the
    mapped mode's are regression figures (its memory, start-up and latency)."""
    out = []
    for mode in Mode:
        mine = mode == Mode.MAPPED
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
        ratio_metric("peak_private_ratio", "start-up peak ratio mapped/heap", "max_peak_private_bytes"),
        ratio_metric("startup_ratio", "init + first inference ratio mapped/heap", "startup_s_median", "time"),
        ratio_metric("first_run_ratio", "first inference ratio mapped/heap", "first_run_s_median", "time"),
        ratio_metric("latency_p50_ratio", "latency p50 ratio mapped/heap", "latency_p50_s_median", "time"),
    ]


def ratio_metric(key: str, label: str, column: str, kind: str = "memory", **more: Any) -> Metric:
    """A mapped/heap ratio: per repeat for the test, the ratio of the two medians as the value."""
    return Metric(key, label, "ratio", _ratio(column), kind, summary=lambda pairs: median_ratio(pairs, column), **more)
