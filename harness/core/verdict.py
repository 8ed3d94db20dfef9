"""The one interpretation of a run: its gate results, its notes, the state of the feature and
the overall verdict. The terminal, the HTML report, `harness report`, `harness bench` and the
tests all call `judge`, so they cannot disagree about what a run means.

Verdicts come only from evidence: "fail" when a worker or a gate failed (a failure is evidence
too, and it outranks missing evidence); otherwise a run that did not complete, that holds no
worker with a correct output, or whose groups lack complete evidence (a worker not sampled, a
sample physics does not allow) is "incomplete" (never "pass"), whatever its gates say; "pass"
needs all of it.

An *inconclusive* timing gate (its 95 % interval straddles the threshold, or one repeat) is
never a pass. One the user asked for (``--gate``, a gates file, bench's criteria) makes the run
"incomplete": the question asked was not answered. One of the target's default gates leaves the
verdict to the other gates and is named in the verdict line as not judged: the default run has
one repeat, which decides no timing gate, and its memory gates are the feature's claim.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from .capacity import capacity_reasons, is_capacity
from .gates import (
    Gate,
    GateResult,
    default_gates,
    evaluate_gate,
    gate_values_with_reasons,
    needs_both_modes,
    parse_gates,
)
from .notes import Note, run_notes
from .physics import Refusal
from .rundata import RunData
from .schema import MODES
from .summary import row_ok
from .timing import timing_repeats, timing_rounds
from .vocab import (
    MAPPED_PATH_STATES,
    UNDECIDED_GATE_STATUSES,
    Doubt,
    EpState,
    FeatureStatus,
    GateStatus,
    Mode,
    PathTaken,
    RunStatus,
    Tone,
    Verdict,
)

VERDICTS = Verdict.values()


@dataclass(frozen=True)
class FeatureState:
    """Was file mapping really exercised in mapped mode? ``state`` is one of: active (every
    mapped-mode worker took the mapped path, with evidence), partial (some workers, or mixed
    nodes), unavailable (the EP's platform gate), disabled, option-ignored / ep-error (the EP
    ignored the option or failed its setup: failures, the workers fail too), copied (a worker
    that reported the mapped path held the weights in private memory: a silent copy, a failure,
    the worker fails too), unknown (no evidence), not-measured (no mapped-mode worker)."""

    state: FeatureStatus
    text: str

    @property
    def exercised(self) -> bool:
        return self.state == FeatureStatus.ACTIVE


@dataclass
class Judgement:
    run: RunData
    values: dict[str, float | int | None]
    gates: list[GateResult]
    notes: list[Note]
    feature: FeatureState
    verdict: Verdict
    reasons: list[str] = field(default_factory=list)  # why not "pass"
    not_judged: list[str] = field(default_factory=list)  # default gates left inconclusive

    @property
    def gates_passed(self) -> bool:
        return all(g.passed for g in self.gates)

    @property
    def exit_code(self) -> int:
        return 0 if self.verdict == Verdict.PASS else 1

    def gate_lines(self) -> list[str]:
        """One line per gate, for the terminal (plain text: callers print it unstyled)."""
        return [f"{g.status.upper():4} [{self.run.run_id}] {g.gate.expr}: {g.reason}" for g in self.gates]

    @property
    def badge(self) -> Badge:
        return verdict_badge(self.verdict, self.feature.state)

    @property
    def feature_badge(self) -> Badge:
        return feature_badge(self.feature.state)

    def verdict_line(self) -> str:
        why = f" ({'; '.join(self.reasons)})" if self.reasons else ""
        return f"verdict: {self.verdict.upper()}{why}; file mapping: {self.feature.text}{not_judged_text(self)}"


def not_judged_text(judgement: Judgement) -> str:
    """ "; not judged: ..." for default timing gates left inconclusive ("" when none)."""
    if not judgement.not_judged:
        return ""
    return f"; not judged (inconclusive, not a pass): {', '.join(judgement.not_judged)}"


def gates_summary_line(judgements: Iterable[Judgement]) -> str:
    """ "gates: 5 in all: 2 passed, 3 skipped (not checked), 0 failed" over one or several runs: a skipped gate
    checked nothing, so it is never counted with the passed ones."""
    results = [g for j in judgements for g in j.gates]
    failed = sum(1 for g in results if g.failed)
    busy = sum(1 for g in results if g.status == GateStatus.CONTENDED)
    undecided = sum(1 for g in results if g.inconclusive) - busy
    skipped = sum(1 for g in results if g.status == GateStatus.SKIP)
    passed = len(results) - failed - undecided - busy - skipped
    tail = f", {undecided} inconclusive (not passed)" if undecided else ""
    tail += f", {busy} contended (timed on a busy machine, not passed)" if busy else ""
    counts = f"{passed} passed, {skipped} skipped (not checked), {failed} failed{tail}"
    return f"gates: {len(results)} in all: {counts}" if results else "gates: none"


def feature_state(run: RunData) -> FeatureState:
    """What the mapped-mode workers' own evidence says about file mapping."""
    mapped = [r for r in run.results if r.mode == Mode.MAPPED and r.target == run.target]
    if not mapped:
        return FeatureState(FeatureStatus.NOT_MEASURED, "not measured (no mapped-mode worker)")
    ep = Counter(EpState.of(r.ep_file_mapping) for r in mapped)
    paths = Counter(r.path_taken or "none" for r in mapped)
    n = len(mapped)
    failing = (EpState.OPTION_IGNORED, EpState.EP_ERROR, EpState.COPIED)
    failed = {s: ep[s] for s in failing if ep.get(s)}
    if failed:
        state, count = next(iter(failed.items()))
        what = {
            EpState.OPTION_IGNORED: "option ignored by the EP",
            EpState.EP_ERROR: "a hard EP setup error",
            EpState.COPIED: "weights copied into private memory although reported mapped (a silent copy)",
        }[state]
        return FeatureState(FeatureStatus(state), f"{what} in {count} of {n} mapped-mode workers")
    if ep.get(EpState.UNAVAILABLE):
        return FeatureState(
            FeatureStatus.UNAVAILABLE,
            f"unavailable on this platform (the EP said so for {ep[EpState.UNAVAILABLE]} "
            f"of {n} mapped-mode workers): mapped and heap took the same path",
        )
    if ep.get(EpState.MIXED):
        return FeatureState(
            FeatureStatus.PARTIAL,
            f"mixed in {ep[EpState.MIXED]} of {n} mapped-mode workers: some nodes mapped, others disabled",
        )
    count = ep.get(EpState.DISABLED, 0) + ep.get(EpState.EP_DISABLED, 0)
    if count:
        return FeatureState(FeatureStatus.DISABLED, f"disabled by the EP in {count} of {n} mapped-mode workers")
    if ep.get(EpState.UNKNOWN):
        return FeatureState(
            FeatureStatus.UNKNOWN, f"no evidence in the EP log for {ep[EpState.UNKNOWN]} of {n} mapped-mode workers"
        )
    mapped_ok = sum(1 for r in mapped if counts_as_mapped(r) and row_ok(r))
    if mapped_ok == n:
        return FeatureState(FeatureStatus.ACTIVE, f"active in all {n} mapped-mode workers")
    if mapped_ok:
        others = ", ".join(f"{k}: {v}" for k, v in sorted(paths.items()) if k != PathTaken.MAPPED)
        return FeatureState(FeatureStatus.PARTIAL, f"active in {mapped_ok} of {n} mapped-mode workers ({others})")
    shown = ", ".join(f"{k}: {v}" for k, v in sorted(paths.items()))
    return FeatureState(
        FeatureStatus.UNKNOWN, f"not exercised: no mapped-mode worker finished on the mapped path ({shown})"
    )


