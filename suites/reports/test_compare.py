"""`harness report RUN --baseline RUN0`: --json, --fail-on-regression and --min-effect on
synthetic run folders (test inputs with known per-repeat noise, no timing measured)."""

from __future__ import annotations

import json

import pytest
from report_fixtures import fake_results, metadata, write_run
from test_headline import scaled

from harness.core.compare import MinEffect, compare, parse_min_effect
from harness.core.errors import InputError
from harness.core.rundata import load_run
from reports import report_main


def _run(tmp_path, name, factors, repeats=3):
    rows = scaled(fake_results(processes=(2,), repeats=repeats), factors)
    return write_run(tmp_path / name, rows, metadata(processes=[2], repeat=repeats))


@pytest.fixture
def runs(tmp_path):
    """base and same: one distribution (±1 % noise); bigger: mapped memory +20 %."""
    return {
        "base": _run(tmp_path, "base", {0: 0.99, 1: 1.0, 2: 1.01}),
        "same": _run(tmp_path, "same", {0: 1.01, 1: 0.99, 2: 1.0}),
        "bigger": _run(tmp_path, "bigger", {0: 1.19, 1: 1.2, 2: 1.21}),
    }


def test_the_identical_pair_exits_0_and_the_regression_exits_1_naming_it(runs, capsys):
    args = ["--baseline", str(runs["base"]), "--no-default-gates", "--fail-on-regression"]
    assert report_main([str(runs["same"]), *args]) == 0
    out = capsys.readouterr().out
    assert "regressions: none" in out and "REGRESSION" not in out
    assert report_main([str(runs["bigger"]), *args]) == 1
    lines = [x for x in capsys.readouterr().out.splitlines() if x.startswith("regression [")]
    named = {line.split(": ")[1].rsplit(" ", 1)[0] for line in lines}
    # called on USS only: PSS, which other processes move, is shown and never called
    assert named == {"mapped summed USS", "saving (heap - mapped USS)"}, lines
    assert all(("p=" in line or "p<" in line) and "minimum effect" in line and "->" in line for line in lines)
    assert all(
        line.endswith("likely cause: not a package (no version differs): the machine, or what it ran beside the runs")
        for line in lines
    ), lines


def test_json_holds_every_figure_with_values_delta_p_threshold_and_call(runs, tmp_path):
    out = tmp_path / "cmp.json"
    code = report_main([str(runs["bigger"]), "--baseline", str(runs["base"]), "--no-default-gates", "--json", str(out)])
    assert code == 0  # without --fail-on-regression a regression is reported, not an exit code
    doc = json.loads(out.read_text())
    assert doc["format_version"] == 1 and doc["kind"] == "comparison" and doc["alpha"] == 0.01
    (comparison,) = doc["comparisons"]
    assert comparison["baseline"] == "base" and comparison["current"] == "bigger"
    figures = {f["key"]: f for f in comparison["figures"]}
    mapped = figures["mapped_uss"]
    assert len(mapped["baseline"]["repeats"]) == 3 and len(mapped["current"]["repeats"]) == 3
    assert mapped["delta"] == pytest.approx(mapped["current"]["value"] - mapped["baseline"]["value"])
    assert mapped["p_value"] < 0.01 and mapped["threshold"] >= 1024**2
    assert mapped["call"] == "larger" and mapped["regression"] is True
    assert figures["heap_uss"]["call"] == "no significant change" and figures["heap_uss"]["regression"] is False
    pss = figures["mapped_fair"]  # in the document, with its p-value, but not called
    assert pss["p_value"] < 0.01 and pss["regression"] is False and "move PSS" in pss["not_called_because"]
    assert pss["call"].startswith("not called: other processes sharing ORT's pages move PSS")
    assert set(comparison["regressions"]) == {"mapped_uss", "saving_uss"}
    assert comparison["likely_cause"].startswith("likely cause: not a package")
    assert "mapped_latency_p50" not in figures  # not measured by either run (no --runs)


def test_a_significant_but_small_change_needs_a_lower_min_effect(tmp_path):
    """+0.5 % with no spread at all is significant (p = 0) but below the 1 % default."""
    base = _run(tmp_path, "b", {0: 1.0, 1: 1.0, 2: 1.0})
    tiny = _run(tmp_path, "t", {0: 1.005, 1: 1.005, 2: 1.005})
    change = {c.metric.key: c for c in compare(load_run(tiny), load_run(base)).changes}["mapped_uss"]
    assert change.p_value == 0.0 and change.call == "no significant change"
    strict = parse_min_effect(["memory=0.1%", "memory=64KiB"])
    change = {c.metric.key: c for c in compare(load_run(tiny), load_run(base), strict).changes}["mapped_uss"]
    assert change.call == "larger" and change.threshold == pytest.approx(max(0.001 * change.baseline_value, 65536))


