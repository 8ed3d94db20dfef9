"""The vocabularies of `harness.core.vocab` (issue 29, item 2): each defined once, each member
the very string the files have always carried, and the badges decided beside the verdict.

The literal table below is the files' contract: a value renamed here would change what every
results.csv, metadata.json and headline.json says, so it must be a format change (docs/results.md),
never an accident of a refactoring.
"""

from __future__ import annotations

import json
import pickle

import pytest

from harness.core import cells, schema, vocab
from harness.core.schema import ResultRow, SummaryRow
from harness.core.tables import format_cell, rows_to_csv_text
from harness.core.verdict import (
    badge_tones,
    counts_as_mapped,
    feature_badge,
    gate_tones,
    runs_badge,
    session_badge,
    verdict_badge,
)

#: Every value as the files spell it.
WRITTEN = {
    vocab.Mode: ("mapped", "heap"),
    vocab.PathTaken: ("mapped", "heap", "fallback", "unknown"),
    vocab.EpState: (
        "active",
        "retried",
        "mixed",
        "disabled",
        "ep-disabled",
        "unavailable",
        "option-ignored",
        "ep-error",
        "unknown",
        "copied",
        "n/a",
    ),
    vocab.FeatureStatus: (
        "active",
        "partial",
        "unavailable",
        "disabled",
        "option-ignored",
        "ep-error",
        "copied",
        "unknown",
        "not-measured",
    ),
    vocab.GateStatus: ("pass", "fail", "skip", "inconclusive", "contended"),
    vocab.Verdict: ("pass", "fail", "incomplete"),
    vocab.RunStatus: ("running", "complete", "interrupted", "unknown"),
    vocab.PageCache: ("warm", "cold", "cold-unverified"),
    vocab.PeakPhase: ("start", "load", "create", "first_run"),
    vocab.Start: ("concurrent", "sequential"),
    vocab.Workload: ("infer", "generate"),
}


def test_every_vocabulary_is_in_the_contract():
    enums = {v for v in vars(vocab).values() if isinstance(v, type) and issubclass(v, vocab.StrEnum)}
    assert enums - {vocab.StrEnum, vocab.Tone, vocab.Aggregate, vocab.Doubt} == set(WRITTEN)


@pytest.mark.parametrize("enum", list(WRITTEN), ids=lambda e: e.__name__)
def test_values_are_the_strings_the_files_carry(enum):
    assert enum.values() == WRITTEN[enum]
    for member, text in zip(enum, WRITTEN[enum], strict=True):
        assert member == text and hash(member) == hash(text)
        assert str(member) == f"{member}" == format(member, "") == text
        assert repr(member) == repr(text)  # a message quoting it reads as it always did
        assert json.dumps({member: [member]}) == json.dumps({text: [text]})
        assert json.dumps(member, indent=1) == json.dumps(text, indent=1)  # the pure-Python encoder too
        assert format_cell(member, "string") == text
        assert pickle.loads(pickle.dumps(member)) is member
        assert {text: 1}[member] == 1 and {member: 1}[text] == 1
        assert enum(text) is member


def test_a_row_with_members_writes_the_same_bytes_as_one_with_strings():
    """Item 2's promise: the CSV a run writes is byte-identical whichever the code holds."""
    members = ResultRow(
        target="qnn",
        mode=vocab.Mode.MAPPED,
        disable_file_mapped_weights=vocab.DISABLE_FLAGS[vocab.Mode.MAPPED],
        path_taken=vocab.PathTaken.FALLBACK,
        ep_file_mapping=vocab.EpState.EP_DISABLED,
        page_cache=vocab.PageCache.COLD_UNVERIFIED,
        peak_phase=vocab.PeakPhase.FIRST_RUN,
    )
    strings = ResultRow(
        target="qnn",
        mode="mapped",
        disable_file_mapped_weights="0",
        path_taken="fallback",
        ep_file_mapping="ep-disabled",
        page_cache="cold-unverified",
        peak_phase="first_run",
    )
    assert rows_to_csv_text([members], ResultRow) == rows_to_csv_text([strings], ResultRow)
    summary = SummaryRow(mode=vocab.Mode.HEAP, ep_file_mapping=f"{vocab.EpState.ACTIVE}|{vocab.EpState.RETRIED}")
    assert "heap" in rows_to_csv_text([summary], SummaryRow).splitlines()[1].split(",")[:2]


def test_the_schema_checks_cells_against_the_vocabularies():
    assert cells.CHOICES["mode"] == ("mapped", "heap")
    assert cells.CHOICES["ep_file_mapping"] == vocab.EpState.values()
    assert cells.CHOICES["path_taken"] == vocab.PathTaken.values()
    assert schema.MODES == tuple(vocab.Mode)
    assert schema.disable_flag("mapped") == "0" and schema.disable_flag(vocab.Mode.HEAP) == "1"
    with pytest.raises(KeyError):
        schema.disable_flag("fallback")
    assert cells.cell_problem(ResultRow, "ep_file_mapping", "n/a") is None
    assert "not one of" in cells.cell_problem(ResultRow, "ep_file_mapping", "mapped")


