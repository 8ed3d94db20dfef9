"""Every run and bench leaves headline.json beside its tables: the same judgement as the
terminal, in a form a nightly job can compare."""

from __future__ import annotations

import json

import pytest


def test_run_writes_headline_json_even_without_report(run_harness):
    outcome = run_harness(
        "run", "--model-size", "16MiB", "--processes", "1,2", "--quiet", "--no-report", "--label", "device=ci"
    )
    assert outcome.returncode == 0, outcome.stderr
    assert not (outcome.out / "report.html").exists()
    head = outcome.headline()
    assert head["kind"] == "run" and head["verdict"] == "pass" and head["target"] == "cpu"
    assert [e["processes"] for e in head["per_n"]] == [1, 2]
    assert head["labels"] == {"device": "ci"}
    assert head["versions"]["onnxruntime"] and head["versions"]["python"]
    assert head["sentence"] in outcome.stdout  # the terminal says the same sentence


@pytest.mark.memory  # its start-up limits compare timed loads against the floor
def test_bench_writes_report_headline_and_bench_json(run_harness, tmp_path):
    out = tmp_path / "bench"
    outcome = run_harness("bench", "--model-size", "16MiB", "--processes", "2", "--repeat", "1", "--quiet", out=out)
    assert outcome.returncode in (0, 1), outcome.stderr  # criteria may miss at 16 MiB: figures still written
    head = outcome.headline()
    assert head["kind"] == "bench" and head["peer"] == "ort-native"
    assert {g["expr"] for g in head["gates"]} >= {"init_ratio<=0.05", "peer_init_ratio<=1"}
    bench = json.loads((out / "bench.json").read_text())
    assert bench["verdict"] == head["verdict"]
    assert (out / "report.html").is_file()
    # the bench always has its timing pass, and prints its start-up against the limits (issue 32)
    assert head["timing_pass"]["start"] == "sequential" and head["contention"]["start"] == "sequential"
    limits = {r["row"]: r for r in bench["limits"]}
    assert list(limits) == ["floor", "mapped", "peer", "heap"]
    assert all(r["init_s"] for r in limits.values()), limits
    assert all(limits[k]["times_floor"] > 1 for k in ("mapped", "peer", "heap")), limits  # nothing beats the floor
    assert "start-up against the limits (median init, sessions with ORT's intra-op threads;" in outcome.stdout
