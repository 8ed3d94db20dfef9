"""The sweep fit recovers a known linear law, projects bigger models, and refuses one N."""

from __future__ import annotations

from dataclasses import replace

import pytest
from report_fixtures import GIB, MIB, Law, fake_results

from harness.core.summary import summarize
from reports.projection import (
    consecutive_marginals,
    fit_sweep,
    project,
    projection_text,
)

LAW = Law(fixed=32 * MIB, per_session=72 * MIB, weights=256 * MIB)


def test_fit_recovers_the_law_in_both_modes():
    sweep = fit_sweep(summarize(fake_results(law=LAW, repeats=2)))
    assert sweep.metric == "pss" and not sweep.missing
    for mode in ("mapped", "heap"):
        fit = sweep.fits[mode]
        assert fit.fixed_bytes == pytest.approx(LAW.fixed, abs=1)
        assert fit.per_session_bytes == pytest.approx(LAW.per_session, abs=1)
        assert fit.rms_residual_bytes < 1 and fit.max_residual_bytes < 1
        assert [s for s, _ in fit.points] == [1, 1, 2, 2, 4, 4]
    assert sweep.fits["heap"].marginal_bytes == pytest.approx(LAW.per_session + LAW.weights)
    assert sweep.fits["mapped"].marginal_bytes == pytest.approx(LAW.per_session)


def test_projection_scales_weights_per_session_only_in_heap_mode():
    sweep = fit_sweep(summarize(fake_results(law=LAW)))
    result = project(sweep, 4 * GIB, 8)
    assert result.bytes_by_mode["mapped"] == pytest.approx(LAW.fixed + 8 * LAW.per_session + 4 * GIB)
    assert result.bytes_by_mode["heap"] == pytest.approx(LAW.fixed + 8 * LAW.per_session + 32 * GIB)
    assert any("mapped saves 28.0 GiB" in line for line in result.lines)


def test_projection_text_states_assumptions():
    text = "\n".join(projection_text(summarize(fake_results(law=LAW))))
    assert "8 sessions of a 4.0 GiB model" in text
    assert "Assumes heap mode: every session holds its own copy" in text
    assert "fit error: RMS" in text


def test_single_n_says_a_sweep_is_needed():
    summary = summarize(fake_results(law=LAW, processes=(2,), repeats=3))
    sweep = fit_sweep(summary)
    assert not sweep.fits
    assert all("needs a sweep" in why for why in sweep.missing.values())
    (line,) = projection_text(summary)
    assert line.startswith("No projection") and "needs a sweep" in line


def test_uss_fallback_when_pss_is_missing():
    rows = fake_results(law=LAW, pss=False)
    summary = summarize(rows)
    assert fit_sweep(summary).metric == "private"  # the fair figure where there is no PSS: USS on Linux
    linux = fit_sweep(summary, system="Linux")
    # fake USS: heap = per_session + W each; mapped = per_session (+ W when alone)
    assert linux.fits["heap"].per_session_bytes == pytest.approx(LAW.per_session, abs=1)
    assert linux.fits["mapped"].per_session_bytes == pytest.approx(LAW.per_session, abs=1)
    assert linux.fits["mapped"].rms_residual_bytes < 1
    # on Windows a lone mapping is not private, so the N=1 point does not fit the line
    windows = fit_sweep(summary, system="Windows")
    assert windows.fits["mapped"].max_residual_bytes > 100 * MIB


def test_noise_shows_in_the_residuals():
    rows = fake_results(law=LAW)
    rows = [replace(r, pss_bytes=r.pss_bytes + (5 * MIB if r.worker == 1 else 0)) for r in rows]
    fit = fit_sweep(summarize(rows)).fits["heap"]
    assert fit.rms_residual_bytes > MIB


def test_consecutive_marginals():
    steps = consecutive_marginals(summarize(fake_results(law=LAW)), "pss")
    assert steps["heap"] == [(1, 2, LAW.per_session + LAW.weights), (2, 4, LAW.per_session + LAW.weights)]
    assert steps["mapped"][0] == (1, 2, LAW.per_session)


def test_nothing_measured():
    rows = [replace(r, pss_bytes=None, uss_bytes=None, private_bytes=None) for r in fake_results()]
    assert projection_text(summarize(rows)) == ["No projection: all: no memory figures were measured."]


def test_no_mapped_law_when_the_ep_turned_mapping_off():
    """Test input: a qnn sweep where the EP reported the feature unavailable."""
    summary = summarize(fake_results(law=LAW, target="qnn", ep_file_mapping="unavailable"))
    sweep = fit_sweep(summary)
    assert "heap" in sweep.fits and "mapped" not in sweep.fits
    assert "never took the mapped path" in sweep.missing["mapped"]
    assert "unavailable" in sweep.missing["mapped"]
    assert not any("saves" in line for line in projection_text(summary))


def test_fallback_groups_are_left_out_of_the_mapped_fit():
    summary = summarize(fake_results(law=LAW))
    summary = [replace(s, fallback_workers=1) if (s.mode, s.processes) == ("mapped", 4) else s for s in summary]
    fit = fit_sweep(summary).fits["mapped"]
    assert [s for s, _ in fit.points] == [1, 2]
