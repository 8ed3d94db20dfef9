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
    assert named == {"mapped summed PSS", "saving (heap - mapped PSS)", "mapped summed USS"}, lines
    assert all(("p=" in line or "p<" in line) and "minimum effect" in line and "->" in line for line in lines)


def test_json_holds_every_figure_with_values_delta_p_threshold_and_call(runs, tmp_path):
    out = tmp_path / "cmp.json"
    code = report_main([str(runs["bigger"]), "--baseline", str(runs["base"]), "--no-default-gates", "--json", str(out)])
    assert code == 0  # without --fail-on-regression a regression is reported, not an exit code
    doc = json.loads(out.read_text())
    assert doc["format_version"] == 1 and doc["kind"] == "comparison" and doc["alpha"] == 0.01
    (comparison,) = doc["comparisons"]
    assert comparison["baseline"] == "base" and comparison["current"] == "bigger"
    figures = {f["key"]: f for f in comparison["figures"]}
    mapped = figures["mapped_fair"]
    assert len(mapped["baseline"]["repeats"]) == 3 and len(mapped["current"]["repeats"]) == 3
    assert mapped["delta"] == pytest.approx(mapped["current"]["value"] - mapped["baseline"]["value"])
    assert mapped["p_value"] < 0.01 and mapped["threshold"] >= 1024**2
    assert mapped["call"] == "larger" and mapped["regression"] is True
    assert figures["heap_fair"]["call"] == "no significant change" and figures["heap_fair"]["regression"] is False
    assert set(comparison["regressions"]) == {"mapped_fair", "saving", "mapped_uss"}
    assert "mapped_latency_p50" not in figures  # not measured by either run (no --runs)


def test_a_significant_but_small_change_needs_a_lower_min_effect(tmp_path):
    """+0.5 % with no spread at all is significant (p = 0) but below the 1 % default."""
    base = _run(tmp_path, "b", {0: 1.0, 1: 1.0, 2: 1.0})
    tiny = _run(tmp_path, "t", {0: 1.005, 1: 1.005, 2: 1.005})
    change = {c.metric.key: c for c in compare(load_run(tiny), load_run(base)).changes}["mapped_fair"]
    assert change.p_value == 0.0 and change.call == "no significant change"
    strict = parse_min_effect(["memory=0.1%", "memory=64KiB"])
    change = {c.metric.key: c for c in compare(load_run(tiny), load_run(base), strict).changes}["mapped_fair"]
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
    from harness.core.stats import welch

    init = next(m for m in metrics_for("pss") if m.key == "mapped_init")
    base, slow = [0.057, 0.098, 0.055], [1.03, 1.68, 3.00]
    assert welch(base, slow).p > 0.05
    change = Change(init, base, slow)
    assert change.scale == "log" and change.p_value < 0.01 and change.call == "slower" and change.regressed
    memory = next(m for m in metrics_for("pss") if m.key == "saving")
    assert Change(memory, [1.0, 2.0, 3.0], [4.0, 5.0, 6.0]).scale == "linear"
    assert Change(init, [0.0, 0.1, 0.1], [0.2, 0.3, 0.2]).scale == "linear"  # a zero has no log
