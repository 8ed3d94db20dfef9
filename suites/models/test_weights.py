"""Weights wherever and however a model keeps them: every element type externalised as ONNX's
raw bytes and handed to ORT in place; Constant-node weights (also inside If branches) lifted
into initializers; names unique across subgraphs; a model with nothing to map refused in one
line. End to end: fp16, bf16, int8-QDQ, int4 and float8 models measure with correct outputs on
cpu and ort-native."""

from __future__ import annotations

from pathlib import Path

import generated
import numpy as np
import pytest
from models_support import ONE, assert_all_ok, assert_usage_error

from harness.prep import tensors

# -- tensor types ---------------------------------------------------------------------------------

#: onnx type -> (numpy/ml_dtypes name, bits): what ONNX stores per element.
_SUB_BYTE = {21: 4, 22: 4, 25: 2, 26: 2}


@pytest.mark.parametrize("onnx_type", [1, 2, 3, 5, 7, 9, 10, 11, 16, 17, 18, 19, 20, 21, 22, 25, 26])
def test_raw_bytes_are_the_packed_onnx_layout(onnx_type):
    """The bytes the harness writes for a tensor are the ones ONNX itself stores (raw_data),
    also when the proto holds its values in typed fields; sub-byte types are packed."""
    from onnx import helper, numpy_helper

    shape = [3, 5]  # an odd count: the last 4-bit/2-bit byte is half used
    values = np.arange(15).reshape(shape) % 2
    array = values.astype(tensors.numpy_dtype(onnx_type))
    proto = numpy_helper.from_array(array, "t")
    assert proto.data_type == onnx_type
    bits = _SUB_BYTE.get(onnx_type)
    expected = -(-15 * bits // 8) if bits else array.nbytes
    assert tensors.packed_size(onnx_type, shape) == expected
    assert tensors.raw_bytes(proto) == proto.raw_data and len(proto.raw_data) == expected
    typed = helper.make_tensor(
        "t",
        onnx_type,
        shape,
        array.astype(np.float32 if onnx_type in (16, 17, 18, 19, 20) else np.int64).ravel().tolist(),
    )
    assert not typed.HasField("raw_data")  # the typed-field storage is converted, packing included
    assert tensors.raw_bytes(typed) == proto.raw_data


@pytest.mark.parametrize("onnx_type", [10, 16, 17, 21, 22])
def test_ortvalue_over_a_buffer_is_in_place_and_reads_the_right_values(onnx_type):
    """An OrtValue over a buffer shares its memory (no copy) and ORT sees the values stored."""
    from onnx import numpy_helper

    array = (np.arange(12).reshape(3, 4) % 7 - 3).astype(tensors.numpy_dtype(onnx_type))
    raw = numpy_helper.from_array(array, "t").raw_data
    extent = tensors.view_extent(onnx_type, [3, 4])
    buffer = bytearray(64 + extent)
    buffer[64 : 64 + len(raw)] = raw
    value = tensors.ortvalue_over(memoryview(buffer), onnx_type, [3, 4], 64)
    address = np.frombuffer(buffer, np.uint8).ctypes.data + 64
    assert value.data_ptr() == address
    assert value.tensor_size_in_bytes() == len(raw)
    np.testing.assert_array_equal(tensors.from_ortvalue(value).astype(np.float32), array.astype(np.float32))


def test_pack_unpack_round_trip_for_feeds():
    import ml_dtypes

    for dtype, onnx_type in ((ml_dtypes.int4, 22), (ml_dtypes.uint4, 21), (ml_dtypes.int2, 26)):
        values = (np.arange(7) % 3).astype(dtype)
        value = tensors.to_ortvalue(values, onnx_type)
        assert value.tensor_size_in_bytes() == tensors.packed_size(onnx_type, [7])
        np.testing.assert_array_equal(tensors.from_ortvalue(value).astype(np.int8), values.astype(np.int8))


# -- graphs ---------------------------------------------------------------------------------------


def _if_model_with_constants():
    """Main-graph Constant weight + one in each If branch, both branches named alike."""
    from onnx import TensorProto as T
    from onnx import helper, numpy_helper

    rng = np.random.default_rng(3)

    def const(name, shape):
        return helper.make_node(
            "Constant", [], [name], value=numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), name)
        )

    branch = {
        k: helper.make_graph(
            [const("w", (16, 16)), helper.make_node("MatMul", ["h", "w"], [f"o_{k}"])],
            k,
            [],
            [helper.make_tensor_value_info(f"o_{k}", T.FLOAT, [1, 16])],
        )
        for k in ("then", "else")
    }
    nodes = [
        const("w0", (16, 16)),
        helper.make_node("MatMul", ["x", "w0"], ["h"]),
        helper.make_node("If", ["c"], ["y"], then_branch=branch["then"], else_branch=branch["else"]),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", T.FLOAT, [1, 16]), helper.make_tensor_value_info("c", T.BOOL, [])],
        [helper.make_tensor_value_info("y", T.FLOAT, [1, 16])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    return model


def test_lift_constants_in_every_graph_and_make_names_unique():
    import onnx

    from harness.prep.graphs import all_graphs, initializers, lift_constants, unique_initializer_names

    model = _if_model_with_constants()
    assert lift_constants(model, 1024) == 3
    assert not [n for g in all_graphs(model.graph) for n in g.node if n.op_type == "Constant"]
    assert unique_initializer_names(model) == 1  # the else branch's "w" collides with the then branch's
    names = [t.name for _, t in initializers(model)]
    assert sorted(names) == ["w", "w0", "w__1"]
    onnx.checker.check_model(model)


def test_lifted_subgraph_weights_run_on_cpu_with_mapped_weights(tmp_path, run_harness):
    """The If model end to end: both branches' weights are mapped, and each branch gets its own."""
    import onnx

    path = tmp_path / "if.onnx"
    onnx.save(_if_model_with_constants(), str(path))
    for flag in ("true", "false"):  # each branch is taken once
        outcome = run_harness("run", "--model", str(path), "--input", f"c={flag}", *ONE, out=tmp_path / flag)
        rows = assert_all_ok(outcome, workers=2)
        assert {r.weights_bytes for r in rows} == {3 * 16 * 16 * 4}


def test_nothing_to_map_is_one_line(tmp_path, run_harness):
    from onnx import TensorProto as T
    from onnx import helper, save

    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", T.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", T.FLOAT, [1, 4])],
    )
    save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(tmp_path / "relu.onnx"))
    outcome = run_harness("run", "--model", str(tmp_path / "relu.onnx"), *ONE)
    assert_usage_error(
        outcome,
        "nothing to map",
        "no initializer and no Constant-node tensor",
        "subgraphs included",
        "1024 bytes or more",
    )


