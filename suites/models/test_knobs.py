"""The ORT knobs engineers use with onnxruntime_perf_test, applied identically to mapped and heap
sessions and to the reference: --session-config, --provider-option (qnn), --intra-op-threads,
--runs (latency percentiles after the first run)."""

from __future__ import annotations

import json

import pytest
from models_support import ONE, assert_all_ok, assert_usage_error, worker_specs

SMALL = ("--model-size", "2MiB")


def test_runs_fill_the_latency_columns(run_harness):
    outcome = run_harness("run", *SMALL, "--runs", "20", *ONE)
    rows = assert_all_ok(outcome, workers=2)
    for r in rows:
        assert r.runs == 20 and r.first_run_s > 0
        assert 0 < r.latency_p50_s <= r.latency_p90_s <= r.latency_p99_s
    by_mode = {r.mode: r for r in rows}
    summary = outcome.summary()
    assert sorted(s.mode for s in summary) == sorted(by_mode), "one group per mode, or the loop proves nothing"
    for s in summary:  # one worker per mode: the medians are its own figures
        r = by_mode[s.mode]
        assert (s.latency_p50_s_median, s.latency_p99_s_median) == (r.latency_p50_s, r.latency_p99_s)
        assert s.startup_s_median == pytest.approx(r.init_s + r.first_run_s)


def test_without_runs_the_latency_columns_stay_empty(run_harness):
    rows = assert_all_ok(run_harness("run", *SMALL, *ONE), workers=2)
    assert all(r.runs == 0 and r.latency_p50_s is None for r in rows)


def test_session_settings_reach_every_session_and_the_reference(run_harness, tmp_path):
    """The same settings in every worker's spec (both modes) and in metadata.json; a value ORT
    rejects fails the reference run already: one line, exit 2."""
    outcome = run_harness(
        "run",
        *SMALL,
        "--session-config",
        "session.intra_op.allow_spinning=0",
        "--intra-op-threads",
        "1",
        *ONE,
        out=tmp_path / "ok",
    )
    assert_all_ok(outcome, workers=2)
    settings = [s["settings"]["session"] for s in worker_specs(outcome.out)]
    assert len(settings) == 2 and all(
        s["config"] == {"session.intra_op.allow_spinning": "0"} and s["intra_op_threads"] == 1 for s in settings
    )
    meta = json.loads((outcome.out / "metadata.json").read_text())
    assert meta["run"]["session"]["intra_op_threads"] == 1
    assert any("session.intra_op.allow_spinning=0, intra_op_num_threads=1" in n for n in meta["target_notes"])
    bad = run_harness(
        "run", *SMALL, "--session-config", "session.graph_optimizations_loop_level=x", *ONE, out=tmp_path / "bad"
    )
    assert_usage_error(bad, "ONNX Runtime cannot load it", "stoi")


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (
            ["--target", "qnn", "--provider-option", "disable_file_mapped_weights=0"],
            ["--provider-option disable_file_mapped_weights", "the harness's to set"],
        ),
        (["--target", "qnn", "--provider-option", "backend_type=cpu"], ["use --backend-type"]),
        (["--provider-option", "soc_model=60"], ["--provider-option applies to --target qnn"]),
        (["--session-config", "novalue"], ["--session-config 'novalue': expected KEY=VALUE"]),
        (["--runs", "-1"], ["must be >= 0"]),
        (["--intra-op-threads", "0"], ["must be >= 1"]),
    ],
    ids=[
        "disable-option-is-the-harnesss",
        "backend-type",
        "provider-option-needs-qnn",
        "config-format",
        "runs-negative",
        "threads-zero",
    ],
)
def test_bad_knobs_are_one_line(run_harness, args, expected):
    assert_usage_error(run_harness("run", *SMALL, *args, *ONE), *expected)