def test_min_effect_parsing():
    assert parse_min_effect([]) == MinEffect()
    assert parse_min_effect(["time=10%", "memory=2MiB"]) == MinEffect(time=0.10, memory_bytes=2 * 1024**2)
    for bad, words in [
        ("speed=5%", "KIND one of memory, time"),
        ("time=5ms", "a time effect is a percent"),
        ("memory=lots", "neither a percent"),
        ("memory=150%", "below 100"),
        ("memory", "KIND=VALUE"),
    ]:
        with pytest.raises(InputError, match=words):
            parse_min_effect([bad])
    with pytest.raises(InputError, match="given twice"):
        parse_min_effect(["time=1%", "time=2%"])


@pytest.mark.parametrize(
    ("extra", "words"),
    [
        (["--json", "{tmp}/x.json"], "--json compares with a baseline"),
        (["--fail-on-regression"], "--fail-on-regression compares with a baseline"),
        (["--min-effect", "time=5%"], "--min-effect sets when a change"),
        (["--baseline", "{base}", "--min-effect", "time=fast"], "a time effect is a percent"),
        (["--baseline", "{base}", "--json", "{base}/results.csv"], "--json {base}/results.csv: is one of"),
        (["--baseline", "{base}", "--json", "{tmp}/nowhere/x.json"], "output folder does not exist"),
    ],
)
def test_bad_comparison_options_are_one_line_exit_2(runs, tmp_path, capsys, extra, words):
    fill = {"tmp": str(tmp_path), "base": str(runs["base"])}
    args = [a.format(**fill) for a in extra]
    assert report_main([str(runs["same"]), "--no-default-gates", *args]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and words.format(**fill) in err, err


def test_runs_of_different_sizes_call_nothing(tmp_path):
    base = _run(tmp_path, "b", {})
    rows = fake_results(processes=(4,), repeats=3)
    other = write_run(tmp_path / "n4", rows, metadata(processes=[4], repeat=3))
    comparison = compare(load_run(other), load_run(base))
    assert all(c.call.startswith("not called: the runs were measured at different sizes") for c in comparison.changes)
    assert not comparison.regressions


def test_times_are_tested_on_the_log_scale():
    """Times whose noise is multiplicative: one run ~20x slower with a wide spread (the
    per-repeat init of a run whose mapping fell back, measured: 0.057, 0.098, 0.055 s vs 1.03,
    1.68, 3.00 s). Welch on the raw values misses it (p = 0.087); on their logs every repeat of
    one run is far beyond the other's and the change is called. Bytes stay linear."""
    from harness.core.compare import Change, metrics_for
    from harness.core.metrics import FAIR
    from harness.core.stats import welch

    init = next(m for m in metrics_for(FAIR[0]) if m.key == "mapped_init")
    base, slow = [0.057, 0.098, 0.055], [1.03, 1.68, 3.00]
    assert welch(base, slow).p > 0.05
    change = Change(init, base, slow)
    assert change.scale == "log" and change.p_value < 0.01 and change.call == "slower" and change.regressed
    memory = next(m for m in metrics_for(FAIR[0]) if m.key == "saving")
    assert Change(memory, [1.0, 2.0, 3.0], [4.0, 5.0, 6.0]).scale == "linear"
    assert Change(init, [0.0, 0.1, 0.1], [0.2, 0.3, 0.2]).scale == "linear"  # a zero has no log


def _pss_offset(rows, offset: int):
    """Test input: every worker's PSS moved by ``offset`` bytes, USS and private untouched: what
    other processes sharing ORT's library pages do to a run (measured: up to 10 MiB of summed
    PSS between identical runs, USS within 0.37 MiB)."""
    from dataclasses import replace

    return [replace(r, pss_bytes=r.pss_bytes + offset) for r in rows]


def test_a_pss_offset_of_identical_code_calls_no_change(tmp_path, capsys):
    """Two identical runs (4 MiB, N=1,2, 3 repeats) once gave "mapped summed PSS +3.5 MiB,
    p<0.0001, REGRESSION" and exit 1: repeats inside a run vary less than runs do, so the t-test
    over repeats called the run-to-run PSS offset a change. PSS is shown and never called."""
    base = _run(tmp_path, "base", {0: 0.999, 1: 1.0, 2: 1.001})
    rows = _pss_offset(scaled(fake_results(processes=(2,), repeats=3), {0: 1.001, 1: 1.0, 2: 0.999}), 2 * 1024**2)
    moved = write_run(tmp_path / "moved", rows, metadata(processes=[2], repeat=3))
    figures = {c.metric.key: c for c in compare(load_run(moved), load_run(base)).changes}
    pss = figures["mapped_fair"]
    assert pss.p_value < 0.01 and pss.delta >= 3.5 * 1024**2  # what the old rule called a regression
    assert not pss.changed and pss.call.startswith("not called: other processes sharing ORT's pages move PSS")
    assert figures["mapped_uss"].call == "no significant change"
    code = report_main([str(moved), "--baseline", str(base), "--no-default-gates", "--fail-on-regression"])
    out = capsys.readouterr().out
    assert code == 0 and "regressions: none" in out and "REGRESSION" not in out, out


def test_the_saving_is_the_headline_s_in_the_comparison(tmp_path):
    """One definition: the saving is the difference of the two medians, in the run's sentence,
    headline.json and `report --baseline` alike (before: the comparison took the median of the
    per-repeat differences, 190.3 MiB beside the sentence's 192.2 MiB for the same run)."""
    from harness.core.headline import per_n

    def run(name, mapped, heap):
        rows = scaled(scaled(fake_results(processes=(2,), repeats=3), mapped), heap, modes=("heap",))
        return write_run(tmp_path / name, rows, metadata(processes=[2], repeat=3))

    base = run("base", {0: 1.0, 1: 1.0, 2: 1.0}, {0: 1.0, 1: 1.0, 2: 1.0})
    skew = run("skew", {0: 0.9, 1: 1.0, 2: 1.3}, {0: 1.3, 1: 0.9, 2: 1.0})
    changes = {c.metric.key: c for c in compare(load_run(skew), load_run(base)).changes}
    (entry,) = per_n(load_run(skew).summary, "cpu")
    per_repeat = sorted(changes["saving"].current)
    assert per_repeat[1] != pytest.approx(entry["saving"]["bytes"])  # the two definitions differ here
    assert changes["saving"].current_value == pytest.approx(entry["saving"]["bytes"])
    assert changes["mapped_pss_ratio"].current_value == pytest.approx(entry["ratios"]["mapped_pss_ratio"])


def test_a_regression_names_the_package_version_that_changed(tmp_path, capsys):
    base = _run(tmp_path, "base", {0: 0.99, 1: 1.0, 2: 1.01})
    meta = metadata(processes=[2], repeat=3)
    meta["env"]["onnxruntime"] = "1.33.0"
    bigger = write_run(
        tmp_path / "bigger", scaled(fake_results(processes=(2,), repeats=3), {0: 1.19, 1: 1.2, 2: 1.21}), meta
    )
    assert report_main([str(bigger), "--baseline", str(base), "--no-default-gates", "--fail-on-regression"]) == 1
    out = capsys.readouterr().out
    lines = [x for x in out.splitlines() if x.startswith("regression [")]
    assert lines and all(line.endswith("likely cause: onnxruntime 1.32.0 -> 1.33.0") for line in lines), lines
    assert "likely cause: onnxruntime 1.32.0 -> 1.33.0" in out.split("regression [")[0]  # under the table too


def test_runs_with_other_target_options_are_warned_about(tmp_path):
    base = _run(tmp_path, "base", {})
    meta = metadata(processes=[2], repeat=3)
    meta["run"]["target_options"] = dict(meta["run"]["target_options"], fault={"create": 1})
    faulty = write_run(tmp_path / "fault", fake_results(processes=(2,), repeats=3), meta)
    warnings = compare(load_run(faulty), load_run(base)).warnings
    assert "different cpu options (fault)" in warnings, warnings


@pytest.mark.parametrize(
    "run",
    [
        {"workload": "generate", "generate": {"prompt_ids": [1, 2], "new_tokens": 8}},
        {"workload": "infer"},  # the same as an older folder without the key: no difference
    ],
    ids=["generate-vs-infer", "infer-vs-no-key"],
)
def test_a_generate_run_is_not_compared_with_an_inference_run(tmp_path, run):
    base = _run(tmp_path, "base", {})
    meta = metadata(processes=[2], repeat=3)
    meta["run"].update(run)
    other = write_run(tmp_path / "other", fake_results(processes=(2,), repeats=3), meta)
    differences = compare(load_run(other), load_run(base)).differences
    assert differences == (["different workload (workload)"] if "generate" in run else []), differences


def test_the_model_fingerprint_follows_the_weights_not_the_place_or_the_outputs(tmp_path):
    """Issue 43 item 7: `--baseline` compares model content by `model_fingerprint`: a copy of the
    model elsewhere is the same model, one changed weight byte is another; its reference outputs
    do not enter (ORT rounds them differently by CPU and version)."""
    import shutil

    from harness.prep.folder import PreparedModel, TensorEntry
    from harness.prep.reference import content_fingerprint

    def model(folder):
        folder.mkdir()
        (folder / "weights.bin").write_bytes(bytes(range(256)) * 1024)
        (folder / "reference.npz").write_bytes(b"outputs of one machine")
        tensor = TensorEntry("w", "float32", [256, 256], 0, 256 * 1024)
        return PreparedModel(folder, "m.onnx", [tensor], {"x": [1, 256]}, {"x": 1}, ["y"], 256 * 1024)

    a = model(tmp_path / "a")
    moved = PreparedModel(**{**a.__dict__, "folder": tmp_path / "moved"})
    shutil.copytree(a.folder, moved.folder)
    (moved.folder / "reference.npz").write_bytes(b"outputs of another machine")
    assert content_fingerprint([a]) == content_fingerprint([moved])
    data = bytearray((moved.folder / "weights.bin").read_bytes())
    data[0] ^= 1
    (moved.folder / "weights.bin").write_bytes(bytes(data))
    assert content_fingerprint([a]) != content_fingerprint([moved])
