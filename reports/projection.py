"""Fit memory = fixed + per_session*S + weights_term per mode and project bigger deployments.

Why a fit: a sweep measures a few (sessions, memory) points; the question people ask is "what
do 8 sessions of a 4 GiB model cost?". The weights term is known physics, not a free
parameter: in heap mode every session holds its own copy (W*S), in mapped mode the page cache
holds one copy for everybody (W). Subtracting it leaves a straight line in S whose intercept
(fixed) and slope (per_session) least squares recovers, with its residuals as the error bar.
With fewer than two distinct S there is no line to fit, and we say so instead of guessing.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

from harness.core.metrics import FAIR_BY_KEY, fair_bytes, fair_figure, fair_key
from harness.core.schema import SummaryRow
from harness.core.units import fmt_bytes
from harness.core.vocab import MAPPED_PATH_STATES, EpState, Mode

GIB = 1024**3
#: (weights, sessions) projected when neither the run's weights nor a --project-to is known.
DEFAULT_PROJECTION = (4 * GIB, 8)
#: Default deployment: the measured model at this many times the largest S measured...
DEFAULT_SESSION_FACTOR = 2
#: ...and at least this many sessions.
DEFAULT_MIN_SESSIONS = 8

ASSUMPTIONS = (
    "memory is the summed PSS of the workers (private bytes where PSS is not measured, e.g. Windows; USS on Linux); "
    "shared pages the metric leaves out are added back once",
    "heap mode: every session holds its own copy of the weights; mapped mode: one copy in the "
    "page cache is shared by every session and process",
    "fixed and per-session overheads measured with this model stay the same for the bigger "
    "one (true of the runtime; activations and graph state grow with the model)",
    "sessions are spread over processes as in the sweep: per_session includes each process's "
    "own overhead divided by its sessions",
)


@dataclass
class ModeFit:
    """memory(S) = fixed + per_session*S + weights_term(S) for one mode, in bytes."""

    mode: str
    metric: str  # the fair memory figure: "pss" or "private" (`metrics.fair_key`)
    fixed_bytes: float
    per_session_bytes: float
    weights_bytes: int
    rms_residual_bytes: float
    max_residual_bytes: float
    points: list[tuple[int, int]] = field(default_factory=list)  # (S, measured bytes)

    def weights_term(self, sessions: int, weights: int | None = None) -> float:
        weights = self.weights_bytes if weights is None else weights
        return weights * sessions if self.mode == Mode.HEAP else weights

    def predict(self, sessions: int, weights: int | None = None) -> float:
        """Total memory of ``sessions`` sessions of a model with ``weights`` bytes."""
        return self.fixed_bytes + self.per_session_bytes * sessions + self.weights_term(sessions, weights)

    @property
    def marginal_bytes(self) -> float:
        """What one more session of this model costs."""
        return self.predict(2) - self.predict(1)


@dataclass
class SweepFit:
    """Per-mode fits, or per-mode reasons why there is none."""

    fits: dict[str, ModeFit]
    missing: dict[str, str]
    metric: str | None


def _sessions(row: SummaryRow) -> int:
    """Sessions whose memory the summed figures contain: only ok workers are summed."""
    return int(row.ok_workers or 0) * int(row.sessions_per_process or 1)


def _measured_weights_term(
    mode: str, metric: str, workers: int, sessions: int, weights: int, sole_is_private: bool
) -> int:
    """The weights bytes inside a measured sum (what the fit subtracts before the line)."""
    if mode == Mode.HEAP:
        return weights * sessions
    if metric == "pss":
        return weights
    # Private bytes (USS on Linux) count a page only while one process maps it: on Linux a lone
    # worker's mapping is "private"; on Windows private bytes never include file-backed views.
    return weights if (workers == 1 and sole_is_private) else 0


def took_mapped_path(row: SummaryRow) -> bool:
    """True only when every worker's EP state lets its mapped path count as mapped
    (`vocab.MAPPED_PATH_STATES`, the verdict's own rule) and none fell back: a group the EP
    turned mapping off for, retried, disabled per node or left without evidence would make the
    mapped law lie."""
    states = {EpState.of(state) for state in (row.ep_file_mapping or "").split("|")}
    return states <= set(MAPPED_PATH_STATES) and not (row.fallback_workers or 0)


def _least_squares(xs: list[float], ys: list[float]) -> tuple[float, float]:
    mean_x, mean_y = statistics.fmean(xs), statistics.fmean(ys)
    sxx = sum((x - mean_x) ** 2 for x in xs)
    slope = sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys, strict=True)) / sxx
    return mean_y - slope * mean_x, slope


def fit_sweep(summary: Iterable[SummaryRow], *, system: str = "Linux") -> SweepFit:
    """Fit each mode of a sweep on the fair figure of the groups with memory figures; ``system``
    says whether a lone mapping counts in private bytes."""
    summary = list(summary)
    metric = fair_key(fair_figure(s for s in summary if fair_bytes(s) is not None))
    if metric is None:
        return SweepFit({}, {"all": "no memory figures were measured"}, None)
    column = FAIR_BY_KEY[metric].column
    by_mode: dict[str, list[SummaryRow]] = defaultdict(list)
    for row in summary:
        if getattr(row, column) is not None and _sessions(row) > 0:
            by_mode[row.mode].append(row)
    fits: dict[str, ModeFit] = {}
    missing: dict[str, str] = {}
    for mode in sorted({s.mode for s in summary}):
        rows = by_mode.get(mode, [])
        if mode == Mode.MAPPED:
            off_path = [r for r in rows if not took_mapped_path(r)]
            rows = [r for r in rows if took_mapped_path(r)]
            if off_path and not rows:
                missing[mode] = (
                    "mapped mode never took the mapped path (EP file mapping: "
                    f"{off_path[0].ep_file_mapping or 'n/a'}, fall-backs: "
                    f"{sum(r.fallback_workers or 0 for r in off_path)}), so there is no mapped "
                    "law to fit"
                )
                continue
        distinct = sorted({_sessions(r) for r in rows})
        if len(distinct) < 2:
            shown = ", ".join(map(str, distinct)) or "none"
            missing[mode] = (
                f"needs a sweep: {mode} was measured at S = {shown} session(s) only; run with "
                "several process counts (e.g. --processes 1,2,4) to fit fixed and per-session "
                "memory"
            )
            continue
        weights = max(int(r.weights_bytes or 0) for r in rows)
        points = [(_sessions(r), int(getattr(r, column))) for r in rows]
        ys = [
            y - _measured_weights_term(mode, metric, int(r.ok_workers or 0), s, weights, system != "Windows")
            for r, (s, y) in zip(rows, points, strict=True)
        ]
        fixed, per_session = _least_squares([s for s, _ in points], ys)
        residuals = [y - (fixed + per_session * s) for (s, _), y in zip(points, ys, strict=True)]
        fits[mode] = ModeFit(
            mode=mode,
            metric=metric,
            fixed_bytes=fixed,
            per_session_bytes=per_session,
            weights_bytes=weights,
            rms_residual_bytes=math.sqrt(statistics.fmean(r * r for r in residuals)),
            max_residual_bytes=max(abs(r) for r in residuals),
            points=sorted(points),
        )
    return SweepFit(fits, missing, metric)


def consecutive_marginals(summary: Iterable[SummaryRow], metric: str) -> dict[str, list[tuple[int, int, float]]]:
    """Per mode, (S1, S2, bytes per extra session) between consecutive measured S.

    A model-free view of the marginal cost, to set beside the fit's slope (medians over
    repeats, so one noisy repeat does not make a step)."""
    column = FAIR_BY_KEY[metric].column
    grouped: dict[str, dict[int, list[int]]] = defaultdict(lambda: defaultdict(list))
    for row in summary:
        value = getattr(row, column)
        if value is not None and _sessions(row) > 0:
            grouped[row.mode][_sessions(row)].append(value)
    out: dict[str, list[tuple[int, int, float]]] = {}
    for mode, by_s in grouped.items():
        points = sorted((s, statistics.median(v)) for s, v in by_s.items())
        out[mode] = [(s1, s2, (y2 - y1) / (s2 - s1)) for (s1, y1), (s2, y2) in zip(points, points[1:], strict=False)]
    return out


@dataclass
class Projection:
    weights_bytes: int
    sessions: int
    bytes_by_mode: dict[str, float]
    lines: list[str]


def project(sweep: SweepFit, weights_bytes: int, sessions: int) -> Projection:
    """Memory of ``sessions`` sessions of a ``weights_bytes`` model in each fitted mode."""
    lines: list[str] = []
    predicted: dict[str, float] = {}
    for mode, fit in sorted(sweep.fits.items()):
        predicted[mode] = fit.predict(sessions, weights_bytes)
        lines.append(
            f"{mode}: {fmt_bytes(fit.fixed_bytes)} fixed + {sessions} x "
            f"{fmt_bytes(fit.per_session_bytes)} per session + weights "
            f"{fmt_bytes(fit.weights_term(sessions, weights_bytes))} = "
            f"{fmt_bytes(predicted[mode])} (fit error: RMS {fmt_bytes(fit.rms_residual_bytes)}, "
            f"max {fmt_bytes(fit.max_residual_bytes)})"
        )
    for mode, why in sorted(sweep.missing.items()):
        lines.append(f"{mode}: no projection, {why}")
    if set(Mode) <= predicted.keys():
        saved = predicted[Mode.HEAP] - predicted[Mode.MAPPED]
        lines.append(
            f"mapped saves {fmt_bytes(saved)} over heap for {sessions} sessions of a {fmt_bytes(weights_bytes)} model"
        )
    for mode, fit in sorted(sweep.fits.items()):
        if fit.fixed_bytes < 0 or fit.per_session_bytes < 0:
            lines.append(
                f"{mode}: the fit has a negative coefficient, so noise dominates this sweep; "
                "measure a wider range of process counts before trusting it"
            )
    return Projection(weights_bytes, sessions, predicted, lines)


def default_projection(summary: Iterable[SummaryRow], weights_bytes: int | None) -> tuple[int, int]:
    """(weights, sessions) the report projects to when nobody asked: the measured model at twice
    the largest S measured (at least 8 sessions). The weights term is then exact and only the
    fitted overheads are extrapolated, the honest question for "what would more sessions of
    this model cost"; ``--project-to 8x4GiB`` asks about another model."""
    rows = list(summary)
    largest = max((_sessions(r) for r in rows), default=0)
    sessions = max(DEFAULT_MIN_SESSIONS, DEFAULT_SESSION_FACTOR * largest)
    weights = weights_bytes or max((int(r.weights_bytes or 0) for r in rows), default=0) or DEFAULT_PROJECTION[0]
    return weights, sessions


