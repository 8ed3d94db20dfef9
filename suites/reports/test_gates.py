"""Gate expressions: parsing, evaluation against headline(), defaults, gates files."""

from __future__ import annotations

import pytest
from report_fixtures import MIB, Law, fail_worker, fake_results, metadata

from harness.core.gates import (
    default_gates,
    evaluate,
    evaluate_gate,
    gate_values,
    known_metrics,
    parse_gate,
    read_gates_file,
)
from harness.core.summary import headline, summarize


def test_known_metrics_are_headline_keys():
    keys = set(headline(summarize(fake_results())))
    assert keys <= set(known_metrics())
    assert set(known_metrics()) - keys == {"weights_bytes"}


@pytest.mark.parametrize("op", ["<=", "<", ">=", ">", "==", "!="])
def test_every_operator_parses(op):
    gate = parse_gate(f" mapped_pss_ratio {op} 0.35 ")
    assert (gate.check.metric, gate.check.op, gate.check.threshold) == ("mapped_pss_ratio", op, 0.35)


@pytest.mark.parametrize(
    "expr, value, status",
    [
        ("mapped_pss_ratio<=0.35", 0.30, "pass"),
        ("mapped_pss_ratio<=0.35", 0.36, "fail"),
        ("init_ratio<0.05", 0.05, "fail"),
        ("failed_workers==0", 0, "pass"),
        ("failed_workers!=0", 0, "fail"),
        ("mapped_uss_ratio>0.1", 0.2, "pass"),
        ("mapped_uss_ratio>=1e-1", 0.1, "pass"),
    ],
)
def test_evaluate(expr, value, status):
    metric = parse_gate(expr).check.metric
    assert evaluate_gate(parse_gate(expr), {metric: value}).status == status


@pytest.mark.parametrize(
    "expr, needle",
    [
        ("no_such_metric<=1", "unknown metric 'no_such_metric'"),
        ("mapped_pss_ratio=0.3", "expected METRIC OP NUMBER"),
        ("mapped_pss_ratio<=", "expected METRIC OP NUMBER"),
        ("mapped_pss_ratio<=abc", "not a number"),
        ("", "empty expression"),
        ("mapped_pss_ratio<=0.3 if", "expected METRIC OP NUMBER"),
        ("mapped_pss_ratio<=0.3 if nope>1", "unknown metric 'nope'"),
    ],
)
def test_malformed_gate_is_one_line_value_error_listing_metrics(expr, needle):
    with pytest.raises(ValueError) as info:
        parse_gate(expr)
    message = str(info.value)
    assert needle in message and "\n" not in message
    assert "known metrics: " in message and "mapped_uss_ratio" in message


def test_missing_value_fails_as_not_measured():
    result = evaluate_gate(parse_gate("mapped_pss_ratio<=0.35"), {"mapped_pss_ratio": None})
    assert (result.status, result.reason, result.passed) == ("fail", "not measured", False)
    assert evaluate_gate(parse_gate("init_ratio<=0.3"), {}).reason == "not measured"


def test_conditions_skip_instead_of_failing():
    gate = parse_gate("mapped_uss_ratio<=0.5 if processes>=2 and weights_bytes>=128MiB")
    assert gate.when[1].threshold == 128 * MIB
    base = {"mapped_uss_ratio": 0.9, "processes": 2, "weights_bytes": 256 * MIB}
    assert evaluate_gate(gate, base).status == "fail"
    assert evaluate_gate(gate, base | {"processes": 1}).status == "skip"
    assert evaluate_gate(gate, base | {"weights_bytes": 16 * MIB}).status == "skip"
    skipped = evaluate_gate(gate, base | {"processes": None})
    assert skipped.passed and "not measured" in skipped.reason


@pytest.mark.parametrize(
    "expr",
    [
        "create_ratio<=50ms",
        "init_ratio<=2s",
        "mapped_pss_ratio<=1GiB",
        "failed_workers==1KiB",
        "init_ratio<=nan",
        "init_ratio<=1e999",
    ],
)
def test_units_only_where_the_metric_has_them(expr):
    """A unit on a ratio or a count is a mistake (it used to be accepted: 50 ms on a ratio)."""
    with pytest.raises(ValueError, match="bad gate"):
        parse_gate(expr)
    assert parse_gate("weights_bytes>=128MiB").check.threshold == 128 * 1024**2


def test_gates_file(tmp_path):
    path = tmp_path / "gates.txt"
    path.write_text("# nightly gates\n\nmapped_pss_ratio<=0.35  # PSS\n  failed_workers==0\n")
    assert read_gates_file(path) == ["mapped_pss_ratio<=0.35", "failed_workers==0"]
    with pytest.raises(ValueError, match="gates file"):
        read_gates_file(tmp_path / "missing.txt")


def _defaults(target: str, **options) -> list:
    """The gates a run of ``target`` records for itself (what the runner writes to metadata)."""
    return default_gates(metadata(target, target_options=options))


def test_default_gates_pass_on_a_healthy_sweep_and_catch_no_sharing():
    values = gate_values(summarize(fake_results()))
    gates = _defaults("cpu")
    assert [r.status for r in evaluate(gates, values)] == ["pass"] * len(gates)
    assert all(g.why for g in gates)
    # no sharing at all: both modes cost a copy each (test input from the same law)
    unshared = gate_values(summarize(fake_results(ep_file_mapping="unavailable")))
    failing = {r.gate.check.metric for r in evaluate(gates, unshared) if not r.passed}
    assert {"mapped_uss_ratio", "mapped_pss_ratio", "init_ratio"} <= failing


def test_default_gates_skip_saving_checks_for_small_weights_and_one_process():
    small = gate_values(summarize(fake_results(law=Law(weights=16 * MIB))))
    one = gate_values(summarize(fake_results(processes=(1,))))
    for values in (small, one):
        results = evaluate(_defaults("cpu"), values)
        assert all(r.passed for r in results)
        assert any(r.status == "skip" for r in results)


def test_default_gates_per_target_and_fault_injection():
    from harness.contract.options import RunOptions
    from harness.targets import get_target

    assert [e for e, _ in get_target("qnn").default_gates(RunOptions(target="qnn"))] == ["failed_workers==0"]
    injected = RunOptions(target="cpu", target_options={"map_failures": 2})
    assert [e for e, _ in get_target("cpu").default_gates(injected)] == ["failed_workers==0"]
    failed = gate_values(summarize(fail_worker(fake_results())))
    assert not evaluate(_defaults("qnn"), failed)[0].passed
    # runs written before targets recorded their gates: correctness only
    assert [g.expr for g in default_gates({})] == ["failed_workers==0"]