# -- every type, end to end --------------------------------------------------------------------------

#: builder -> (element type the model is about, its weight names of that type)
TYPED_MODELS = {
    "fp16": (generated.fp16_model, "float16", {"table"}),
    "bf16": (generated.bf16_model, "bfloat16", {"table"}),
    "int8_qdq": (generated.int8_qdq_model, "int8", {"w_q"}),
    "int4": (generated.int4_model, "int4", {"w4"}),
    "float8": (generated.float8_model, "float8_e4m3fn", {"w8"}),
}


@pytest.fixture(scope="module")
def typed_models(tmp_path_factory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("typed")
    return {name: build(folder / f"{name}.onnx") for name, (build, _, _) in TYPED_MODELS.items()}


#: fp16 and int4 (sub-byte, packed) in the default run; the other types behind -m slow (breadth).
TYPED_BY_DEFAULT = ("fp16", "int4")


@pytest.mark.parametrize(
    "name", [n if n in TYPED_BY_DEFAULT else pytest.param(n, marks=pytest.mark.slow) for n in TYPED_MODELS]
)
def test_typed_weights_measure_with_correct_outputs(typed_models, run_harness, model_cache, name):
    """cpu in both modes and ort-native (the peer, mapped) in one run: every worker's first
    inference matches ORT's own output of the original model, and the weights file holds the
    tensor in its own type and packed size."""
    from harness.prep.folder import PreparedModel

    outcome = run_harness("run", "--model", str(typed_models[name]), "--peer", "ort-native", *ONE)
    rows = assert_all_ok(outcome, workers=3)
    assert sorted((r.target, r.mode, r.path_taken) for r in rows) == [
        ("cpu", "heap", "heap"),
        ("cpu", "mapped", "mapped"),
        ("ort-native", "mapped", "mapped"),
    ]
    folder = next(p for p in model_cache.glob(f"user-{name}-*") if (p / "manifest.json").is_file())
    model = PreparedModel.load(folder)
    _, dtype, names = TYPED_MODELS[name]
    typed = {t.name: t for t in model.tensors if t.dtype == dtype}
    assert names <= set(typed), [(t.name, t.dtype) for t in model.tensors]
    for t in typed.values():
        assert t.length == tensors.packed_size(t.onnx_type, t.shape)
    assert {r.weights_bytes for r in rows} == {model.weights_bytes}


@pytest.mark.memory
def test_constant_node_weights_cost_less_pss_when_mapped(tmp_path, run_harness):
    """Done when: a Paddle-style model whose weights are all Constant nodes (64 MiB, dynamic
    batch) measures on cpu with mapped summed PSS below heap's at N=2. PSS at N=2 is W + 2 O
    mapped vs 2 W + 2 O heap: W apart; half of that is the margin for the PSS of shared
    libraries, which moves with whatever else the machine runs."""
    path = generated.constant_weights_model(tmp_path / "paddle64.onnx", width=1024, layers=16)
    outcome = run_harness(
        "run",
        "--model",
        str(path),
        "--free-dim",
        "p2o.DynamicDimension.0=1",
        "--processes",
        "2",
        "--quiet",
        "--no-report",
    )
    rows = assert_all_ok(outcome, workers=4)
    weights = rows[0].weights_bytes
    assert weights == 64 * 1024**2
    summary = {s.mode: s for s in outcome.summary()}
    assert summary["mapped"].sum_pss_bytes < summary["heap"].sum_pss_bytes - weights / 2


def test_constant_weights_beside_external_data(tmp_path, run_harness):
    """A model with Constant-node weights AND initializers in an external-data file: the lifted
    graph is optimized with the external file linked (never loaded into the harness), and every
    weight ends up in the mapped file."""
    import onnx
    from onnx import helper, numpy_helper

    path = generated.constant_weights_model(tmp_path / "src.onnx", width=64, layers=2)
    model = onnx.load(str(path))
    extra = numpy_helper.from_array(np.random.default_rng(1).standard_normal((64, 64)).astype(np.float32), "w_ext")
    model.graph.initializer.append(extra)
    model.graph.node.append(helper.make_node("MatMul", ["y", "w_ext"], ["z"]))
    model.graph.output[0].name = "z"
    model.graph.node[-2].output[0] = "y"  # the last Relu still feeds the new MatMul
    onnx.save(
        model,
        str(tmp_path / "mixed.onnx"),
        save_as_external_data=True,
        all_tensors_to_one_file=True,
        location="mixed.data",
        size_threshold=1024,
    )
    assert (tmp_path / "mixed.data").stat().st_size == 64 * 64 * 4
    rows = assert_all_ok(
        run_harness("run", "--model", str(tmp_path / "mixed.onnx"), "--free-dim", "p2o.DynamicDimension.0=2", *ONE),
        workers=2,
    )
    assert {r.weights_bytes for r in rows} == {3 * 64 * 64 * 4}