def projection_text(
    summary: Iterable[SummaryRow],
    *,
    weights_bytes: int = DEFAULT_PROJECTION[0],
    sessions: int = DEFAULT_PROJECTION[1],
    system: str = "Linux",
) -> list[str]:
    """Plain-language projection with its assumptions, ready for the report or a terminal."""
    summary = list(summary)
    sweep = fit_sweep(summary, system=system)
    peak = start_up_peak_lines(summary, weights_bytes, sessions)
    if not sweep.fits:
        reasons = "; ".join(f"{m}: {why}" for m, why in sorted(sweep.missing.items()))
        return [f"No projection: {reasons}.", *peak]
    head = f"Projection for {sessions} sessions of a {fmt_bytes(weights_bytes)} model:"
    return [head, *project(sweep, weights_bytes, sessions).lines, *(f"Assumes {a}." for a in ASSUMPTIONS), *peak]


def start_up_peak_lines(summary: list[SummaryRow], weights_bytes: int, sessions: int) -> list[str]:
    """What a load fails at: the start-up peak of the projected deployment (`harness.core.fits`),
    from the headline's first complete pair (nothing without one)."""
    from harness.core.fits import peak_projection
    from harness.core.summary import complete_pair, headline_pairs, primary_target

    target = primary_target(summary)
    pairs = [p for p in headline_pairs(s for s in summary if s.target == target) if complete_pair(*p)]
    return peak_projection(*pairs[0], weights_bytes, sessions) if pairs else []
