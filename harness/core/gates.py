"""Pass/fail gates over a run's headline figures (``METRIC OP NUMBER [if METRIC OP NUMBER [and
...]]``, metrics from `harness.core.metrics`): parse, evaluate, defaults per target. A figure not
measured fails its gate saying why; a condition that does not hold skips it; a timing gate is
judged on its repeats' interval (`harness.core.timing`). docs/gates.md has the rules.
"""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from harness.core.errors import InputError
from harness.core.metrics import FIGURES, OTHER_METRICS, PAIR_METRICS, is_timing
from harness.core.schema import MODES, SummaryRow
from harness.core.summary import headline, headline_with_reasons
from harness.core.timing import judge_interval
from harness.core.units import parse_size
from harness.core.vocab import PASSED_GATE_STATUSES, UNDECIDED_GATE_STATUSES, GateStatus

OPS: dict[str, Callable[[float, float], bool]] = {
    "<=": operator.le,
    ">=": operator.ge,
    "==": operator.eq,
    "!=": operator.ne,
    "<": operator.lt,
    ">": operator.gt,
}
#: Figures of the run itself that gates may use besides the headline ratios.
RUN_FACTS = ("weights_bytes",)

_COND = re.compile(r"\s*([A-Za-z_][A-Za-z0-9_]*)\s*(<=|>=|==|!=|<|>)\s*([^\s<>=!]+)\s*")

#: What a run is judged by when it recorded no default gates of its own (older runs):
#: correctness does not depend on the platform.
BASE_DEFAULT_GATES: tuple[tuple[str, str], ...] = (
    ("failed_workers==0", "A crash, hang, exception or wrong output is a defect in either mode."),
)


@dataclass(frozen=True)
class Condition:
    metric: str
    op: str
    threshold: float
    text: str = ""  # the threshold as written ("128MiB"), for messages

    def holds(self, value: float | int | None) -> bool | None:
        """True/False, or None when the value was not measured."""
        return None if value is None else OPS[self.op](value, self.threshold)

    def __str__(self) -> str:
        return f"{self.metric}{self.op}{self.text or format(self.threshold, 'g')}"


@dataclass(frozen=True)
class Gate:
    expr: str
    check: Condition
    when: tuple[Condition, ...] = ()
    why: str = ""


@dataclass(frozen=True)
class GateResult:
    gate: Gate
    status: GateStatus  # contended: a timing gate timed on a busy machine
    value: float | int | None
    reason: str
    interval: tuple[float, float] | None = None  # a timing gate's 95 % interval of the ratio
    repeats: int | None = None  # the repeats a timing gate was judged on
    #: an inconclusive timing gate: about how many repeats would decide it at its spread (a
    #: projection, `harness.core.timing.judge_interval`); None otherwise or beyond reach
    repeats_to_decide: int | None = None
    default: bool = False  # one of the target's default gates (not asked for by the user)

    @property
    def passed(self) -> bool:
        """Held or did not apply; an inconclusive gate is never counted as passed."""
        return self.status in PASSED_GATE_STATUSES

    @property
    def failed(self) -> bool:
        return self.status == GateStatus.FAIL

    @property
    def inconclusive(self) -> bool:
        """Undecided: the interval straddles the threshold, or the timing was contended."""
        return self.status in UNDECIDED_GATE_STATUSES


def known_metrics() -> list[str]:
    """Names a gate may use: every key `headline` can return, plus `RUN_FACTS`.

    Probed on a minimal mapped/heap pair so new headline keys are picked up automatically."""
    probe = [SummaryRow(mode=m, processes=1, sessions_per_process=1, repeat=0) for m in MODES]
    return [*headline(probe), *RUN_FACTS]


def gate_values(summary: Iterable[SummaryRow]) -> dict[str, float | int | None]:
    """The figures gates are evaluated against: `headline` plus the run facts."""
    return gate_values_with_reasons(summary)[0]


def gate_values_with_reasons(summary: Iterable[SummaryRow]) -> tuple[dict[str, float | int | None], dict[str, str]]:
    """(`gate_values`, why each missing value is missing): a failing gate says why."""
    summary = list(summary)
    values, reasons = headline_with_reasons(summary)
    values = dict(values)
    values["weights_bytes"] = max((s.weights_bytes or 0 for s in summary), default=0) or None
    return values, reasons


def needs_both_modes(gate: Gate) -> bool:
    """True when the gate's figure compares mapped with heap (a ratio, weight copies)."""
    return gate.check.metric in PAIR_METRICS


