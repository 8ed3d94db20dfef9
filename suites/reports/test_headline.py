"""headline.json (the machine-readable judgement of a run) and `harness report --baseline`
(absolute values, deltas, percent change, and the run-to-run spread rule)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from report_fixtures import MIB, fail_worker, fake_results, metadata, write_run

from harness.core.compare import compare
from harness.core.headline import HEADLINE_FORMAT_VERSION, headline_document, read_headline, write_headline
from harness.core.rundata import load_run
from harness.core.verdict import judge
from reports import render_runs, report_main

VERSION_KEYS = {"onnxruntime", "onnxruntime_qnn", "qnn_sdk", "python", "os", "cpu", "commit"}


def scaled(rows, factor_by_repeat: dict[int, float], modes=("mapped",)):
    """Test input: every memory figure of ``modes`` scaled per repeat (run-to-run noise)."""
    out = []
    for r in rows:
        f = factor_by_repeat.get(r.repeat, 1.0) if r.mode in modes else 1.0
        out.append(
            replace(
                r,
                pss_bytes=int(r.pss_bytes * f),
                uss_bytes=int(r.uss_bytes * f),
                private_bytes=int(r.private_bytes * f),
            )
        )
    return out


def test_headline_document_holds_every_n_gates_verdict_and_versions(tmp_path):
    run = write_run(tmp_path / "cpu", fake_results(processes=(1, 2, 4), repeats=2))
    judgement = judge(load_run(run))
    path = write_headline(run, judgement)
    doc = read_headline(path)
    assert doc["format_version"] == HEADLINE_FORMAT_VERSION and doc["kind"] == "run"
    assert doc["verdict"] == "pass" and doc["feature"]["state"] == "active"
    assert [e["processes"] for e in doc["per_n"]] == [1, 2, 4]
    for entry in doc["per_n"]:
        assert entry["repeats"] == 2
        assert set(entry["ratios"]) >= {"mapped_pss_ratio", "mapped_uss_ratio", "init_ratio"}
        assert entry["mapped"]["sum_pss_bytes"] < entry["heap"]["sum_pss_bytes"] or entry["processes"] == 1
    top = doc["per_n"][-1]
    assert top["ratios"]["mapped_pss_ratio"] == pytest.approx(doc["headline"]["mapped_pss_ratio"])
    assert top["saving"]["metric"] == "pss"
    assert top["saving"]["bytes"] == top["heap"]["sum_pss_bytes"] - top["mapped"]["sum_pss_bytes"]
    assert {g["expr"] for g in doc["gates"]} >= {"failed_workers==0"}
    assert all(g["status"] in ("pass", "fail", "skip") for g in doc["gates"])
    assert VERSION_KEYS <= set(doc["versions"]) and doc["versions"]["onnxruntime"] == "1.32.0"
    assert doc["versions"]["commit"] == "0123456789abcdef"
    assert "768.0 MiB less summed PSS" in doc["sentence"] and "Verdict: pass" in doc["sentence"]
    json.dumps(doc)  # plain JSON all the way down


def test_headline_of_an_unexercised_feature_says_so(tmp_path):
    rows = fake_results(target="qnn", ep_file_mapping="unavailable", processes=(2,))
    run = write_run(tmp_path / "qnn", rows, metadata("qnn", processes=[2]))
    doc = headline_document(judge(load_run(run)))
    assert doc["feature"]["state"] == "unavailable" and doc["verdict"] == "pass"
    assert "NOT exercised" in doc["sentence"] and "saving" in doc["sentence"]
    assert "less summed" not in doc["sentence"]


def test_per_n_and_the_sentence_use_complete_groups_only(tmp_path):
    """A group with a dead worker has no figures that compare: the gates say "not measured",
    and so must headline.json's per_n and the sentence. Before, per_n took the surviving
    workers' init times and the sentence said "sessions started 8.7x faster" beside a failed
    init_ratio gate; the system delta ratio was given even when the delta was within its noise."""
    rows = fail_worker(fake_results(processes=(2,)), index=0)  # mapped N=2, worker 0 died
    run = write_run(tmp_path / "dead", rows, metadata(processes=[2]))
    judgement = judge(load_run(run))
    doc = headline_document(judgement)
    (entry,) = doc["per_n"]
    assert entry["repeats"] == 0 and entry["incomplete_repeats"] == 1
    assert all(value is None for value in entry["ratios"].values()), entry["ratios"]
    assert entry["mapped"]["init_s_median"] is None and entry["saving"]["bytes"] is None
    assert judgement.values["init_ratio"] is None
    assert "faster" not in doc["sentence"] and "SLOWER" not in doc["sentence"], doc["sentence"]
    assert "no repeat measured both modes completely" in doc["sentence"], doc["sentence"]
    assert "- vs -" not in doc["sentence"] and "not measured" not in doc["sentence"]
    complete = write_run(tmp_path / "ok", fake_results(processes=(2,)))
    (entry,) = headline_document(judge(load_run(complete)))["per_n"]
    assert entry["repeats"] == 1 and entry["incomplete_repeats"] == 0
    assert entry["ratios"]["init_ratio"] == pytest.approx(judge(load_run(complete)).values["init_ratio"])


def test_the_sentence_quotes_the_largest_size_that_compared(tmp_path):
    """Issue 43 item 8: a capacity run's largest N lost a worker to the limit; the sentence said
    "init time was not measured" beside a table showing the init times of the smaller N."""
    rows = fail_worker(fake_results(processes=(1, 2, 4)), index=-1)  # heap N=4, its last worker died
    doc = headline_document(judge(load_run(write_run(tmp_path / "run", rows))))
    assert doc["sentence"].startswith("With 2 process(es) x 1 session(s)"), doc["sentence"]
    assert "faster" in doc["sentence"] and "not measured" not in doc["sentence"], doc["sentence"]


def test_a_pipeline_sentence_counts_its_models(tmp_path):
    """Issue 43 item 8: a 2-model pipeline read "x 1 session(s)": each session group loads 2 models."""
    rows = fake_results(processes=(2,))
    meta = metadata(processes=[2], models=["encoder.onnx", "decoder.onnx"])
    doc = headline_document(judge(load_run(write_run(tmp_path / "run", rows, meta))))
    assert "With 2 process(es) x 1 session group(s) of 2 models" in doc["sentence"], doc["sentence"]


def test_a_capacity_probe_ended_by_the_limit_is_no_failed_worker(tmp_path):
    """Issue 43 item 8: a capacity run passed beside "1 worker(s) failed": the probe the limit
    ended is the search's answer, and the notes say so as the verdict counts it."""
    from harness.console import note_lines

    rows = fail_worker(fake_results(processes=(1, 2)), index=-1, error="out of memory at the limit (400.0 MiB)")
    limit = 400 * 2**20
    rows = [replace(r, memory_limit_bytes=limit) for r in rows]
    rows[-1] = replace(rows[-1], oom_killed=True)
    meta = metadata(processes=[1, 2]) | {"kind": "capacity"}
    meta["run"]["memory_limit_bytes"] = limit
    judgement = judge(load_run(write_run(tmp_path / "run", rows, meta)))
    lines = "\n".join(note_lines(judgement))
    assert "worker(s) failed" not in lines and "1 probe(s) ended by the limit" in lines, lines