def test_what_counts_as_mapped_is_defined_once():
    """verdict.py's ("active", "n/a", None, "") drifted from schema.MAPPED_STATES: now both
    read vocab.MAPPED_PATH_STATES, which is MAPPED_STATES plus "no EP involved"."""
    assert vocab.MAPPED_STATES == ("active",)
    assert vocab.MAPPED_PATH_STATES == (*vocab.MAPPED_STATES, vocab.EpState.NA)
    assert vocab.EP_STATES == tuple(s for s in vocab.EpState if s != "n/a")

    def row(path: str, ep: str | None) -> ResultRow:
        return ResultRow(mode="mapped", path_taken=path, ep_file_mapping=ep)

    assert counts_as_mapped(row("mapped", "active")) and counts_as_mapped(row("mapped", "n/a"))
    assert counts_as_mapped(row("mapped", None))  # a row without an EP verdict: no EP involved
    for ep in ("retried", "unknown", "disabled", "mixed", "unavailable"):
        assert not counts_as_mapped(row("mapped", ep)), ep
    assert not counts_as_mapped(row("heap", "active")) and not counts_as_mapped(row("fallback", "n/a"))
    # the projection's mapped law keeps the same groups (before: unavailable/retried/disabled only)
    from reports.projection import took_mapped_path

    for state in vocab.EpState:
        group = SummaryRow(mode="mapped", ep_file_mapping=f"{state}", fallback_workers=0)
        assert took_mapped_path(group) == (state in vocab.MAPPED_PATH_STATES), state
    assert not took_mapped_path(SummaryRow(mode="mapped", ep_file_mapping="active|ep-disabled", fallback_workers=0))
    assert not took_mapped_path(SummaryRow(mode="mapped", ep_file_mapping="n/a", fallback_workers=1))


def test_badges_come_from_the_verdict():
    assert verdict_badge("pass", "active") == verdict_badge(vocab.Verdict.PASS, vocab.FeatureStatus.ACTIVE)
    assert verdict_badge("pass", "active").tone == vocab.Tone.PASS
    for feature in vocab.FeatureStatus:
        if feature != vocab.FeatureStatus.ACTIVE:
            badge = verdict_badge("pass", feature)
            assert (badge.css, badge.tone) == ("pass-unexercised", vocab.Tone.WARN), feature  # never green
        assert verdict_badge("fail", feature).tone == vocab.Tone.FAIL
        assert verdict_badge("incomplete", feature).tone == vocab.Tone.WARN
    assert feature_badge("active").tone == vocab.Tone.PASS
    assert feature_badge("not-measured").tone == vocab.Tone.MUTED
    assert feature_badge("unavailable").css == "feature-unavailable"
    assert feature_badge("unavailable").tone == vocab.Tone.WARN
    assert session_badge({"skipped": 3}).css == "incomplete" and session_badge({"passed": 1}).css == "pass"
    assert session_badge({"passed": 4, "error": 1}).tone == vocab.Tone.FAIL
    assert runs_badge([], in_session=True).tone == vocab.Tone.MUTED
    tones = badge_tones()
    assert tones["pass"] == vocab.Tone.PASS and tones["pass-unexercised"] == vocab.Tone.WARN
    assert {f"feature-{f}" for f in vocab.FeatureStatus} <= tones.keys()
    assert set(tones.values()) <= set(vocab.Tone)


def test_the_report_colours_every_badge_from_the_verdict():
    """The stylesheet is generated from badge_tones: no badge class without its colour, and
    no colour guessed from a class name in the template."""
    from reports.html import _environment

    template = _environment().loader.get_source(_environment(), "report.html.j2")[0]
    assert '[class*="feature-"]' not in template and "badge.pass-unexercised" not in template
    css = _environment().from_string(template.split("<style>")[1].split("</style>")[0])
    text = css.render(badge_tones=sorted(badge_tones().items()), gate_tones=[])
    for name, tone in badge_tones().items():
        assert f".badge.{name} {{ background: var(--{tone}); }}" in text
    text = css.render(badge_tones=[], gate_tones=gate_tones())
    assert "td.status-pass { color: var(--pass); font-weight: 700; }" in text
    assert "td.status-inconclusive { color: var(--skip); font-weight: 700; font-style: italic; }" in text
    assert {status for status, _, _ in gate_tones()} == set(vocab.GateStatus)
    assert all(tone != vocab.Tone.PASS for status, tone, undecided in gate_tones() if undecided)
