"""Rules of issue 18 over constructed rows: one definition of every factor (the sentence's
factor is the ratio of the two times it prints), physics bounds on derived figures, the
contention rule and its "contended" timing gates, and the memory split against the control.

The rows are test inputs built from a known law (report_fixtures), never measurements: the
same rules over real runs are checked in suites/models/test_figures.py.
"""

from __future__ import annotations

import re
from dataclasses import replace

import pytest
from report_fixtures import MIB, Law, fake_results, metadata, write_run

from harness.core.gates import parse_gate
from harness.core.headline import factor_problem, headline_document
from harness.core.rundata import load_run
from harness.core.units import parse_size
from harness.core.verdict import judge
from harness.runner.memory import copied_bytes

#: Per repeat (mapped, heap) init times whose median of per-repeat ratios (1/90.9) differs from
#: the ratio of the medians (1/50): the disagreement issue 18 saw ("74.3x (80.0 ms vs 7.27 s)").
INIT_BY_REPEAT = {0: (0.010, 1.0), 1: (0.020, 1.0), 2: (0.080, 7.27)}

_SPEED = re.compile(r"sessions started ([\d.]+)x (faster|SLOWER) \(([\d.]+ [a-z]+) vs ([\d.]+ [a-z]+) median init")


def _seconds(text: str) -> float:
    value, unit = text.split()
    return float(value) * {"s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6}[unit]


def _with_init(rows):
    out = []
    for r in rows:
        mapped, heap = INIT_BY_REPEAT[r.repeat]
        init = mapped if r.mode == "mapped" else heap
        out.append(replace(r, init_s=init, load_s=init * 0.4, create_s=init * 0.6))
    return out


def _printed_factor(sentence: str) -> tuple[float, float]:
    """(the factor the sentence states, the ratio of the two times it prints)."""
    match = _SPEED.search(sentence)
    assert match, sentence
    factor, _, mapped, heap = match.groups()
    return float(factor), _seconds(heap) / _seconds(mapped)


def test_the_sentence_factor_is_the_ratio_of_the_times_it_prints(tmp_path):
    run = load_run(write_run(tmp_path / "run", _with_init(fake_results(processes=(2,), repeats=3))))
    judgement = judge(run)
    doc = headline_document(judgement)
    factor, printed = _printed_factor(doc["sentence"])
    assert factor == pytest.approx(printed, rel=0.01), doc["sentence"]
    assert not factor_problem(doc["sentence"]), "the check every suite run makes agrees"
    assert factor_problem("sessions started 74.3x faster (80.0 ms vs 7.27 s median init).")
    assert factor == pytest.approx(50.0, rel=0.01), "the ratio of the medians, not the median of ratios (90.9)"
    top = doc["per_n"][-1]
    assert top["ratios"]["init_ratio"] == pytest.approx(top["mapped"]["init_s_median"] / top["heap"]["init_s_median"])
    assert judgement.values["init_ratio"] == pytest.approx(top["ratios"]["init_ratio"]), "gates judge the same"
    assert top["ratio_range"]["init_ratio"] == pytest.approx([0.010, 0.020]), "the spread is kept"


def _several_heap_copies(rows, weights: int, copies: float):
    """Test input: heap workers holding ``copies`` copies of the weights each (ORT's own heap
    path can: ort-native's heap workers held 2.9 each), mapped workers as the law says."""
    extra = int((copies - 1) * weights)
    return [
        replace(
            r,
            rss_bytes=r.rss_bytes + extra,
            pss_bytes=r.pss_bytes + extra,
            uss_bytes=r.uss_bytes + extra,
            private_bytes=r.private_bytes + extra,
        )
        if r.mode == "heap"
        else r
        for r in rows
    ]


def test_impossible_weight_copies_are_implausible_never_a_pass(tmp_path):
    law = Law(weights=64 * MIB)
    rows = _several_heap_copies(fake_results(law=law, processes=(2,)), law.weights, 2.9)
    run = load_run(write_run(tmp_path / "run", rows, law=law))
    judgement = judge(run, [parse_gate("mapped_weight_copies<=1.25")])
    gate = next(g for g in judgement.gates if g.gate.expr == "mapped_weight_copies<=1.25")
    assert gate.status == "fail" and gate.reason.startswith("not measured: implausible"), gate.reason
    assert "below 0 copies" in gate.reason and "heap_copies_per_session = 4.27" in gate.reason
    assert judgement.values["mapped_weight_copies"] is None
    # (fixed + 2 x per-session + 2 x 2.9 W) / 2 W: several copies per session is possible, kept
    assert judgement.values["heap_copies_per_session"] == pytest.approx((32 + 144 + 2 * 2.9 * 64) / 128, rel=0.01)
    quiet = judge(run, use_default_gates=False)
    assert quiet.verdict == "incomplete", "no gate asks, but a figure physics forbids is missing evidence"
    assert any(r.startswith("implausible: mapped_weight_copies") for r in quiet.reasons), quiet.reasons


def test_copies_of_weights_smaller_than_the_noise_are_not_measurable_not_implausible(tmp_path):
    """88 KiB of weights, heap workers 25 MiB above mapped ones on the same path (a real qnn run
    on the simulator, where the feature is off): -286 "copies" is noise, not a broken sample.
    The figure is no measurement (a gate on it fails as not measured), the run is not made
    incomplete by it; with weights above the noise the same excess is implausible."""
    law = Law(weights=88 * 1024)
    rows = _several_heap_copies(fake_results(law=law, processes=(1,)), law.weights, 1 + 25 * MIB / law.weights)
    run = load_run(write_run(tmp_path / "run", rows, law=law))
    quiet = judge(run, use_default_gates=False)
    assert quiet.values["mapped_weight_copies"] is None and quiet.values["heap_copies_per_session"] is None
    assert quiet.verdict == "pass", quiet.reasons
    gated = judge(run, [parse_gate("mapped_weight_copies<=1.25")], use_default_gates=False)
    gate = next(g for g in gated.gates if g.gate.expr == "mapped_weight_copies<=1.25")
    assert gate.status == "fail" and "not measurable" in gate.reason and "88.0 KiB" in gate.reason, gate.reason


def test_one_copy_per_heap_session_is_plausible(tmp_path):
    law = Law(weights=64 * MIB)
    run = load_run(write_run(tmp_path / "run", fake_results(law=law, processes=(2,)), law=law))
    judgement = judge(run, [parse_gate("mapped_weight_copies<=1.25")])
    assert judgement.values["mapped_weight_copies"] == pytest.approx(1.0)
    assert judgement.verdict == "pass", judgement.reasons


def _loaded(rows, load: float, share: float = 1.0):
    """Test input: the machine's load and each worker's CPU share as the runner records them."""
    return [replace(r, load_avg=load, cpu_count=2, cpu_s=share * 0.5, busy_s=0.5) for r in rows]


@pytest.mark.parametrize(("load", "share"), [(10.0, 1.0), (0.5, 0.3)], ids=["load-above-cpus", "low-cpu-share"])
def test_timings_on_a_contended_machine_are_not_judged(tmp_path, load, share):
    rows = _loaded(fake_results(law=Law(weights=256 * MIB), processes=(2,)), load, share)
    run = load_run(write_run(tmp_path / "run", rows))
    assert all(s.contended for s in run.summary)
    judgement = judge(run)
    by_expr = {g.gate.expr.split("<=")[0]: g for g in judgement.gates}
    assert by_expr["init_ratio"].status == "contended", by_expr["init_ratio"].reason
    assert by_expr["init_ratio"].inconclusive and not by_expr["init_ratio"].passed, "undecided, never a pass"
    assert "2 headline group(s) were contended" in by_expr["init_ratio"].reason
    assert by_expr["mapped_pss_ratio"].status == "pass", "memory gates keep their verdicts"
    assert judgement.verdict == "pass", judgement.reasons
    doc = headline_document(judgement)
    assert doc["contention"]["contended_groups"] == 2 and doc["contention"]["groups"] == 2
    assert "contended machine" in doc["sentence"] and "timing gates read 'contended'" in doc["sentence"]
    assert any(n.title == "Timings taken on a contended machine" for n in judgement.notes)


def test_an_idle_machine_judges_timings(tmp_path):
    # three repeats: one repeat decides no timing gate (its interval needs a spread)
    rows = _loaded(fake_results(law=Law(weights=256 * MIB), processes=(2,), repeats=3), 0.5, 0.9)
    judgement = judge(load_run(write_run(tmp_path / "run", rows)))
    init = next(g for g in judgement.gates if g.gate.expr.startswith("init_ratio"))
    assert init.status == "pass" and "contended" not in headline_document(judgement)["sentence"]


def test_copied_bytes_is_bounded_by_the_control():
    control = 30 * MIB
    assert copied_bytes(control + 64 * MIB, control, 0) == (64 * MIB, "")
    assert copied_bytes(control + 5 * MIB, control, 5 * MIB) == (0, ""), "file pages are no copy"
    value, why = copied_bytes(control - 10 * MIB, control, 0)
    assert value is None and why.startswith("implausible copied_bytes"), why
    assert copied_bytes(None, control, 0) == (None, "") and copied_bytes(control, None, 0) == (None, "")


def test_sentence_states_tensor_and_file_bytes_and_what_mapped_workers_touched(tmp_path):
    law = Law(weights=66 * MIB)
    rows = [
        replace(r, mapped_resident_bytes=23 * MIB if r.mode == "mapped" else 0, copied_bytes=0, runtime_bytes=30 * MIB)
        for r in fake_results(law=law, processes=(2,))
    ]
    # a saving beyond what sharing explains: the mapped workers hold less than the law says
    rows = [replace(r, pss_bytes=r.pss_bytes - 20 * MIB) if r.mode == "mapped" else r for r in rows]
    meta = metadata("cpu", processes=[2], weights_bytes=law.weights, weights_file_bytes=law.weights + 4096)
    judgement = judge(load_run(write_run(tmp_path / "run", rows, meta, law=law)))
    sentence = headline_document(judgement)["sentence"]
    assert "66.0 MiB of tensors in 66.0 MiB of weights files, which the heap path copies" in sentence, sentence
    assert "the mapped workers touched only 35% of the weights (23.0 MiB of 66.0 MiB resident each)" in sentence
    doc = headline_document(judgement)
    assert doc["weights_file_bytes"] == law.weights + 4096
    assert doc["per_n"][0]["mapped"]["mapped_resident_bytes_median"] == 23 * MIB
    assert parse_size("66MiB") == law.weights