def test_every_terminal_note_says_more_than_its_title(tmp_path):
    """Issue 43 item 8: info notes were printed as bare titles ("note: How the cpu target
    measures"); a note's line carried from an EP log stays indented under it."""
    from harness.console import note_lines

    judgement = judge(load_run(write_run(tmp_path / "run", fake_results(processes=(1,)))))
    shown = [n for n in judgement.notes if not n.title.startswith("Why RSS")]
    assert shown and any(n.kind == "info" for n in shown)
    text = "\n".join(note_lines(judgement))
    assert all(f"note: {n.title}: {n.text[:20]}" in text for n in shown), text
    shown[0].kind, shown[0].details = "warn", ["first EP line\n[W:onnxruntime:, QnnEp] second EP line"]
    lines = "\n".join(note_lines(judgement)).splitlines()
    assert all(line.startswith(("note: ", "    ")) for line in lines), lines


def _three_repeats(tmp_path, name, mapped_factors, meta_overrides=None):
    rows = scaled(fake_results(processes=(2,), repeats=3), mapped_factors)
    meta = metadata(processes=[2], repeat=3)
    meta["env"].update(meta_overrides or {})
    return write_run(tmp_path / name, rows, meta)


def test_baseline_calls_a_real_change_and_not_noise(tmp_path):
    """+22 % on mapped memory with 3 repeats a side is called "larger" and is a regression (the
    saving shrank too); a heap that did not move, and noise of +1 % against a 2 % spread, are
    "no significant change" (the old min..max rule called such noise "beyond spread")."""
    base = _three_repeats(tmp_path, "base", {0: 0.98, 1: 1.0, 2: 1.02})
    worse = _three_repeats(tmp_path, "worse", {0: 1.20, 1: 1.22, 2: 1.25}, {"onnxruntime": "1.33.0"})
    noisy = _three_repeats(tmp_path, "noisy", {0: 0.99, 1: 1.01, 2: 1.03})
    changes = {c.metric.key: c for c in compare(load_run(worse), load_run(base)).changes}
    mapped = changes["mapped_uss"]
    assert mapped.delta > 0 and mapped.percent == pytest.approx(mapped.delta / mapped.baseline_value)
    assert mapped.p_value < 0.01 and mapped.call == "larger" and mapped.regressed
    assert changes["saving_uss"].call == "smaller" and changes["saving_uss"].regressed  # a smaller saving regressed
    assert changes["heap_uss"].call == "no significant change" and changes["heap_uss"].p_value == 1.0
    assert not changes["mapped_fair"].regressed  # PSS: shown, never called (other processes move it)
    within = {c.metric.key: c for c in compare(load_run(noisy), load_run(base)).changes}
    assert within["mapped_uss"].call == "no significant change" and not within["mapped_uss"].regressed
    comparison = compare(load_run(worse), load_run(base))
    assert ("onnxruntime", "1.32.0", "1.33.0") in comparison.versions


