"""Internal shapes a shape-fixed copy still leaves dynamic are folded by ORT before the QNN
compile (issue 22: Baidu LAC's Paddle export, whose GRU sequence length comes from
``Shape -> Slice -> Reshape -> Unsqueeze -> Concat -> Identity -> Expand``; the compile refused
it with "Dynamic shape is not supported yet, for input: helper.slice.12" and compiled after the
fold). Only ORT's CPU EP runs here; generated models in pytest tmp dirs."""

from __future__ import annotations

from pathlib import Path

import numpy as np


def _paddle_like(path: Path, *, external: bool = False) -> Path:
    """x[batch, 8] + Expand(0, [Shape(x)[0], 8]) through the chain LAC's export has."""
    import onnx
    from onnx import TensorProto as T
    from onnx import helper, numpy_helper

    def i64(name: str, value: list | int) -> object:
        return numpy_helper.from_array(np.array(value, np.int64), name)

    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Slice", ["s", "st", "en"], ["d"]),
        helper.make_node("Reshape", ["d", "scalar"], ["r"]),
        helper.make_node("Unsqueeze", ["r", "ax0"], ["u"]),
        helper.make_node("Concat", ["u", "c8"], ["c"], axis=0),
        helper.make_node("Identity", ["c"], ["shape"]),
        helper.make_node("Expand", ["zero", "shape"], ["e"]),
        helper.make_node("Add", ["x", "e"], ["a"]),
        helper.make_node("MatMul", ["a", "w"], ["y"]),
    ]
    w = numpy_helper.from_array(np.random.default_rng(7).standard_normal((8, 512)).astype(np.float32), "w")
    graph = helper.make_graph(
        nodes,
        "paddle_like",
        [helper.make_tensor_value_info("x", T.FLOAT, ["batch", 8])],
        [helper.make_tensor_value_info("y", T.FLOAT, ["batch", 512])],
        [i64("st", [0]), i64("en", [1]), i64("scalar", []), i64("ax0", [0]), i64("c8", [8]), w]
        + [numpy_helper.from_array(np.zeros((1,), np.float32), "zero")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    if external:
        onnx.save(model, str(path), save_as_external_data=True, location=path.name + ".data", size_threshold=1024)
    else:
        onnx.save(model, str(path))
    return path


def _fixed_copy(src: Path, folder: Path) -> Path:
    """What prepare_qnn_source writes: the shape-fixed graph, its internal shapes inferred again,
    beside a hard link of the user's external data."""
    import onnx

    from harness.prep.externalise import link_external_data
    from harness.prep.inputs import fixed_shape_copy
    from harness.prep.onnxfile import load_onnx
    from harness.targets.qnn.shapes import with_static_shapes

    graph = load_onnx(src, external_data=False)
    folder.mkdir()
    onnx.save(with_static_shapes(fixed_shape_copy(graph, {"x": [1, 8]})), str(folder / src.name))
    link_external_data(src, graph, folder)
    return folder / src.name


def _run(path: Path, x: np.ndarray) -> np.ndarray:
    import onnxruntime as ort

    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]


def test_shapes_left_dynamic_are_folded_and_the_output_is_the_same(tmp_path):
    import onnx

    from harness.targets.qnn.shapes import dynamic_value_infos, fold_if_still_dynamic

    src = _paddle_like(tmp_path / "lac.onnx", external=True)
    fixed = _fixed_copy(src, tmp_path / "entry")
    assert dynamic_value_infos(onnx.load(str(fixed), load_external_data=False)) == 2  # Expand, Add
    folded = fold_if_still_dynamic(fixed)
    assert folded != fixed and folded.parent == fixed.parent
    graph = onnx.load(str(folded), load_external_data=False)
    assert dynamic_value_infos(graph) == 0
    assert "Shape" not in {n.op_type for n in graph.graph.node}
    assert (fixed.parent / "lac.folded.data").is_file()  # the weights stay external
    x = np.random.default_rng(1).standard_normal((1, 8)).astype(np.float32)
    np.testing.assert_allclose(_run(folded, x), _run(src, x), rtol=1e-5, atol=1e-5)


def test_a_copy_whose_shapes_are_static_is_compiled_as_it_is(tmp_path):
    """Nothing left dynamic: no ORT pass, no second file."""
    import onnx

    from harness.targets.qnn.shapes import fold_if_still_dynamic

    path = _paddle_like(tmp_path / "p.onnx")
    model = onnx.load(str(path))
    keep = [n for n in model.graph.node if n.op_type == "MatMul"]
    keep[0].input[0] = "x"  # x @ w alone: every shape follows from the fixed input
    del model.graph.node[:]
    model.graph.node.extend(keep)
    onnx.save(model, str(path))
    fixed = _fixed_copy(path, tmp_path / "entry")
    assert fold_if_still_dynamic(fixed) == fixed
    assert not (fixed.parent / "p.folded.onnx").exists()