def counts_as_mapped(row: Any) -> bool:
    """A worker whose weights came from the mapping: its own path says so, and the EP either
    said active or is not involved (`vocab.MAPPED_PATH_STATES`)."""
    return row.path_taken == PathTaken.MAPPED and EpState.of(row.ep_file_mapping) in MAPPED_PATH_STATES


@dataclass(frozen=True)
class Badge:
    """A coloured label the report shows: its page class, its words, its colour. Decided here,
    beside the verdict, so no page can paint a run greener than its judgement."""

    css: str  # the class the page gives it (stable: pages and tests find badges by it)
    label: str
    tone: Tone


def verdict_badge(verdict: str, feature: str) -> Badge:
    """A run's verdict badge: green only for a pass in which file mapping was really exercised;
    a pass without it (unavailable, unknown, disabled, partial, heap only) is amber and says
    so, because a green badge there reads as a success of the feature."""
    if verdict == Verdict.FAIL:
        return Badge(Verdict.FAIL, Verdict.FAIL, Tone.FAIL)
    if verdict != Verdict.PASS:
        return Badge(Verdict.INCOMPLETE, Verdict.INCOMPLETE, Tone.WARN)
    if feature == FeatureStatus.ACTIVE:
        return Badge(Verdict.PASS, Verdict.PASS, Tone.PASS)
    return Badge("pass-unexercised", "pass, feature not exercised", Tone.WARN)