def _number(text: str, expr: str, metric: str) -> float:
    """The threshold: a plain finite number, or a size for a ``*_bytes`` metric (``128MiB``);
    a unit on a ratio or a count is a mistake, refused."""
    unit_free = re.fullmatch(r"[-+]?(\d+(\.\d*)?|\.\d+)([eE][-+]?\d+)?", text, re.ASCII)
    if unit_free:
        value = float(text)
        if not math.isfinite(value):
            raise _bad(expr, f"{text!r} is not a finite number")
        return value
    if metric.endswith("_bytes"):
        try:
            return float(parse_size(text))
        except InputError:
            pass
    units = "KiB..TiB, KB..TB" if metric.endswith("_bytes") else "none"
    raise _bad(expr, f"{text!r} is not a number for {metric} (units allowed: {units})")


def _bad(expr: str, why: str) -> InputError:
    return InputError(f"bad gate {expr!r}: {why}; known metrics: {', '.join(known_metrics())}")


def _condition(text: str, expr: str, known: list[str]) -> Condition:
    match = _COND.fullmatch(text)
    if not match:
        raise _bad(expr, f"expected METRIC OP NUMBER with OP one of {' '.join(OPS)}, got {text!r}")
    metric, op, number = match.groups()
    if metric not in known:
        raise _bad(expr, f"unknown metric {metric!r}")
    return Condition(metric, op, _number(number, expr, metric), number)


def parse_gate(expr: str, why: str = "") -> Gate:
    """``"mapped_pss_ratio<=0.35"`` -> `Gate`; `InputError` (a ValueError) when malformed."""
    text = expr.strip()
    if not text:
        raise _bad(expr, "empty expression")
    known = known_metrics()
    check_text, _, when_text = text.partition(" if ")
    when: list[Condition] = []
    if when_text:
        when = [_condition(part, expr, known) for part in re.split(r"\s+and\s+", when_text)]
    return Gate(expr=text, check=_condition(check_text, expr, known), when=tuple(when), why=why)


def parse_gates(exprs: Iterable[str]) -> list[Gate]:
    return [parse_gate(e) for e in exprs]


def read_gates_text(text: str) -> list[str]:
    """One expression per line; blank lines and ``#`` comments (whole or trailing) ignored.
    A UTF-8 byte-order mark (Windows editors write one) and CRLF line ends are fine."""
    exprs = [line.split("#", 1)[0].strip() for line in text.lstrip("\ufeff").splitlines()]
    return [e for e in exprs if e]


def read_gates_file(path: Path | str) -> list[str]:
    """The expressions of a gates file, each checked: InputError (one line, naming the file and
    line) for an unreadable file, a binary file or a bad expression."""
    from harness.core.inputfiles import GATES_FILE_MAX_BYTES, read_text_bounded

    path = Path(path)
    text = read_text_bounded(path, "gates file", GATES_FILE_MAX_BYTES)
    if "\x00" in text:
        raise InputError(f"gates file {path}: not a text file (it holds NUL bytes)")
    exprs = read_gates_text(text)
    for number, expr in enumerate(exprs, 1):
        try:
            parse_gate(expr)
        except InputError as err:
            first = re.match(r"\s*([A-Za-z_]\w*)", expr, re.ASCII)
            if first and first.group(1) in known_metrics() and len(expr) <= 200:
                raise InputError(f"gates file {path}, expression {number}: {err}") from None
            # a line that is no gate at all is not quoted: the file may be any file (a secret's)
            raise InputError(
                f"gates file {path}, expression {number}: not a gate expression (it does not start with a "
                f"known metric; the line is not quoted); known metrics: {', '.join(known_metrics())}"
            ) from None
    return exprs


def default_gates(meta: dict | None) -> list[Gate]:
    """The gates a run is judged by unless --no-default-gates: the ones its target declared,
    recorded in the run's metadata (``default_gates``), so a report re-rendered later judges
    the run as the run itself did. Runs without that record get `BASE_DEFAULT_GATES`."""
    recorded = (meta or {}).get("default_gates")
    if recorded is None:
        pairs = list(BASE_DEFAULT_GATES)
    else:
        pairs = [(g["expr"], g.get("why", "")) for g in recorded]
    return [parse_gate(expr, why) for expr, why in pairs]