def test_baseline_needs_three_repeats_to_call_a_change(tmp_path):
    base = write_run(tmp_path / "one", fake_results(processes=(2,), repeats=2))
    run = write_run(tmp_path / "two", scaled(fake_results(processes=(2,), repeats=2), {0: 1.2, 1: 1.2}))
    for change in compare(load_run(run), load_run(base)).changes:
        assert change.call in ("too few repeats to call a change (need 3)",), change.call
        assert not change.changed and not change.regressed


def test_report_baseline_prints_absolute_values_deltas_and_changes(tmp_path, capsys):
    base = _three_repeats(tmp_path, "base", {0: 0.98, 1: 1.0, 2: 1.02})
    worse = _three_repeats(tmp_path, "worse", {0: 1.20, 1: 1.22, 2: 1.25}, {"onnxruntime": "1.33.0"})
    assert report_main([str(worse), "--baseline", str(base), "--no-default-gates"]) == 0
    out = capsys.readouterr().out
    assert "baseline: base (cpu); current: worse (cpu)" in out
    line = next(x for x in out.splitlines() if x.startswith("mapped summed USS"))
    cells = line.split()
    assert "MiB" in line and "+" in line and "%" in line and line.endswith("larger (REGRESSION)"), line
    assert cells[9].startswith("+") and cells[9].endswith("%")  # percent change, after 3 values with units
    assert "likely cause: onnxruntime 1.32.0 -> 1.33.0" in out
    html = (worse / "report.html").read_text()
    assert "Compared with baseline base" in html and "larger (REGRESSION)" in html
    assert '<td class="differs">1.33.0</td>' in html


def test_baseline_of_another_model_or_of_nothing_says_so(tmp_path, capsys):
    """A baseline that measured another model (16 MiB vs 32 MiB of weights) shows deltas that are
    no regression: the comparison warns. Where nothing can be compared it says so in words (it
    printed Python's "(2, 1)" and "None")."""
    base = write_run(tmp_path / "base", fake_results(processes=(2,)))
    meta = metadata(processes=[2])
    meta["run"].update(model="my.onnx", weights_bytes=512 * MIB)
    other = write_run(tmp_path / "other", fake_results(processes=(2,)), meta)
    warnings = compare(load_run(other), load_run(base)).warnings
    assert any(
        w.startswith("different models: current my.onnx (512.0 MiB of weights), baseline generated:mlp:256MiB")
        for w in warnings
    ), warnings
    assert not any("different models" in w for w in compare(load_run(base), load_run(base)).warnings)
    killed = write_run(tmp_path / "killed", [], metadata(status="running", processes=[2]))
    comparison = compare(load_run(base), load_run(killed))
    assert comparison.at == "each run's largest size (current N=2 x M=1, baseline nothing measured in both modes)"
    assert report_main([str(other), "--baseline", str(base), "--no-default-gates"]) == 0
    assert "NOT THE SAME THING: different models:" in capsys.readouterr().out


