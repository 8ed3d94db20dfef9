"""qnn with the user's own models: a pre-compiled EPContext model (embed mode 0 or 1) measured as
it is; a model compiled as it is, its compile in a child process whose crash or failure is one
line naming the user's file, the EP's reason and the log (never a traceback, never the EP's own
log on the terminal); Constant-node weights compiled as they are."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import generated
import pytest
from models_support import ONE, assert_all_ok, assert_usage_error

#: One xdist worker runs this module: its compiled models are made once (docs/testing.md).
pytestmark = [pytest.mark.qnn, pytest.mark.usefixtures("needs_qnn"), pytest.mark.xdist_group("qnn_models")]


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    """A QDQ model compiled by the harness's own compile (embed mode 0 and 1), then copied
    elsewhere, as a user holding a ``*_ctx.onnx`` + ``*_qnn.bin`` from a model hub would."""
    from harness.targets.qnn.compile import compile_epcontext

    work = tmp_path_factory.mktemp("ctx")
    src = generated.qdq_model(work / "qdq.onnx", 1 << 20)
    copies = {}
    for mode in (0, 1):
        c = compile_epcontext(src, work / "cache", embed_mode=mode)
        dest = work / f"copied{mode}"
        dest.mkdir()
        for f in (c.onnx_path, *c.bin_paths):
            shutil.copyfile(f, dest / f.name)
        copies[mode] = (dest / c.onnx_path.name, [dest / b.name for b in c.bin_paths])
    return copies


@pytest.mark.parametrize("embed_mode", [0, pytest.param(1, marks=pytest.mark.slow)])
def test_a_copied_epcontext_model_runs_as_it_is(run_harness, compiled, embed_mode):
    onnx_path, bins = compiled[embed_mode]
    outcome = run_harness("run", "--target", "qnn", "--model", str(onnx_path), *ONE)
    rows = assert_all_ok(outcome, workers=2)
    assert all(r.ep_file_mapping not in ("", "n/a", "unknown") for r in rows), [r.ep_file_mapping for r in rows]
    if bins:
        assert {r.weights_bytes for r in rows} == {sum(b.stat().st_size for b in bins)}
    meta = json.loads((outcome.out / "metadata.json").read_text())
    assert any("measured as it is" in n and "file mapping disabled" in n for n in meta["target_notes"])
    spec = json.loads(next((outcome.out / "workers").rglob("*.spec.json")).read_text())
    assert spec["options"]["onnx"] == [str(onnx_path)]  # the user's file itself, nothing recompiled


def test_relative_model_and_cache_paths_work_for_qnn(run_harness, compiled, tmp_path):
    """As a user types them, relative to the folder the harness runs in: the workers and the
    compiler's child process run elsewhere, so both paths must reach them absolute (before,
    every worker failed with NO_SUCHFILE and the compile with "Input model path does not exist")."""
    onnx_path, bins = compiled[0]
    hub = tmp_path / "hub"  # run_harness runs in tmp_path
    hub.mkdir()
    for f in (onnx_path, *bins):
        shutil.copyfile(f, hub / f.name)
    assert_all_ok(run_harness("run", "--target", "qnn", "--model", f"hub/{onnx_path.name}", *ONE), workers=2)
    generated_model = run_harness("run", "--target", "qnn", "--model-size", "1MiB", "--cache-dir", "my-cache", *ONE)
    assert_all_ok(generated_model, workers=2)
    assert list((tmp_path / "my-cache").glob("qdq-chain-*"))


def test_the_qnn_libraries_write_nothing_into_the_harness_folder(run_harness, tmp_path):
    """The compile runs in a child process; the QNN saver backend writes saver_output/ into that
    process's folder. Before, that folder was the harness's own (the checkout or the installed
    package's parent): every `--backend-type saver` left params.bin and saver_output.c there."""
    import time

    from conftest import ROOT

    stray = ROOT / "saver_output"
    t0 = time.time() - 1  # file times are coarser than the clock on some filesystems
    outcome = run_harness("run", "--target", "qnn", "--backend-type", "saver", "--model-size", "1MiB", *ONE)
    assert outcome.returncode == 2 and "Traceback" not in outcome.stderr, outcome.stderr
    written = [p for p in [stray, *stray.rglob("*")] if p.exists() and p.stat().st_mtime >= t0]
    assert not written, f"written into the harness's folder by this run: {written}"
    assert not (tmp_path / "saver_output").exists()  # nor into the user's folder


def test_a_missing_context_binary_is_one_line(run_harness, compiled, tmp_path):
    onnx_path, bins = compiled[0]
    lonely = tmp_path / onnx_path.name
    shutil.copyfile(onnx_path, lonely)
    assert_usage_error(
        run_harness("run", "--target", "qnn", "--model", str(lonely), *ONE),
        f"context binary '{bins[0].name}'",
        "is missing",
    )


def test_a_compile_failure_is_one_line_with_the_eps_reason_and_log(run_harness, tmp_path):
    """An fp32 Conv the simulated HTP backend cannot finalize without a SoC (soc_model=0: the
    EP's own default, unknown SoC, instead of the harness's simulator default)."""
    path = generated.nhwc_model(tmp_path / "conv.onnx")
    line = assert_usage_error(
        run_harness("run", "--target", "qnn", "--model", str(path), "--provider-option", "soc_model=0", *ONE),
        f"--model {path}: QNN compilation failed",
        "QNN_COMMON_ERROR_MEM_ALLOC",
        "--provider-option soc_model=60",
        "--quantize qdq",
        "(EP log: ",
    )
    log = line.rsplit("(EP log: ", 1)[1].rstrip(")")
    assert "MEM_ALLOC" in open(log, encoding="utf-8", errors="replace").read()  # the EP's own log is in the file
    assert "[ONNXRuntimeError]" not in line


def test_on_the_simulator_a_float_model_compiles_for_the_laptops_soc_by_default(run_harness, tmp_path):
    """The same fp32 Conv with no soc_model given: the simulator compiles it for SC8380XP
    (soc_model=60, the Snapdragon X Elite), says so in a note and records the option used."""
    from harness.targets.qnn.simulator import SIMULATOR_SOC_MODEL, is_simulator

    if not is_simulator():
        pytest.skip("the soc_model default applies to onnxruntime-qnn's HTP simulator (Linux x86_64) only")
    path = generated.nhwc_model(tmp_path / "conv.onnx")
    outcome = run_harness("run", "--target", "qnn", "--model", str(path), *ONE)
    assert_all_ok(outcome, workers=2)
    meta = json.loads((outcome.out / "metadata.json").read_text())
    assert any(f"compiles for soc_model={SIMULATOR_SOC_MODEL} (SC8380XP" in n for n in meta["target_notes"])
    assert meta["run"]["session"]["provider_options"] == {"soc_model": SIMULATOR_SOC_MODEL}


def test_a_crashing_compiler_is_one_line(run_harness, tmp_path, monkeypatch):
    """The QNN compiler segfaults on some real models: the compile runs in a child, so the
    harness reports it instead of dying with it."""
    monkeypatch.setenv("HARNESS_TEST_QNN_CHILD_FAULT", "segv")
    path = generated.qdq_model(tmp_path / "crash.onnx", seed=7)
    assert_usage_error(
        run_harness("run", "--target", "qnn", "--model", str(path), *ONE),
        f"--model {path}: the QNN compiler crashed",
        "SIGSEGV",
        "(EP log: ",
    )


def test_a_constant_weights_model_is_compiled_as_it_is(run_harness, tmp_path):
    """Paddle-style weights (Constant nodes only): the cpu targets lift them; qnn compiles the
    model as it is (nothing externalised, nothing refused), its dynamic batch fixed by
    --free-dim in a shape-fixed copy of the graph."""
    path = generated.constant_weights_model(tmp_path / "paddle.onnx")
    outcome = run_harness(
        "run", "--target", "qnn", "--model", str(path), "--free-dim", "p2o.DynamicDimension.0=1", *ONE
    )
    rows = assert_all_ok(outcome, workers=2)
    assert all(r.weights_bytes > 0 for r in rows)
    spec = json.loads(next((outcome.out / "workers").rglob("*.spec.json")).read_text())
    assert spec["options"]["onnx"][0].endswith("paddle_em0_ctx.onnx")
    assert (outcome.out / "logs").is_dir() and any((outcome.out / "logs").iterdir())  # the compile log, kept


def test_an_epcontext_model_on_cpu_and_a_mixed_folder_are_one_line(run_harness, compiled, tmp_path):
    onnx_path, _ = compiled[0]
    assert_usage_error(
        run_harness("run", "--target", "cpu", "--model", str(onnx_path), *ONE, out=tmp_path / "a"),
        "a pre-compiled EPContext model",
        "--target cpu cannot load it",
        "use --target qnn",
    )
    mixed = tmp_path / "mixed"
    shutil.copytree(onnx_path.parent, mixed)
    generated.qdq_model(mixed / "source.onnx")  # a plain model beside the compiled one
    assert_usage_error(
        run_harness("run", "--target", "qnn", "--model", str(mixed), *ONE, out=tmp_path / "b"),
        "holds compiled EPContext models",
        "and plain models (source.onnx)",
        "repeated --model",
    )


def test_a_float_model_quantized_with_qdq_compiles_without_soc_model_and_is_cached(run_harness, tmp_path):
    """--quantize qdq: the float Conv that fails with MEM_ALLOC as it is compiles as a uint8 QDQ
    model (ORT's qnn_preprocess_model + quantize_static with get_qnn_qdq_config), its outputs
    compared with the float model's CPU output; the quantized model is cached by content and
    options (a second run quantizes nothing, another calibration size is a new entry)."""
    path = generated.nhwc_model(tmp_path / "conv.onnx")
    cache = tmp_path / "cache"
    args = ("run", "--target", "qnn", "--model", str(path), "--quantize", "qdq", "--cache-dir", str(cache))
    args += ("--provider-option", "soc_model=0")  # the EP's default SoC: the float model fails to compile there
    outcome = run_harness(*args, "--calibration-size", "3", *ONE, out=tmp_path / "a")
    assert_all_ok(outcome, workers=2)
    meta = json.loads((outcome.out / "metadata.json").read_text())
    assert any(
        "quantized before the compile (qdq, 3 calibration inputs)" in n and ">= 0.95" in n for n in meta["target_notes"]
    )
    entries = sorted(cache.glob("qnnsrc-conv-*"))
    assert len(entries) == 1 and (entries[0] / "conv_qdq.onnx").is_file()
    stamp = (entries[0] / "conv_qdq.onnx").stat().st_mtime_ns
    assert_all_ok(run_harness(*args, "--calibration-size", "3", *ONE, out=tmp_path / "b"), workers=2)
    assert (entries[0] / "conv_qdq.onnx").stat().st_mtime_ns == stamp
    assert_all_ok(run_harness(*args, "--calibration-size", "2", *ONE, out=tmp_path / "c"), workers=2)
    assert len(list(cache.glob("qnnsrc-conv-*"))) == 2


def test_quantize_needs_a_model(run_harness):
    assert_usage_error(
        run_harness("run", "--target", "qnn", "--quantize", "qdq", *ONE), "--quantize qdq: needs --model"
    )


def test_a_shape_fixed_copy_gets_static_internal_shapes():
    """tf2onnx/Paddle exports keep symbolic dims in value_info: after the inputs are fixed,
    ONNX's data propagation makes the Shape -> Concat -> Reshape chain static for the compiler."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    from harness.prep.inputs import fixed_shape_copy
    from harness.targets.qnn.shapes import dynamic_value_infos, with_static_shapes

    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Slice", ["s", "zero", "one"], ["batch"]),
        helper.make_node("Concat", ["batch", "minus1"], ["target"], axis=0),
        helper.make_node("Reshape", ["x", "target"], ["flat"]),
        helper.make_node("Relu", ["flat"], ["y"]),
    ]
    consts = [
        numpy_helper.from_array(np.array(v, np.int64), n) for n, v in (("zero", [0]), ("one", [1]), ("minus1", [-1]))
    ]
    graph = helper.make_graph(
        nodes,
        "dyn",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", "M"])],
        consts,
        value_info=[helper.make_tensor_value_info("flat", TensorProto.FLOAT, ["N", "unk"])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    fixed = fixed_shape_copy(model, {"x": [2, 3, 4]})
    assert dynamic_value_infos(fixed) == 1
    static = with_static_shapes(fixed)
    assert dynamic_value_infos(static) == 0
    flat = next(v for v in static.graph.value_info if v.name == "flat")
    assert [d.dim_value for d in flat.type.tensor_type.shape.dim] == [2, 12]


def test_a_model_the_htp_takes_nothing_of_names_the_first_op_it_refuses(run_harness, tmp_path):
    """No node assigned to QNN: the child asks the EP (verbose node-support log) which op it
    refuses, and the one line names it with the EP's reason."""
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Acos", ["x"], ["a"], name="first"), helper.make_node("Acos", ["a"], ["y"], name="second")],
        "acos",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
    )
    path = tmp_path / "acos.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    assert_usage_error(
        run_harness("run", "--target", "qnn", "--model", str(path), *ONE),
        "no node was assigned to QNN",
        "the first op the EP refuses: Acos (node 'first', index 0): ",
        "Operators of type `Acos` are not supported by QNN EP",
        "(EP log: ",
    )


def test_weights_left_to_the_cpu_ep_are_counted_and_named(run_harness, tmp_path):
    """Issue 43 item 4: qnn counted only the context binaries as weights (a 4-partition model
    reported 1.1 MiB while 6 MiB stayed in CPU nodes). Both are counted; the run's notes say which
    part file mapping maps."""
    path = generated.partly_qnn_model(tmp_path / "partly.onnx")
    outcome = run_harness("run", "--target", "qnn", "--model", str(path), *ONE)
    rows = assert_all_ok(outcome, workers=2)
    meta = json.loads((outcome.out / "metadata.json").read_text())
    spec = json.loads(next((outcome.out / "workers").rglob("*.spec.json")).read_text())
    context = sum(b.stat().st_size for b in Path(spec["options"]["onnx"][0]).parent.glob("*.bin"))
    assert {r.weights_bytes for r in rows} == {context + 256 * 16 * 2} == {meta["run"]["weights_bytes"]}
    note = next(n for n in meta["target_notes"] if n.startswith("Weights: "))
    assert "in QNN context binaries (what file mapping maps) and 8.0 KiB in the nodes left to ORT's CPU EP" in note