def _fmt(metric: str, value: float | int) -> str:
    if metric.endswith("_bytes"):
        from harness.core.units import fmt_bytes

        return fmt_bytes(value)
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def evaluate_gate(
    gate: Gate,
    values: dict[str, float | int | None],
    reasons: dict[str, str] | None = None,
    repeats: dict[str, list[float]] | None = None,
) -> GateResult:
    """Check one gate; the reason says what was compared, or why it was skipped or failed
    (``reasons``: why a value is missing, e.g. its group was incomplete). ``repeats``: the
    per-repeat values of the timing metrics (`harness.core.timing.timing_repeats`); given, a
    timing gate is judged on their interval."""
    for cond in gate.when:
        held = cond.holds(values.get(cond.metric))
        if held is None:
            return GateResult(gate, GateStatus.SKIP, None, f"skipped: {cond.metric} not measured")
        if not held:
            shown = _fmt(cond.metric, values[cond.metric])  # type: ignore[arg-type]
            return GateResult(gate, GateStatus.SKIP, None, f"skipped: {cond.metric} = {shown}, needs {cond}")
    metric = gate.check.metric
    value = values.get(metric)
    busy = contended(gate, value, values)
    if busy is not None:
        return busy
    if value is None:
        why = (reasons or {}).get(metric)
        return GateResult(gate, GateStatus.FAIL, None, f"not measured: {why}" if why else "not measured")
    if repeats is not None and is_timing(metric):
        return _timing_result(gate, value, repeats.get(metric, []))
    ok = bool(gate.check.holds(value))
    limit = f"{gate.check.op} {gate.check.text or gate.check.threshold}"
    reason = f"{metric} = {_fmt(metric, value)}" + (f" (required {limit})" if ok else f", but required {limit}")
    return GateResult(gate, GateStatus.PASS if ok else GateStatus.FAIL, value, reason)


def _timing_result(gate: Gate, value: float | int, repeats: list[float]) -> GateResult:
    """A timing gate judged on the 95 % interval of its per-repeat ratios."""
    verdict = judge_interval(gate.check.op, gate.check.threshold, repeats)
    limit = f"{gate.check.op} {gate.check.text or gate.check.threshold}"
    reason = f"{gate.check.metric} = {_fmt(gate.check.metric, value)} (median), {verdict.words}; required {limit}"
    interval = verdict.interval
    bounds = (interval.low, interval.high) if interval is not None else None
    return GateResult(
        gate,
        verdict.status,
        value,
        reason,
        interval=bounds,
        repeats=len(repeats),
        repeats_to_decide=verdict.repeats_to_decide,
    )


def contended(gate: Gate, value: float | int | None, values: dict[str, float | int | None]) -> GateResult | None:
    """A timing gate whose headline groups were timed on a contended machine (issue 18): status
    "contended", never a pass (undecided, as an inconclusive gate is; memory gates keep their
    verdicts); None otherwise."""
    groups = values.get("contended_groups")
    if not is_timing(gate.check.metric) or not groups:
        return None
    shown = f"{gate.check.metric} = {_fmt(gate.check.metric, value)}" if value is not None else "no value"
    return GateResult(
        gate, GateStatus.CONTENDED, value, f"contended: {shown}, timed while {groups} headline group(s) were contended"
    )


def evaluate(
    gates: Iterable[Gate],
    values: dict[str, float | int | None],
    reasons: dict[str, str] | None = None,
    repeats: dict[str, list[float]] | None = None,
) -> list[GateResult]:
    return [evaluate_gate(g, values, reasons, repeats) for g in gates]


def metrics_epilog() -> str:
    """The gate metrics, one a line with what each means (for run --help and report --help)."""
    lines = ["gate metrics (headline values at the largest N x M measured in both modes, median over repeats):"]
    for figure in (f for f in FIGURES if f.ratio):
        lines.append(f"  {figure.ratio:24} mapped/heap of the {figure.label} (summary column {figure.column})")
    for name, text, _ in OTHER_METRICS:
        lines.append(f"  {name:24} {text}")
    for name in RUN_FACTS:
        lines.append(f"  {name:24} size of the weights file (bytes; units allowed in gates: 128MiB)")
    lines.append(
        "gate syntax: METRIC OP NUMBER [if METRIC OP NUMBER [and ...]], e.g. 'mapped_uss_ratio<=0.5 if processes>=2'"
    )
    lines.append(
        "timing gates (init, create, latency and peer ratios) are judged on the 95% interval over repeats, "
        "the threshold read within the 5% timing margin (X<=T: pass when the upper bound is at most T x 1.05, "
        "fail when the lower bound is above it), else inconclusive (never a pass)"
    )
    return "\n".join(lines)
