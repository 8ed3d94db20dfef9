"""What `harness.core.compare` compares, derived from `metrics.FIGURES`: each figure of a run
against its baseline (a `Metric`): how it is read off a (mapped, heap) pair, which direction is
better, whether a change for the worse is a regression, and why other processes can move it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from .metrics import FAIR, FIGURES, Figure
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
    optional: bool = False  # shown only when either run measured it


def _column(mode: str, column: str) -> Callable[[SummaryRow, SummaryRow], float | None]:
    return lambda m, h: getattr(m if mode == Mode.MAPPED else h, column)


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


#: Why no change is called on a PSS figure (`harness.core.compare`'s docstring has the measurement).
PSS_FOREIGN = "other processes sharing ORT's pages move PSS"


def _kind(figure: Figure) -> str:
    return "time" if figure.timing else "memory"


def per_mode(figure: Figure, stem: str, foreign: str = "", judges: bool = True) -> list[Metric]:
    """Its mapped and heap values (``judges``: the mapped one judges the feature), and the saving
    if declared (it judges the feature unless other processes move it)."""
    if figure.once:
        return [Metric(stem, figure.label, figure.unit, _column(Mode.MAPPED, figure.column), optional=True)]
    out = [
        Metric(
            f"{mode}_{stem}", f"{mode} {figure.label}", figure.unit, _column(mode, figure.column), _kind(figure),
            not figure.higher_is_better, regression=judges and mode == Mode.MAPPED, foreign=foreign,
            optional=not figure.always,
        )
        for mode in Mode
    ]  # fmt: skip
    if figure.saving:
        key = f"saving_{stem}" if judges else "saving"  # the fair figure's is the saving
        label = f"saving (heap - mapped {figure.name})"
        saving = _saving(figure.column)
        summary = _median_saving(figure.column)
        out.append(Metric(key, label, figure.unit, saving, "memory", False, not foreign, summary, foreign))
    return out


def ratio_metric(figure: Figure, foreign: str = "") -> Metric:
    """A mapped/heap ratio: per repeat for the test, the ratio of the two medians as the value."""
    column = figure.column
    return Metric(
        figure.ratio,
        f"{figure.name} ratio mapped/heap",
        "ratio",
        lambda m, h: ratio(getattr(m, column), getattr(h, column)),
        _kind(figure),
        regression=figure.ratio_regression,
        summary=lambda pairs: median_ratio(pairs, column),
        foreign=foreign,
        optional=not figure.always and not foreign,
    )


def metrics_for(fair: Figure | None) -> list[Metric]:
    """The compared figures; ``fair`` is the fair memory figure both runs have (`metrics.FAIR`;
    None: private bytes). PSS figures are shown, never called (`PSS_FOREIGN`)."""
    fair = replace(fair or FAIR[-1], saving=True, always=True)
    foreign = PSS_FOREIGN if fair.column == FAIR[0].column else ""
    compared = [f for f in FIGURES if f.compare]
    return [
        *per_mode(fair, "fair", foreign, judges=False),
        *(m for f in compared for m in per_mode(f, f.compare)),
        ratio_metric(fair, foreign),
        *(ratio_metric(f) for f in FIGURES if f.compare_ratio),
    ]