def feature_badge(state: str) -> Badge:
    """The file-mapping badge: green when active, grey when not measured, amber otherwise."""
    tone = {FeatureStatus.ACTIVE: Tone.PASS, FeatureStatus.NOT_MEASURED: Tone.MUTED}.get(state, Tone.WARN)
    return Badge(f"feature-{state}", f"file mapping: {state}", tone)


def session_badge(counts: dict[str, int]) -> Badge:
    """A pytest session's badge over its outcomes: red when a test failed or errored; green
    only when one passed (a session of skips alone shows no pass)."""
    failed = counts.get("failed", 0) + counts.get("error", 0)
    if failed:
        return Badge(Verdict.FAIL, Verdict.FAIL, Tone.FAIL)
    if counts.get("passed"):
        return Badge(Verdict.PASS, Verdict.PASS, Tone.PASS)
    return Badge(Verdict.INCOMPLETE, Verdict.INCOMPLETE, Tone.WARN)


def runs_badge(judgements: Iterable[Judgement], *, in_session: bool) -> Badge:
    """The "runs: ..." badge of a page of several runs: red when a run failed; green only when
    every run passed with file mapping exercised. In a pytest session the runs are grey (the
    tests decide, and some runs fail on purpose)."""
    judgements = list(judgements)
    if in_session:
        return Badge(Tone.MUTED, "runs", Tone.MUTED)
    if any(j.verdict == Verdict.FAIL for j in judgements):
        return Badge(Verdict.FAIL, "runs", Tone.FAIL)
    if judgements and all(j.badge.tone == Tone.PASS for j in judgements):
        return Badge(Verdict.PASS, "runs", Tone.PASS)
    return Badge("pass-unexercised", "runs", Tone.WARN)


#: The colour of each gate status in the report: an undecided gate is never green.
GATE_TONES: dict[GateStatus, Tone] = {
    GateStatus.PASS: Tone.PASS,
    GateStatus.FAIL: Tone.FAIL,
    GateStatus.SKIP: Tone.MUTED,
    GateStatus.INCONCLUSIVE: Tone.MUTED,
    GateStatus.CONTENDED: Tone.MUTED,
}


def gate_tones() -> list[tuple[str, Tone, bool]]:
    """(status, colour, undecided) of every gate status: the stylesheet's one source."""
    return [(status, GATE_TONES[status], status in UNDECIDED_GATE_STATUSES) for status in GateStatus]


def badge_tones() -> dict[str, Tone]:
    """Every badge class a page may show, with its colour: the stylesheet's one source."""
    found = [verdict_badge(v, f) for v in Verdict for f in FeatureStatus]
    found += [feature_badge(f) for f in FeatureStatus] + [runs_badge([], in_session=True)]
    return {b.css: b.tone for b in found}


def _gates_with_origin(run: RunData, extra: Iterable[Gate], use_default_gates: bool) -> list[tuple[Gate, bool]]:
    """(gate, is one of the target's defaults): a gate the user gave is never a default."""
    given = [*parse_gates(run.meta.get("gates") or []), *extra]
    defaults = default_gates(run.meta) if use_default_gates else []
    unique: dict[str, tuple[Gate, bool]] = {}
    for gate in given:
        unique.setdefault(gate.expr, (gate, False))
    for gate in defaults:
        unique.setdefault(gate.expr, (gate, True))
    return list(unique.values())


