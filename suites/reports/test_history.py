"""History file: create with header, append, skip duplicates, trend of the last K runs."""

from __future__ import annotations

import json

from report_fixtures import fake_results, metadata, write_run

from harness.core.rundata import load_run
from harness.core.verdict import judge
from reports.history import (
    append_history,
    history_columns,
    read_history,
    read_history_frame,
    trend,
)


def make_run(tmp_path, name, day, commit, target="cpu", host="testhost"):
    """Test input: a synthetic run folder dated ``day``."""
    meta = metadata(target, started=f"2026-11-{day:02d}T02:00:00+00:00")
    meta["env"] |= {"git_commit": commit, "hostname": host}
    folder = write_run(tmp_path / name, fake_results(target=target, processes=(1, 2)), meta)
    return judge(load_run(folder))


def test_create_then_append(tmp_path):
    history = tmp_path / "h" / "history.csv"
    first = make_run(tmp_path, "r1", 1, "aaaaaaa1")
    assert append_history(history, first)
    header, rows = read_history(history)
    assert header == history_columns(first.run.env)
    kinds = [r["record"] for r in rows]
    assert kinds == ["summary"] * len(first.run.summary) + ["headline"]
    assert rows[-1]["verdict"] == "pass" and rows[-1]["onnxruntime"] == "1.32.0"
    # every version headline.json carries (issue 13), so a trend can be split by OS and CPU
    assert {"onnxruntime", "onnxruntime_qnn", "qnn_sdk", "python", "os", "cpu", "commit"} <= set(header)
    assert (rows[-1]["os"], rows[-1]["cpu"]) == ("Linux-6.1", "test cpu")
    assert append_history(history, make_run(tmp_path, "r2", 2, "bbbbbbb2"))
    _, rows = read_history(history)
    assert [r["run_id"] for r in rows if r["record"] == "headline"] == ["r1", "r2"]
    assert history.read_text().count("record,run_id") == 1  # one header


def test_same_run_is_not_recorded_twice(tmp_path):
    history = tmp_path / "history.csv"
    run = make_run(tmp_path, "r1", 1, "aaaaaaa1")
    assert append_history(history, run)
    assert not append_history(history, run)
    assert len([r for r in read_history(history)[1] if r["record"] == "headline"]) == 1


def test_trend_last_k_oldest_first_filtered(tmp_path):
    history = tmp_path / "history.csv"
    for day in (5, 3, 4, 1, 2):  # appended out of date order
        append_history(history, make_run(tmp_path, f"r{day}", day, f"c{day}abcdef"))
    append_history(history, make_run(tmp_path, "other", 6, "zzz", target="qnn"))
    append_history(history, make_run(tmp_path, "elsewhere", 7, "yyy", host="other"))
    points = trend(history, 3, target="cpu", host="testhost")
    assert [p["run_id"] for p in points] == ["r3", "r4", "r5"]
    assert points[-1]["label"] == "2026-11-05 c5abcde"
    assert 0 < points[-1]["mapped_pss_ratio"] < 1
    assert len(trend(history, 10)) == 7


def test_header_change_rewrites_and_keeps_old_rows(tmp_path):
    history = tmp_path / "history.csv"
    history.write_text("record,run_id,date,legacy\nheadline,old,2026-01-01,x\n")
    assert append_history(history, make_run(tmp_path, "r1", 1, "aaaa"))
    header, rows = read_history(history)
    cols = history_columns(load_run(tmp_path / "r1").env)
    assert header[: len(cols)] == cols and header[-1] == "legacy"
    assert rows[0]["run_id"] == "old" and rows[0]["legacy"] == "x"
    assert rows[-1]["run_id"] == "r1"


def test_history_frame_dtypes(tmp_path):
    history = tmp_path / "history.csv"
    append_history(history, make_run(tmp_path, "r1", 1, "aaaa"))
    frame = read_history_frame(history)
    assert str(frame["mapped_pss_ratio"].dtype) == "Float64"
    assert str(frame["sum_pss_bytes"].dtype) == "Int64"
    assert frame.loc[frame.record == "headline", "failed_workers"].iloc[0] == 0
    json.dumps(trend(history))  # trend points are plain data
