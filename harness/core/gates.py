"""Pass/fail gates over a run's headline figures: parse, evaluate, defaults per target.

A gate is ``METRIC OP NUMBER`` (ops ``<= < >= > == !=``), optionally followed by
``if METRIC OP NUMBER [and ...]``: a gate whose condition does not hold, or cannot be checked,
is *skipped* rather than failed, so e.g. a sharing gate only applies once two processes exist.
Metric names are the keys of `harness.summary.headline` plus ``weights_bytes`` (the model's
weights size: every saving the feature makes is in proportion to it). Numbers may carry a
size unit (``128MiB``) or a time unit (``50ms``). A measured value of ``None`` fails a gate
with the reason "not measured": a gate that cannot see its figure must not pass silently.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from harness.core.errors import InputError
from harness.core.schema import MODES, SummaryRow
from harness.core.summary import headline
from harness.core.units import parse_size

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

# Default gates for the cpu target, each with the physics that sets its threshold. A worker's
# own overhead O (Python + numpy + onnxruntime + one session) measured ~26 MiB of USS and
# ~34 MiB of PSS on Linux x86_64 (2026-11); the weights W are shared in mapped mode and copied
# per session in heap mode. Measured there with W=256 MiB, N=4: USS ratio 0.09, PSS ratio 0.33,
# init ratio 0.02-0.07. The saving gates only apply once W clearly exceeds O (W >= 128 MiB)
# and, for memory, once two processes share the file: below that the ratios are honest but
# small. system_delta_ratio gets no gate: the machine's available memory moves with everything
# else running (it even went negative between repeats), so it is reported, not judged.
CPU_DEFAULT_GATES: tuple[tuple[str, str], ...] = (
    (
        "failed_workers==0",
        "A crash, hang, exception or wrong output is a defect in either mode.",
    ),
    (
        "fallback_workers==0",
        "The cpu target maps a local file on a healthy disk: a fall-back to the heap means the "
        "mapping path broke (skipped for runs that inject mapping failures).",
    ),
    (
        "mapped_uss_ratio<=0.5 if processes>=2 and weights_bytes>=128MiB",
        "Once two processes share the mapping its pages leave every worker's USS, so the ratio "
        "is about O/(O+W): ~0.17 at W=128 MiB, O=26 MiB. Above 0.5 the weights are not shared.",
    ),
    (
        "mapped_pss_ratio<=0.8 if processes>=2 and weights_bytes>=128MiB",
        "PSS charges a shared page 1/N to each of N sharers: the ratio is (W/N+O)/(W+O), about "
        "0.6 at N=2, W=128 MiB, O=34 MiB; 0.8 leaves room for noise and still catches no "
        "sharing (~1.0).",
    ),
    (
        "init_ratio<=0.5 if weights_bytes>=128MiB",
        "Mapping costs the same whatever the weights size while the heap path reads every byte "
        "(256 MiB took ~0.5 s per worker vs ~15 ms mapped); session creation is common to both "
        "and workers contend for the disk, hence 0.5 rather than ~0.",
    ),
)
#: Every target gets at least this one: correctness does not depend on the platform.
BASE_DEFAULT_GATES: tuple[tuple[str, str], ...] = CPU_DEFAULT_GATES[:1]


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
    status: str  # "pass" | "fail" | "skip"
    value: float | int | None
    reason: str

    @property
    def passed(self) -> bool:
        return self.status != "fail"


def known_metrics() -> list[str]:
    """Names a gate may use: every key `headline` can return, plus `RUN_FACTS`.

    Probed on a minimal mapped/heap pair so new headline keys are picked up automatically."""
    probe = [SummaryRow(mode=m, processes=1, sessions_per_process=1, repeat=0) for m in MODES]
    return [*headline(probe), *RUN_FACTS]


def gate_values(summary: Iterable[SummaryRow]) -> dict[str, float | int | None]:
    """The figures gates are evaluated against: `headline` plus the run facts."""
    summary = list(summary)
    values = dict(headline(summary))
    values["weights_bytes"] = max((s.weights_bytes or 0 for s in summary), default=0) or None
    return values


def _number(text: str, expr: str) -> float:
    unit_free = re.fullmatch(r"[-+]?(\d+(\.\d*)?|\.\d+)([eE][-+]?\d+)?", text)
    if unit_free:
        return float(text)
    timed = re.fullmatch(r"(\d+(?:\.\d+)?)(ms|s)", text)
    if timed:
        return float(timed.group(1)) / (1000 if timed.group(2) == "ms" else 1)
    try:
        return float(parse_size(text))
    except InputError:
        raise _bad(expr, f"{text!r} is not a number (units allowed: KiB MiB GiB ms s)") from None


def _bad(expr: str, why: str) -> InputError:
    return InputError(f"bad gate {expr!r}: {why}; known metrics: {', '.join(known_metrics())}")


def _condition(text: str, expr: str, known: list[str]) -> Condition:
    match = _COND.fullmatch(text)
    if not match:
        raise _bad(expr, f"expected METRIC OP NUMBER with OP one of {' '.join(OPS)}, got {text!r}")
    metric, op, number = match.groups()
    if metric not in known:
        raise _bad(expr, f"unknown metric {metric!r}")
    return Condition(metric, op, _number(number, expr), number)


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


def read_gates_file(path: Path | str) -> list[str]:
    """One expression per line; blank lines and ``#`` comments (whole or trailing) ignored."""
    path = Path(path)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise InputError(f"gates file {path}: {exc.strerror or exc}") from None
    exprs = [line.split("#", 1)[0].strip() for line in lines]
    return [e for e in exprs if e]


def default_gates(target: str, run: dict | None = None) -> list[Gate]:
    """The gates a run of ``target`` gets unless ``--no-default-gates``.

    Only the cpu target has physics we can pin down here (the mapping is ours and always
    available); other targets depend on the device and SDK, so they get the correctness gate
    only. A run that injects mapping failures expects fall-backs: correctness only, too."""
    injected = bool((run or {}).get("map_failures"))
    pairs = CPU_DEFAULT_GATES if target == "cpu" and not injected else BASE_DEFAULT_GATES
    return [parse_gate(expr, why) for expr, why in pairs]


def _fmt(metric: str, value: float | int) -> str:
    if metric.endswith("_bytes"):
        from harness.core.units import fmt_bytes

        return fmt_bytes(value)
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def evaluate_gate(gate: Gate, values: dict[str, float | int | None]) -> GateResult:
    """Check one gate; the reason says what was compared, or why it was skipped or failed."""
    for cond in gate.when:
        held = cond.holds(values.get(cond.metric))
        if held is None:
            return GateResult(gate, "skip", None, f"skipped: {cond.metric} not measured")
        if not held:
            shown = _fmt(cond.metric, values[cond.metric])  # type: ignore[arg-type]
            return GateResult(gate, "skip", None, f"skipped: {cond.metric} = {shown}, needs {cond}")
    metric = gate.check.metric
    value = values.get(metric)
    if value is None:
        return GateResult(gate, "fail", None, "not measured")
    ok = bool(gate.check.holds(value))
    limit = f"{gate.check.op} {gate.check.text or gate.check.threshold}"
    reason = f"{metric} = {_fmt(metric, value)}" + (
        f" (required {limit})" if ok else f", but required {limit}")
    return GateResult(gate, "pass" if ok else "fail", value, reason)


def evaluate(gates: Iterable[Gate], values: dict[str, float | int | None]) -> list[GateResult]:
    return [evaluate_gate(g, values) for g in gates]


def all_passed(results: Iterable[GateResult]) -> bool:
    return all(r.passed for r in results)
