"""Notes and words on what the EP's faults left behind and on figures that are not upstream
behaviour: stale registrations, silent copies, late release callbacks, the opt-ins.

Why a module of its own: these are the cpu target's model of the QNN EP's real failures
(docs/upstream.md) and the parent's memory verdict on a silent copy; `harness.core.notes`
gathers them and `harness.core.headline` puts the decisive ones in the run's sentence, so
they are worded once, here.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from .schema import ResultRow
from .vocab import EpState

#: How a target's note labels an opt-in that is not what the EP does (the cpu target's).
NOT_UPSTREAM = "Not upstream behaviour: "


def _repeat_lines(rows: list[ResultRow]) -> list[str]:
    """Per repeat: how many workers left how many stale registrations, and whether their
    sessions were created anyway (recovered) and the worker ended clean."""
    lines = []
    by_repeat: dict[int, list[ResultRow]] = {}
    for row in rows:
        by_repeat.setdefault(row.repeat, []).append(row)
    for repeat, members in sorted(by_repeat.items()):
        stale = sum(r.stale_registrations or 0 for r in members)
        recovered = sum(1 for r in members if r.first_run_s is not None)  # created and ran
        paths = Counter(r.path_taken or "none" for r in members)
        shown = ", ".join(f"{k}: {v}" for k, v in sorted(paths.items()))
        lines.append(
            f"repeat {repeat}: {len(members)} worker(s) left {stale} stale registration(s); sessions created "
            f"anyway in {recovered} ({shown})"
        )
    return lines


def fault_notes(run: Any) -> list[tuple[str, str, str, list[str]]]:
    """(kind, title, text, details) of each note that applies to a `RunData` (not imported:
    rundata imports the headline, which imports this module)."""
    notes = []
    stale = [r for r in run.results if r.stale_registrations]
    if stale:
        total = sum(r.stale_registrations or 0 for r in stale)
        notes.append(
            (
                "error",
                f"{total} stale registration(s) left behind",
                f"In {len(stale)} worker(s) a DMA registration failed and, as the QNN EP does (onnxruntime-qnn "
                "cc7ec9e qnn_backend_manager.cc 886-893), it was left registered and never undone: a stale "
                "FastRPC registration (onnxruntime-qnn #337), after which later weights may keep failing. The "
                "later requests were still made; each worker holding one fails, a leak. Per repeat, whether "
                "the sessions recovered:",
                _repeat_lines(stale),
            )
        )
    copied = [r for r in run.results if r.ep_file_mapping == EpState.COPIED]
    if copied:
        notes.append(
            (
                "error",
                f"{len(copied)} mapped worker(s) held a copy of the weights",
                "These mapped-mode workers reported the mapped path, yet their private memory held the weights "
                "(copied_bytes against the control worker): the weights were read into memory and nothing said "
                "so, as the QNN EP's SSR recovery did (onnxruntime-qnn #677). They are not counted as mapped "
                "and they fail:",
                [r.error for r in copied if r.error][:12],
            )
        )
    late = [r for r in run.results if r.late_releases]
    if late:
        notes.append(
            (
                "info",
                "Release callbacks arrived late",
                f"{sum(r.late_releases or 0 for r in late)} release callback(s) of failed attempts arrived after "
                f"the direct read began or at teardown, in {len(late)} worker(s) (onnxruntime-qnn PR #839's "
                "lifetime races); each deregistered its own registration once.",
                [],
            )
        )
    opt_ins = [t.removeprefix(NOT_UPSTREAM) for t in run.target_notes if t.startswith(NOT_UPSTREAM)]
    if opt_ins:
        notes.append(
            (
                "warn",
                "Not upstream behaviour",
                "This run used opt-ins where the harness deliberately differs from the QNN EP: the figures they "
                "shape (fall-backs, registrations, mappings) are not what the EP would give.",
                opt_ins,
            )
        )
    return notes


def fault_sentence(judgement: Any) -> str:
    """ " N stale registration(s) ..." for the run's sentence ("" when nothing applies)."""
    run = judgement.run
    parts = []
    stale = sum(r.stale_registrations or 0 for r in run.results)
    if stale:
        workers = sum(1 for r in run.results if r.stale_registrations)
        parts.append(
            f"{stale} stale registration(s) were left behind by failed registrations in {workers} worker(s) "
            "(never undone, as upstream)"
        )
    copied = [r for r in run.results if r.ep_file_mapping == EpState.COPIED]
    if copied:
        parts.append(f"{len(copied)} mapped worker(s) held a silent copy of the weights (copied)")
    if any(t.startswith(NOT_UPSTREAM) for t in run.target_notes):
        parts.append("figures include opt-ins that are not upstream behaviour")
    if not parts:
        return ""
    text = "; ".join(parts)
    return f" {text[0].upper()}{text[1:]}."
