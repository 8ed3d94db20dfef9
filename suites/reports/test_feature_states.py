"""The run's feature state from the EP verdicts of issue 21: an ignored option and an EP setup
error are failures (never "active" or "disabled"), a mixed session is partial."""

from __future__ import annotations

from dataclasses import replace

import pytest
from report_fixtures import fake_results, metadata, write_run

from harness.core.rundata import load_run
from harness.core.verdict import judge


def _run(tmp_path, state: str, *, error: str | None = None):
    rows = fake_results(target="qnn", processes=(1,), ep_file_mapping="active")
    rows = [replace(r, ep_file_mapping=state if r.mode == "mapped" else "disabled") for r in rows]
    if error:
        rows = [replace(r, error=error) if r.mode == "mapped" else r for r in rows]
    return judge(load_run(write_run(tmp_path / state, rows, metadata(target="qnn"))))


@pytest.mark.parametrize(
    ("state", "words"), [("option-ignored", "option ignored by the EP"), ("ep-error", "a hard EP setup error")]
)
def test_a_failed_ep_state_is_a_failure(tmp_path, state, words):
    judgement = _run(tmp_path, state, error=f"{state}: reason")
    assert judgement.feature.state == state and words in judgement.feature.text
    assert not judgement.feature.exercised and judgement.verdict == "fail"


def test_a_mixed_session_is_partial(tmp_path):
    judgement = _run(tmp_path, "mixed")
    assert judgement.feature.state == "partial" and "mixed" in judgement.feature.text
    assert not judgement.feature.exercised
