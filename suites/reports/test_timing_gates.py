"""Timing gates judged on the 95 % interval of their repeats (`harness.core.timing`): synthetic
per-repeat ratios and synthetic run folders, never a measured time."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest
from report_fixtures import fake_results, metadata, write_run

from harness.core.gates import evaluate_gate, parse_gate
from harness.core.headline import headline_document
from harness.core.rundata import load_run
from harness.core.timing import interval_status, is_timing, timing_repeats
from harness.core.verdict import gates_summary_line, judge
from reports import report_main


def test_timing_metrics_are_the_time_ratios():
    timing = ("init_ratio", "create_ratio", "peer_init_ratio", "latency_p50_ratio", "latency_mean_ratio")
    assert all(is_timing(m) for m in (*timing, "first_run_ratio", "startup_ratio", "throughput_ratio"))
    memory = ("mapped_pss_ratio", "mapped_uss_ratio", "peak_private_ratio", "failed_workers", "sessions")
    assert not any(is_timing(m) for m in memory)


@pytest.mark.parametrize(
    ("expr", "values", "status"),
    [
        ("init_ratio<=0.5", [0.05, 0.06, 0.04], "pass"),
        ("init_ratio<=0.5", [0.9, 0.95, 1.0], "fail"),
        ("init_ratio<=2", [0.42, 3.90, 1.8], "inconclusive"),  # the peer_init_ratio repeats
        ("init_ratio>=0.5", [0.9, 0.95, 1.0], "pass"),
        ("init_ratio>0.5", [0.05, 0.06, 0.04], "fail"),
        ("init_ratio==0.25", [0.25, 0.25], "pass"),
        ("init_ratio==0.25", [0.9, 0.95], "fail"),
        ("init_ratio!=0.25", [0.9, 0.95], "pass"),
        ("init_ratio<=0.5", [0.3], "inconclusive"),
        ("init_ratio<=0.5", [], "inconclusive"),
    ],
)
def test_interval_status(expr, values, status):
    gate = parse_gate(expr)
    got, interval, words = interval_status(gate.check.op, gate.check.threshold, values)
    assert got == status, words
    if len(values) < 2:
        assert interval is None and words == f"inconclusive: {len(values)} repeat{'' if len(values) == 1 else 's'}"
    else:
        assert interval.low <= interval.centre <= interval.high and "95% interval" in words


def test_a_gate_on_the_median_flipped_where_the_interval_does_not():
    """Benches of one distribution (log-normal around 1.6, the spread the issue saw), 3
    repeats each: the median gate ``<=2`` lands on both sides of 2; the interval gate never
    fails (1.6 does meet the threshold) and, with this noise, mostly cannot decide."""
    rng = random.Random(11)
    medians, statuses = [], []
    for _ in range(200):
        values = sorted(1.6 * rng.lognormvariate(0, 0.7) for _ in range(3))
        medians.append(values[1] <= 2)
        statuses.append(interval_status("<=", 2.0, values)[0])
    assert 0.2 < medians.count(False) / len(medians) < 0.8  # the old gate flips on noise
    assert "fail" not in statuses and statuses.count("inconclusive") > 0.9 * len(statuses)


def _timed_run(tmp_path, name, init_factor_by_repeat, repeats):
    """Mapped init times scaled per repeat (the heap's stay): synthetic timing noise."""
    rows = [
        replace(r, init_s=r.init_s * init_factor_by_repeat.get(r.repeat, 1.0)) if r.mode == "mapped" else r
        for r in fake_results(processes=(2,), repeats=repeats)
    ]
    return write_run(tmp_path / name, rows, metadata(processes=[2], repeat=repeats))


def test_one_repeat_leaves_a_default_timing_gate_not_judged_and_a_users_gate_incomplete(tmp_path, capsys):
    run = load_run(_timed_run(tmp_path, "one", {}, 1))
    judgement = judge(run)
    (init,) = [g for g in judgement.gates if g.gate.expr.startswith("init_ratio")]
    assert init.status == "inconclusive" and init.default and "inconclusive: 1 repeat" in init.reason
    assert not init.passed and not init.failed
    assert judgement.verdict == "pass" and judgement.not_judged == [init.gate.expr]
    assert "not judged (inconclusive, not a pass): init_ratio<=0.5" in judgement.verdict_line()
    assert gates_summary_line([judgement]).endswith(", 1 inconclusive (not passed)")
    asked = judge(run, [parse_gate("init_ratio<=0.3")])
    assert asked.verdict == "incomplete" and asked.exit_code == 1
    assert "1 gate(s) inconclusive: init_ratio<=0.3" in asked.reasons
    assert report_main([str(run.folder), "--gate", "init_ratio<=0.3"]) == 1
    assert "INCONCLUSIVE [one] init_ratio<=0.3" in capsys.readouterr().out


def test_three_repeats_decide_and_headline_json_carries_the_interval(tmp_path):
    run = load_run(_timed_run(tmp_path, "three", {0: 0.9, 1: 1.0, 2: 1.1}, 3))
    repeats = timing_repeats(run.summary)
    assert len(repeats["init_ratio"]) == 3 and repeats["peer_init_ratio"] == []
    judgement = judge(run, [parse_gate("init_ratio<=0.2"), parse_gate("init_ratio>=0.5")])
    by_expr = {g.gate.expr: g for g in judgement.gates}
    assert by_expr["init_ratio<=0.2"].status == "pass" and by_expr["init_ratio>=0.5"].status == "fail"
    doc = headline_document(judgement)
    gate = next(g for g in doc["gates"] if g["expr"] == "init_ratio<=0.2")
    low, high = gate["interval"]
    assert low < gate["value"] < high and gate["repeats"] == 3 and gate["status"] == "pass"
    assert gate["repeats_to_decide"] is None  # decided: nothing projected
    from harness.core.stats import ratio_interval

    near = f"init_ratio<={ratio_interval(repeats['init_ratio']).centre * 1.02 / 1.05:.4f}"  # its bound 2 % above
    undecided = next(g for g in headline_document(judge(run, [parse_gate(near)]))["gates"] if g["expr"] == near)
    assert undecided["status"] == "inconclusive" and undecided["repeats_to_decide"] > 3, undecided
    memory = next(g for g in doc["gates"] if g["expr"].startswith("mapped_pss_ratio"))
    assert memory["interval"] is None and memory["status"] == "pass"  # memory gates stay on the median


def test_without_repeats_given_a_gate_is_judged_on_its_value():
    """`evaluate_gate` without per-repeat values (an API caller) keeps the point comparison."""
    assert evaluate_gate(parse_gate("init_ratio<=0.5"), {"init_ratio": 0.1}).status == "pass"
    assert evaluate_gate(parse_gate("init_ratio<=0.5"), {"init_ratio": 0.1}, repeats={}).status == "inconclusive"


def test_every_timing_figure_carries_its_spread(tmp_path):
    """headline.json, the sentence, the terminal's lines and the report's headline table give a
    timing ratio with its repeats and spread, never as a bare median."""
    from harness.console import spread_lines
    from harness.core.headline import headline_sentence
    from reports import render_runs

    folder = _timed_run(tmp_path, "three", {0: 0.9, 1: 1.0, 2: 1.1}, 3)
    judgement = judge(load_run(folder))
    spread = headline_document(judgement)["timing_spread"]
    init = spread["init_ratio"]
    assert init["repeats"] == 3 and init["min"] < init["max"] and init["interval"][0] < init["interval"][1]
    assert init["min"] <= judgement.values["init_ratio"] <= init["max"]
    assert "over 3 repeats, 95% interval" in headline_sentence(judgement)
    lines = spread_lines(judgement)
    assert any(line.startswith("init_ratio ") and "over 3 repeats" in line for line in lines), lines
    html = render_runs([folder]).path.read_text()
    assert "over 3 repeats, 95% interval" in html
    one = judge(load_run(_timed_run(tmp_path, "one", {}, 1)))
    assert headline_document(one)["timing_spread"]["init_ratio"]["interval"] is None
    assert any("1 repeat: no spread" in line for line in spread_lines(one))


@pytest.mark.parametrize(
    ("expr", "values", "status"),
    [
        # issue 32: "passes at 1.0 (its interval's upper bound at most 1.05)"
        ("peer_init_ratio<=1", [0.99, 1.0, 1.01, 1.0, 0.995, 1.005], "pass"),  # about 0.99..1.01
        ("peer_init_ratio<=1", [1.02, 1.03, 1.04, 1.03, 1.025, 1.035], "pass"),  # above 1, within 5 %
        ("peer_init_ratio<=1", [0.95, 1.05, 1.15], "inconclusive"),  # straddles 1.05
        ("peer_init_ratio<=1", [1.06, 1.08, 1.07, 1.09], "fail"),  # all above 1.05
        ("peer_init_ratio<1", [1.049, 1.049], "pass"),
        ("init_ratio>=0.5", [0.48, 0.482, 0.484, 0.486, 0.488, 0.49], "pass"),  # within 5 % below 0.5 (0.476)
        ("init_ratio>=0.5", [0.44, 0.445, 0.45, 0.455, 0.46], "fail"),
        ("init_ratio==0.25", [0.255, 0.256, 0.257, 0.258], "pass"),  # inside 0.238..0.263
        ("init_ratio==0.25", [0.27, 0.271, 0.272, 0.273], "fail"),
        ("init_ratio!=0.25", [0.255, 0.256, 0.257, 0.258], "fail"),
    ],
)
def test_a_timing_threshold_is_read_within_the_minimum_time_effect(expr, values, status):
    """A timing gate's threshold is read within the 5 % minimum time effect (the one `report
    --baseline` calls a time change with): pass when the whole interval is within it, fail when
    the whole interval is beyond it, and the words name the bound it was judged against."""
    from harness.core.stats import MIN_TIME_EFFECT
    from harness.core.timing import TIMING_MARGIN

    assert TIMING_MARGIN == MIN_TIME_EFFECT == 0.05
    gate = parse_gate(expr)
    got, interval, words = interval_status(gate.check.op, gate.check.threshold, values)
    assert got == status, words
    assert "5% timing margin" in words


def test_two_equally_quick_loads_can_pass_a_gate_at_1_only_with_the_margin():
    """Ratios of two equal start-ups lie on both sides of 1.0: without a margin the gate ``<=1``
    stays inconclusive however tight the interval is; with it, it passes."""
    rng = random.Random(32)
    values = [rng.lognormvariate(0, 0.02) for _ in range(8)]
    assert interval_status("<=", 1.0, values, margin=0.0)[0] == "inconclusive"
    assert interval_status("<=", 1.0, values)[0] == "pass"


def _sequential(rows, drift):
    """``rows`` as a timing pass's rows, worker i of every group timed in round i under the same
    drift ``drift[i]`` (a clock that slows down over the pass)."""
    return [replace(r, start="sequential", init_s=r.init_s * drift[r.worker]) for r in rows]


def test_per_repeat_timing_ratios_are_paired_by_round_in_an_interleaved_run():
    """An interleaved timing pass: each repeat's ratio is the median over its rounds of the ratio
    of the two workers timed in that round; a run without interleaving keeps the ratio of the
    groups' medians. Synthetic times: the mapped worker of round i is 0.9 of the peer's, and
    a preempted peer worker (round 3, x3) moves neither statistic."""
    from types import SimpleNamespace

    from harness.core.summary import summarize
    from harness.core.timing import timing_rounds

    drift = {0: 1.0, 1: 1.4, 2: 1.9, 3: 2.5}
    rows = _sequential(fake_results(processes=(4,), repeats=2), drift)
    peer = [replace(r, target="ort-native", init_s=r.init_s / 0.9) for r in rows if r.mode == "mapped"]
    peer = [replace(r, init_s=r.init_s * 3) if r.worker == 3 else r for r in peer]
    rows += peer
    summary = summarize([*rows, *fake_results(processes=(4,), repeats=2)])  # and the concurrent pass
    interleaved = SimpleNamespace(run={"timing_pass": "interleaved"}, results=rows)
    repeats = timing_repeats(summary, timing_rounds(interleaved))
    assert repeats["peer_init_ratio"] == [pytest.approx(0.9), pytest.approx(0.9)]
    by_round = [
        next(r.init_s for r in rows if (r.repeat, r.worker, r.mode) == (0, i, "mapped") and r.target == "cpu")
        / next(r.init_s for r in rows if (r.repeat, r.worker, r.mode) == (0, i, "heap"))
        for i in range(4)
    ]
    assert repeats["init_ratio"][0] == pytest.approx(sorted(by_round)[1] / 2 + sorted(by_round)[2] / 2)
    grouped = SimpleNamespace(run={"timing_pass": "grouped"}, results=rows)
    assert timing_rounds(grouped) is None
    assert timing_repeats(summary, timing_rounds(grouped)) == timing_repeats(summary)


def _with_log_moments(n: int, centre: float, spread: float, seed: int = 5) -> list[float]:
    """``n`` positive ratios whose logs have exactly mean ``log(centre)`` and sample standard
    deviation ``spread``: what a run of n repeats would give if the centre and spread held."""
    import math
    import statistics

    rng = random.Random(seed)
    raw = [rng.gauss(0, 1) for _ in range(n)]
    mean, sd = statistics.fmean(raw), statistics.stdev(raw)
    return [centre * math.exp((x - mean) / sd * spread) for x in raw]


@pytest.mark.parametrize(("centre", "spread"), [(1.019, 0.19), (0.97, 0.1), (1.12, 0.25)])
def test_an_undecided_timing_gate_projects_the_repeats_that_would_decide_it(centre, spread):
    """The projection is what the interval needs: a run of that many repeats with the same centre
    and spread decides the gate, one repeat fewer does not; the reason and the result carry it."""
    gate = parse_gate("peer_init_ratio<=1")
    values = _with_log_moments(8, centre, spread)
    result = evaluate_gate(gate, {"peer_init_ratio": centre}, repeats={"peer_init_ratio": values})
    n = result.repeats_to_decide
    assert result.status == "inconclusive" and n is not None and n > 8, result.reason
    assert f"projected from this spread: about {n} repeats would decide it" in result.reason
    decided = interval_status("<=", 1.0, _with_log_moments(n, centre, spread))[0]
    assert decided == ("pass" if centre < 1.05 else "fail")
    assert interval_status("<=", 1.0, _with_log_moments(n - 1, centre, spread))[0] == "inconclusive"


def test_a_centre_on_the_bound_is_never_projected_to_be_decided():
    """A ratio whose centre sits on its bound (1 x 1.05) is undecided at any count: said so, and
    no count is given; a decided gate and a two-edged one carry no projection."""
    values = _with_log_moments(8, 1.05, 0.2)
    gate, peer = parse_gate("peer_init_ratio<=1"), "peer_init_ratio"
    result = evaluate_gate(gate, {peer: 1.05}, repeats={peer: values})
    assert result.status == "inconclusive" and result.repeats_to_decide is None
    assert "no repeat count up to 10000 decides it, the interval's centre 1.05 sits at its bound 1.05" in result.reason
    decided = evaluate_gate(parse_gate("init_ratio<=0.5"), {"init_ratio": 0.05}, repeats={"init_ratio": [0.05, 0.06]})
    assert decided.status == "pass" and decided.repeats_to_decide is None and "projected" not in decided.reason
    band = interval_status("==", 1.0, _with_log_moments(8, 1.05, 0.2))
    assert band[0] == "inconclusive" and "projected" not in band[2]


def test_a_lower_bound_gate_is_projected_against_threshold_over_the_margin():
    """``X>=T`` is decided against T / 1.05: a centre of 0.97 (above 1 / 1.05) projects a count
    at which it passes, and one repeat fewer stays undecided."""
    values = _with_log_moments(8, 0.97, 0.1)
    result = evaluate_gate(parse_gate("create_ratio>=1"), {"create_ratio": 0.97}, repeats={"create_ratio": values})
    n = result.repeats_to_decide
    assert result.status == "inconclusive" and n is not None and n > 8, result.reason
    assert interval_status(">=", 1.0, _with_log_moments(n, 0.97, 0.1))[0] == "pass"
    assert interval_status(">=", 1.0, _with_log_moments(n - 1, 0.97, 0.1))[0] == "inconclusive"