def single_mode(run: RunData) -> str | None:
    """The one mode a run measured (``--modes mapped``), or None when it ran both."""
    modes = run.run.get("modes") or run.modes
    modes = [m for m in modes if m in MODES]
    return modes[0] if len(set(modes)) == 1 else None


def judge_gates(run: RunData, extra: Iterable[Gate] = (), *, use_default_gates: bool = True) -> list[GateResult]:
    """Every gate of the run, evaluated. A default gate that compares mapped with heap is
    skipped, with the reason, when the run measured one mode only (a valid choice, not a
    failure); a gate the user asked for fails then, saying why."""
    values, reasons = gate_values_with_reasons(run.summary)
    repeats = timing_repeats(run.summary, timing_rounds(run))
    only = single_mode(run)
    results = []
    for gate, is_default in _gates_with_origin(run, extra, use_default_gates):
        if is_default and only and needs_both_modes(gate):
            result = GateResult(
                gate, GateStatus.SKIP, None, f"skipped: compares mapped with heap, but only {only} mode was run"
            )
        else:
            result = evaluate_gate(gate, values, reasons, repeats)
        results.append(replace(result, default=is_default))
    return results


def _undecided(results: list[GateResult]) -> tuple[list[str], list[str]]:
    """(reasons for the verdict, default gates not judged) from inconclusive gates."""
    asked = [g for g in results if g.inconclusive and not g.default]
    reasons = [f"{len(asked)} gate(s) inconclusive: {', '.join(g.gate.expr for g in asked)}"] if asked else []
    return reasons, [g.gate.expr for g in results if g.inconclusive and g.default]


def _incomplete_groups(run: RunData) -> list[str]:
    """Groups without complete evidence; a capacity run's probes the limit ended are answers."""
    probes = is_capacity(run)
    return [
        f"{s.target} {s.mode} N={s.processes} repeat {s.repeat}"
        for s in run.summary
        if s.complete is not True and not (probes and s.oom_workers)
    ]


def judge(run: RunData, extra_gates: Iterable[Gate] = (), *, use_default_gates: bool = True) -> Judgement:
    """Everything a reader needs to know about ``run``, decided once.

    fail: a worker or a gate failed (the run's status is named too when it is not complete);
    incomplete: otherwise, the run did not complete, no worker has a correct output, or a group
    lacks evidence (a worker not sampled, an implausible sample, a derived figure physics
    forbids: `harness.core.physics`); pass: none of these."""
    results = judge_gates(run, extra_gates, use_default_gates=use_default_gates)
    values, missing = gate_values_with_reasons(run.summary)
    failed = [g for g in results if g.failed]
    undecided, not_judged = _undecided(results)
    broken = [r for r in run.results if not row_ok(r) and not (is_capacity(run) and r.oom_killed)]
    reasons = []
    if broken:
        reasons.append(f"{len(broken)} worker(s) failed")
    if failed:
        reasons.append(f"{len(failed)} of {len(results)} gate(s) failed")
    if reasons:  # a failure is evidence too, and it outranks missing evidence
        verdict = Verdict.FAIL
        if run.status != RunStatus.COMPLETE:
            reasons.append(f"run status is {run.status}")
    else:
        if run.status != RunStatus.COMPLETE:
            reasons.append(f"run status is {run.status}")
        if not any(row_ok(r) for r in run.results):
            reasons.append("no worker finished with a correct output")
        # a figure physics forbids is missing evidence: never a pass
        reasons.extend(
            str(why) for why in missing.values() if isinstance(why, Refusal) and why.doubt == Doubt.IMPLAUSIBLE
        )
        incomplete = _incomplete_groups(run)
        if incomplete and run.results:
            shown = ", ".join(incomplete[:3]) + (f" and {len(incomplete) - 3} more" if len(incomplete) > 3 else "")
            reasons.append(f"{len(incomplete)} group(s) without complete evidence ({shown}): see the notes")
        reasons += undecided + capacity_reasons(run)
        verdict = Verdict.INCOMPLETE if reasons else Verdict.PASS
    return Judgement(run, values, results, run_notes(run), feature_state(run), verdict, reasons, not_judged)
