"""Before a long qnn compile the user is told what will happen and roughly how long, from the
graph and a measured rate, with the quicker ways (issue 34 item 3: a float conv net was still
compiling after 15 minutes, nothing said so). `harness.targets.qnn.estimate`."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from harness.targets.qnn.estimate import (
    DEFAULT_RATES,
    TIMINGS_FILE,
    CompilePlan,
    GraphCost,
    graph_cost,
    load_rates,
    notice,
    record_timings,
)

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "models"))
import generated  # noqa: E402


def test_the_graph_cost_counts_convolutions_and_unrolled_recurrences(tmp_path):
    from harness.prep.inputs import fixed_shape_copy
    from harness.prep.onnxfile import load_onnx

    pnet = generated.pnet_model(tmp_path / "pnet.onnx")
    fixed = tmp_path / "pnet12.onnx"
    import onnx

    onnx.save(fixed_shape_copy(load_onnx(pnet, external_data=False), {"x": [1, 3, 12, 12]}), str(fixed))
    cost = graph_cost(fixed)
    # 10x10x10 x (3x3x3), then pool to 5x5, 16x3x3 x (10x3x3), 32x1x1 x (16x3x3)
    assert cost.macs == 1000 * 27 + 144 * 90 + 32 * 144 and cost.steps == 0 and cost.ops == 4
    assert cost.activations == 1000 + 250 + 144 + 32
    lstm = graph_cost(generated.lstm_model(tmp_path / "lstm.onnx", steps=8, width=16, hidden=32))
    assert lstm.steps == 8 and lstm.ops == 8 * 12
    assert lstm.macs == lstm.recurrent_macs == 8 * 4 * 32 * (16 + 32)


def _plan(tmp_path, groups=(4, 4), said=None):
    return CompilePlan(tmp_path, list(groups), (said if said is not None else []).append)


def test_a_long_preparation_is_announced_with_the_quicker_ways(tmp_path):
    cost = GraphCost(ops=825, macs=910_589_952, recurrent_macs=134_217_728, steps=64, activations=5_196_928)
    text = notice(cost, _plan(tmp_path), DEFAULT_RATES, "--model m.onnx", load=0.0)
    assert text.startswith("--model m.onnx: the simulated HTP compiles 825 ops (recurrent ops unrolled over 64 steps)")
    assert "expect about 27 s to compile and 5 s per inference (CPU time" in text, text
    assert "each of the 8 workers 1" in text and "--processes 1 (2 workers, not 8)" in text
    assert "pre-compiled EPContext model" in text
    assert "--quantize" not in text  # measured: no quicker on the simulator (docs/models-and-cache.md)
    busy = notice(cost, _plan(tmp_path, groups=(1, 1)), DEFAULT_RATES, "m", load=8.0 * 2)
    assert "this machine is busy" in busy and "--processes 1" not in busy  # 2 workers already
    small = GraphCost(ops=40, macs=10**6, recurrent_macs=0, steps=0, activations=10**4)
    assert notice(small, _plan(tmp_path, groups=(1, 1)), DEFAULT_RATES, "m", load=0.0) is None


def test_the_rates_follow_this_machine_s_own_compiles(tmp_path):
    cost = GraphCost(ops=330, macs=365_257_856, recurrent_macs=0, steps=0, activations=27_630_704)
    assert load_rates(tmp_path) == DEFAULT_RATES  # nothing recorded yet
    slow = {
        "compile_cpu_s": 2 * cost.compile_cpu_s(DEFAULT_RATES),
        "first_run_cpu_s": 3 * cost.run_cpu_s(DEFAULT_RATES),
    }
    for _ in range(2):
        record_timings(tmp_path, cost, slow)
    assert load_rates(tmp_path) == DEFAULT_RATES  # below 3 compiles
    with (tmp_path / TIMINGS_FILE).open("a") as f:
        f.write("not json\n")  # a damaged line is skipped, the others still count
    record_timings(tmp_path, cost, slow)
    rates = load_rates(tmp_path)
    assert rates.source == "rates measured on this machine (3 earlier compiles)"
    assert cost.compile_cpu_s(rates) == pytest.approx(2 * cost.compile_cpu_s(DEFAULT_RATES))
    assert cost.run_cpu_s(rates) == pytest.approx(3 * cost.run_cpu_s(DEFAULT_RATES))


@pytest.mark.qnn
@pytest.mark.usefixtures("needs_qnn")
def test_a_qnn_run_says_it_before_the_compile_and_records_the_compile(run_harness, tmp_path):
    """A machine whose recorded compiles ran 500 times slower than the defaults: even the tiny
    LSTM is a long preparation there, and the notice comes before the compile starts."""
    cache = tmp_path / "cache"
    path = generated.lstm_model(tmp_path / "lstm.onnx")
    cost = graph_cost(path)
    slow = {
        "compile_cpu_s": 500 * cost.compile_cpu_s(DEFAULT_RATES),
        "first_run_cpu_s": 500 * cost.run_cpu_s(DEFAULT_RATES),
    }
    for _ in range(3):
        record_timings(cache, cost, slow)
    outcome = run_harness(
        "run", "--target", "qnn", "--model", str(path), "--cache-dir", str(cache), "--processes", "1", "--no-report"
    )
    assert outcome.returncode == 0, outcome.stderr
    lines = outcome.stderr.splitlines()
    said = next(
        i for i, x in enumerate(lines) if "the simulated HTP compiles 96 ops (recurrent ops unrolled over 8 steps)" in x
    )
    # the progress shows the children's status by polling it (it may miss a fast step): the
    # notice comes before anything the compile child said, and before the preparation's end.
    # What came before the compile may show first on a busy machine (the reference's ORT child,
    # a "still busy" heartbeat while the graph is costed): not the compile
    stage = next(i for i, x in enumerate(lines) if x.startswith("preparing the qnn model"))
    done = next(i for i, x in enumerate(lines) if "preparing the qnn model (built once, then cached): done" in x)
    compiling = next((i for i, x in enumerate(lines) if "compiling lstm.onnx for QNN" in x), done)
    assert stage < said < compiling <= done, lines[: done + 1]
    assert not any("compil" in x for x in lines[stage + 1 : said]), lines[: said + 1]
    assert "rates measured on this machine (3 earlier compiles)" in lines[said]
    recorded = (cache / TIMINGS_FILE).read_text().splitlines()
    assert len(recorded) == 4 and json.loads(recorded[-1])["compile_cpu_s"] > 0  # this compile, measured


def test_a_hostile_record_is_neither_followed_nor_trusted(tmp_path):
    """The cache is untrusted: a link planted at the record's name is not written through, an
    oversized or nested file is not read into the rates."""
    cost = GraphCost(ops=10, macs=10, recurrent_macs=0, steps=0, activations=10)
    outside = tmp_path / "outside.txt"
    outside.write_text("keep\n")
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / TIMINGS_FILE).symlink_to(outside)
    record_timings(cache, cost, {"compile_cpu_s": 1.0, "first_run_cpu_s": 1.0})
    assert outside.read_text() == "keep\n" and load_rates(cache) == DEFAULT_RATES
    (cache / TIMINGS_FILE).unlink()
    (cache / TIMINGS_FILE).write_text("[" * 100_000 + "\n" + "x" * (2 << 20))
    assert load_rates(cache) == DEFAULT_RATES