def test_a_baseline_of_another_model_target_or_workload_calls_no_regression(tmp_path, capsys):
    """Issue 43 item 7: a voice embedder against the generated chain was called "larger
    (REGRESSION)" and --fail-on-regression exited 1. Another model's content (its fingerprint,
    whatever its name), target or workload: the difference is named first and no change is called."""
    base = _three_repeats(tmp_path, "base", {0: 0.98, 1: 1.0, 2: 1.02})
    cases = {
        "content": {"model_fingerprint": "b" * 24},
        "target-options": {"target_options": {"fault": {"create": 1}}},
        "workload": {"inputs": {"shapes": {"x": [4, 16]}, "free_dims": {}, "values": {}}},
    }
    base_meta = load_run(base).meta
    base_meta["run"]["model_fingerprint"] = "a" * 24
    (base / "metadata.json").write_text(json.dumps(base_meta))
    for name, run_keys in cases.items():
        rows = scaled(fake_results(processes=(2,), repeats=3), {0: 1.20, 1: 1.22, 2: 1.25})
        meta = metadata(processes=[2], repeat=3)
        meta["run"].update({"model_fingerprint": "a" * 24} | run_keys)
        if name == "target-options":
            meta["run"]["target_options"] = dict(base_meta["run"]["target_options"], fault={"create": 1})
        other = write_run(tmp_path / name, rows, meta)
        comparison = compare(load_run(other), load_run(base))
        assert comparison.differences and not comparison.regressions, (name, comparison.differences)
        assert all(c.call.startswith("not called: different") for c in comparison.changes if c.delta is not None)
        args = [str(other), "--baseline", str(base), "--no-default-gates", "--fail-on-regression"]
        assert report_main(args) == 0, name
        out = capsys.readouterr().out
        first = out.index("NOT THE SAME THING: different")
        assert first < out.index("baseline: base"), out
    same = write_run(tmp_path / "same", scaled(fake_results(processes=(2,), repeats=3), {0: 1.2, 1: 1.22, 2: 1.25}))
    renamed = load_run(same).meta
    renamed["run"].update(model="/elsewhere/same.onnx", model_fingerprint="a" * 24)
    (same / "metadata.json").write_text(json.dumps(renamed))
    comparison = compare(load_run(same), load_run(base))  # the same content under another name compares
    assert not comparison.differences and comparison.regressions


def test_baseline_errors_are_one_line(tmp_path, capsys):
    run = write_run(tmp_path / "run", fake_results(processes=(2,)))
    assert report_main([str(run), "--baseline", str(tmp_path / "missing")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "no such run folder" in err


def test_runs_side_by_side_in_columns_with_absolute_values_and_versions(tmp_path):
    a = write_run(tmp_path / "night-a", fake_results(processes=(2, 4)))
    meta = metadata()
    meta["env"]["onnxruntime"] = "1.33.0"
    b = write_run(tmp_path / "night-b", fake_results(processes=(2, 4)), meta)
    html = render_runs([a, b], tmp_path / "both.html").path.read_text()
    table = html.split('<section class="comparison">')[1].split("</section>")[0]
    header = table.split("</thead>")[0]
    assert header.index("night-a") < header.index("night-b")  # one column per run
    for label in ("mapped", "heap", "saved (heap − mapped)", "speed-up", "PSS ratio", "onnxruntime"):
        assert f"<td>{label}</td>" in table, label
    assert "768.0 MiB" in table  # absolute saving at N=4 (law: 3 x 256 MiB)
    assert '<td class="differs">1.33.0</td>' in table


def test_projection_defaults_to_the_measured_model_and_follows_project_to(tmp_path):
    small = write_run(tmp_path / "small", fake_results(processes=(1, 2)))
    html = render_runs([small]).path.read_text()
    assert "Projection for 8 sessions of a 256.0 MiB model" in html  # measured weights, max(8, 2 x 2)
    html = render_runs([small], project_to=(16, 4 * 1024 * MIB)).path.read_text()
    assert "Projection for 16 sessions of a 4.0 GiB model" in html
    assert report_main([str(small), "--project-to", "3x1GiB"]) == 0
    assert "Projection for 3 sessions of a 1.0 GiB model" in (small / "report.html").read_text()
    assert report_main([str(small), "--project-to", "3x1G"]) == 2


def test_a_saving_beyond_the_shared_weights_is_flagged(tmp_path):
    """Sharing S sessions' weights saves at most (S-1) x W: a larger measured saving is stated
    with that bound, not credited to the mapping (a 543 KiB model 'saved' 3 MiB)."""
    from report_fixtures import Law, fake_results, metadata, write_run

    from harness.core.headline import headline_sentence
    from harness.core.rundata import load_run
    from harness.core.verdict import judge

    small = Law(weights=1024**2, per_session=72 * 1024**2)
    rows = fake_results(law=small, processes=(2,))
    heavier = [
        r if r.mode == "mapped" else type(r)(**{**r.__dict__, "pss_bytes": r.pss_bytes + 8 * 1024**2}) for r in rows
    ]
    meta = metadata(weights_bytes=small.weights, processes=[2])
    sentence = headline_sentence(judge(load_run(write_run(tmp_path / "r", heavier, meta, law=small))))
    assert "more than sharing the weights can explain" in sentence, sentence
    plain = headline_sentence(judge(load_run(write_run(tmp_path / "p", rows, meta, law=small))))
    assert "more than sharing" not in plain, plain
