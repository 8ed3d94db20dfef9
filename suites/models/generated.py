"""Models no package ships, generated for the tests (in pytest tmp dirs): weights of every element
type ORT's CPU EP computes with, string inputs, several dynamic inputs, Constant-node weights.

Each builder writes one model and returns its path. Weights are random but seeded; every model
has at least one tensor of 1 KiB or more of the type it is about, consumed by an op that uses
it as it is (so ORT's offline optimization keeps it in that type).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

OPSET = 21


def _save(graph, path: Path, opset: int = OPSET, ir_version: int = 10, extra_opsets=(), check: bool = True) -> Path:
    import onnx
    from onnx import helper

    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset), *extra_opsets])
    model.ir_version = ir_version
    if check:  # the checker wants a shape on every graph input; ORT does not
        onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


def fp16_model(path: Path) -> Path:
    """An fp16 embedding table (Gather) and an fp16 MatMul weight: ids + x -> fp16 outputs."""
    from onnx import TensorProto as T
    from onnx import helper, numpy_helper

    rng = np.random.default_rng(16)
    table = numpy_helper.from_array((rng.standard_normal((256, 32)) * 0.5).astype(np.float16), "table")
    w = numpy_helper.from_array((rng.standard_normal((32, 64)) / 8).astype(np.float16), "w")
    nodes = [helper.make_node("Gather", ["table", "ids"], ["emb"]), helper.make_node("MatMul", ["x", "w"], ["y"])]
    graph = helper.make_graph(
        nodes,
        "fp16",
        [helper.make_tensor_value_info("ids", T.INT64, [1, 8]), helper.make_tensor_value_info("x", T.FLOAT16, [1, 32])],
        [
            helper.make_tensor_value_info("emb", T.FLOAT16, [1, 8, 32]),
            helper.make_tensor_value_info("y", T.FLOAT16, [1, 64]),
        ],
        [table, w],
    )
    return _save(graph, path)


def bf16_model(path: Path) -> Path:
    """A bfloat16 embedding table (Gather keeps it bf16), output cast to float and bf16."""
    from onnx import TensorProto as T
    from onnx import helper

    rng = np.random.default_rng(17)
    import ml_dtypes

    values = (rng.standard_normal((128, 16)) * 0.5).astype(ml_dtypes.bfloat16)
    table = helper.make_tensor("table", T.BFLOAT16, [128, 16], values.view(np.uint16).tobytes(), raw=True)
    nodes = [
        helper.make_node("Gather", ["table", "ids"], ["emb"]),
        helper.make_node("Cast", ["emb"], ["emb32"], to=T.FLOAT),
    ]
    graph = helper.make_graph(
        nodes,
        "bf16",
        [helper.make_tensor_value_info("ids", T.INT64, [2, 4])],
        [
            helper.make_tensor_value_info("emb", T.BFLOAT16, [2, 4, 16]),
            helper.make_tensor_value_info("emb32", T.FLOAT, [2, 4, 16]),
        ],
        [table],
    )
    return _save(graph, path)


def int8_qdq_model(path: Path) -> Path:
    """A static int8 QDQ MatMul (activations and weights quantized, as a QDQ export has them)."""
    from onnx import TensorProto as T
    from onnx import helper, numpy_helper

    rng = np.random.default_rng(8)
    w = numpy_helper.from_array(rng.integers(-127, 128, (64, 64)).astype(np.int8), "w_q")
    inits = [
        w,
        numpy_helper.from_array(np.array(0.02, np.float32), "x_scale"),
        numpy_helper.from_array(np.array(0, np.int8), "x_zp"),
        numpy_helper.from_array(np.array(0.01, np.float32), "w_scale"),
        numpy_helper.from_array(np.array(0, np.int8), "w_zp"),
        numpy_helper.from_array(np.array(0.05, np.float32), "y_scale"),
        numpy_helper.from_array(np.array(0, np.int8), "y_zp"),
    ]
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "x_scale", "x_zp"], ["xq"]),
        helper.make_node("DequantizeLinear", ["xq", "x_scale", "x_zp"], ["xd"]),
        helper.make_node("DequantizeLinear", ["w_q", "w_scale", "w_zp"], ["wd"]),
        helper.make_node("MatMul", ["xd", "wd"], ["m"]),
        helper.make_node("QuantizeLinear", ["m", "y_scale", "y_zp"], ["yq"]),
        helper.make_node("DequantizeLinear", ["yq", "y_scale", "y_zp"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "int8_qdq",
        [helper.make_tensor_value_info("x", T.FLOAT, [4, 64])],
        [helper.make_tensor_value_info("y", T.FLOAT, [4, 64])],
        inits,
    )
    return _save(graph, path)


def int4_model(path: Path) -> Path:
    """Packed int4 and uint4 weights, dequantized per tensor, then MatMul."""
    from onnx import TensorProto as T
    from onnx import helper, numpy_helper

    rng = np.random.default_rng(4)
    w4 = helper.make_tensor("w4", T.INT4, [64, 64], rng.integers(-8, 8, 64 * 64).tolist())
    u4 = helper.make_tensor("u4", T.UINT4, [64, 32], rng.integers(0, 16, 64 * 32).tolist())
    inits = [w4, u4, numpy_helper.from_array(np.array(0.05, np.float32), "s")]
    nodes = [
        helper.make_node("DequantizeLinear", ["w4", "s"], ["wd"]),
        helper.make_node("DequantizeLinear", ["u4", "s"], ["ud"]),
        helper.make_node("MatMul", ["x", "wd"], ["h"]),
        helper.make_node("MatMul", ["h", "ud"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "int4",
        [helper.make_tensor_value_info("x", T.FLOAT, [2, 64])],
        [helper.make_tensor_value_info("y", T.FLOAT, [2, 32])],
        inits,
    )
    return _save(graph, path)


def three_dynamic_inputs_model(path: Path) -> Path:
    """ids/mask/type_ids [batch, sequence] like a BERT export, plus ``scale``, an input that
    declares no shape at all (only its element type; unused by the graph)."""
    from onnx import TensorProto as T
    from onnx import helper, numpy_helper

    rng = np.random.default_rng(3)
    table = numpy_helper.from_array(rng.standard_normal((64, 16)).astype(np.float32), "table")
    nodes = [
        helper.make_node("Gather", ["table", "ids"], ["e"]),
        helper.make_node("Cast", ["mask"], ["m"], to=T.FLOAT),
        helper.make_node("Unsqueeze", ["m", "axis"], ["m3"]),
        helper.make_node("Mul", ["e", "m3"], ["em"]),
        helper.make_node("Cast", ["type_ids"], ["t"], to=T.FLOAT),
        helper.make_node("Unsqueeze", ["t", "axis"], ["t3"]),
        helper.make_node("Add", ["em", "t3"], ["y"]),
    ]
    dims = ["batch", "sequence"]
    inputs = [helper.make_tensor_value_info(n, T.INT64, dims) for n in ("ids", "mask", "type_ids")]
    graph = helper.make_graph(
        nodes,
        "three",
        [*inputs, helper.make_tensor_value_info("scale", T.FLOAT, None)],
        [helper.make_tensor_value_info("y", T.FLOAT, ["batch", "sequence", 16])],
        [table, numpy_helper.from_array(np.array([2], np.int64), "axis")],
    )
    return _save(graph, path, check=False)


def no_shape_input_model(path: Path) -> Path:
    """An input that declares no shape at all (only its element type)."""
    from onnx import TensorProto as T
    from onnx import helper, numpy_helper

    w = numpy_helper.from_array(np.ones((16, 16), np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])],
        "noshape",
        [helper.make_tensor_value_info("x", T.FLOAT, None)],
        [helper.make_tensor_value_info("y", T.FLOAT, ["n", 16])],
        [w],
    )
    return _save(graph, path, check=False)


def string_input_model(path: Path) -> Path:
    """A string input hashed into a vocabulary (StringNormalizer + LabelEncoder-free: Equal on
    strings), then a weight lookup: strings in, floats out."""
    from onnx import TensorProto as T
    from onnx import helper, numpy_helper

    vocab = helper.make_tensor("vocab", T.STRING, [4], [b"the", b"fox", b"dog", b"jazz"])
    rng = np.random.default_rng(5)
    w = numpy_helper.from_array(rng.standard_normal((4, 64)).astype(np.float32), "w")
    nodes = [
        helper.make_node("Unsqueeze", ["text", "axis"], ["t2"]),
        helper.make_node("Equal", ["t2", "vocab"], ["hit"]),
        helper.make_node("Cast", ["hit"], ["hitf"], to=T.FLOAT),
        helper.make_node("MatMul", ["hitf", "w"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "strings",
        [helper.make_tensor_value_info("text", T.STRING, [6])],
        [helper.make_tensor_value_info("y", T.FLOAT, [6, 64])],
        [vocab, w, numpy_helper.from_array(np.array([1], np.int64), "axis")],
    )
    return _save(graph, path)


def sequence_input_model(path: Path) -> Path:
    """A sequence input and an optional input: what the harness cannot feed."""
    from onnx import TensorProto as T
    from onnx import helper, numpy_helper

    w = numpy_helper.from_array(np.ones((16, 16), np.float32), "w")
    seq = helper.make_tensor_sequence_value_info("parts", T.FLOAT, [1, 16])
    opt = helper.make_value_info(
        "maybe", helper.make_optional_type_proto(helper.make_tensor_type_proto(T.FLOAT, [1, 16]))
    )
    nodes = [
        helper.make_node("ConcatFromSequence", ["parts"], ["x"], axis=0),
        helper.make_node("MatMul", ["x", "w"], ["y"]),
    ]
    graph = helper.make_graph(nodes, "seq", [seq, opt], [helper.make_tensor_value_info("y", T.FLOAT, [1, 16])], [w])
    return _save(graph, path, check=False)


def sample_rate_model(path: Path) -> Path:
    """Like silero VAD: a scalar int64 ``sr`` whose valid values are constrained: the audio
    frame is reshaped to [1, sr / 500], which only fits the 32 samples when sr is 16000."""
    from onnx import TensorProto as T
    from onnx import helper, numpy_helper

    w = numpy_helper.from_array(np.ones((32, 8), np.float32), "w")
    nodes = [
        helper.make_node("Div", ["sr", "k"], ["blocks"]),  # 16000 / 500 = 32 columns
        helper.make_node("Unsqueeze", ["blocks", "axis"], ["b1"]),
        helper.make_node("Concat", ["one", "b1"], ["shape"], axis=0),
        helper.make_node("Reshape", ["audio", "shape"], ["frame"], allowzero=1),
        helper.make_node("MatMul", ["frame", "w"], ["y"]),
    ]
    inits = [
        w,
        numpy_helper.from_array(np.array(500, np.int64), "k"),
        numpy_helper.from_array(np.array([0], np.int64), "axis"),
        numpy_helper.from_array(np.array([1], np.int64), "one"),
    ]
    graph = helper.make_graph(
        nodes,
        "sr",
        [helper.make_tensor_value_info("audio", T.FLOAT, [32]), helper.make_tensor_value_info("sr", T.INT64, [])],
        [helper.make_tensor_value_info("y", T.FLOAT, [1, 8])],
        inits,
    )
    return _save(graph, path)


def nhwc_model(path: Path, channels: int = 256, width: int = 5) -> Path:
    """The pattern of Yahoo's open_nsfw that broke the cpu target: a Conv (NCHW), a Transpose to
    NHWC, a normalisation in NHWC with single-use [1,1,1,C] constants (1 KiB each), and a
    Transpose back to NCHW. ORT's transpose optimizer cancels the two Transposes by pushing the
    first one through the Add/Sub/Mul, transposing each constant IN PLACE, under its own name,
    to [1,C,1,1]. With ``width == channels`` the stale [1,1,1,C] original still broadcasts
    against [1,C,H,W]: no error, just wrong numbers."""
    from onnx import TensorProto as T
    from onnx import helper, numpy_helper

    rng = np.random.default_rng(11)
    consts = [
        numpy_helper.from_array(rng.standard_normal((1, 1, 1, channels)).astype(np.float32), name)
        for name in ("shift", "mean", "scale")
    ]
    conv = numpy_helper.from_array((rng.standard_normal((channels, 8, 1, 1)) / 4).astype(np.float32), "conv_w")
    nodes = [
        helper.make_node("Conv", ["image", "conv_w"], ["c"]),
        helper.make_node("Transpose", ["c"], ["nhwc"], perm=[0, 2, 3, 1]),
        helper.make_node("Add", ["nhwc", "shift"], ["a"]),
        helper.make_node("Sub", ["a", "mean"], ["s"]),
        helper.make_node("Mul", ["s", "scale"], ["m"]),
        helper.make_node("Transpose", ["m"], ["y"], perm=[0, 3, 1, 2]),
    ]
    graph = helper.make_graph(
        nodes,
        "nhwc",
        [helper.make_tensor_value_info("image", T.FLOAT, [1, 8, 2, width])],
        [helper.make_tensor_value_info("y", T.FLOAT, [1, channels, 2, width])],
        [*consts, conv],
    )
    return _save(graph, path, opset=17, ir_version=9)


def random_output_model(path: Path) -> Path:
    """A model whose output is random on every run (RandomNormalLike): non-deterministic by
    design, next to a deterministic output."""
    from onnx import TensorProto as T
    from onnx import helper, numpy_helper

    w = numpy_helper.from_array(np.ones((16, 16), np.float32), "w")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["y"]), helper.make_node("RandomNormalLike", ["y"], ["noise"])]
    graph = helper.make_graph(
        nodes,
        "random",
        [helper.make_tensor_value_info("x", T.FLOAT, [1, 16])],
        [
            helper.make_tensor_value_info("y", T.FLOAT, [1, 16]),
            helper.make_tensor_value_info("noise", T.FLOAT, [1, 16]),
        ],
        [w],
    )
    return _save(graph, path, opset=17, ir_version=9)


def nan_output_model(path: Path) -> Path:
    """A correct output that contains NaN: the log of sums of which about half are negative."""
    from onnx import TensorProto as T
    from onnx import helper, numpy_helper

    w = numpy_helper.from_array(np.random.default_rng(2).standard_normal((16, 16)).astype(np.float32), "w")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Log", ["m"], ["y"])]
    graph = helper.make_graph(
        nodes,
        "nan",
        [helper.make_tensor_value_info("x", T.FLOAT, [1, 16])],
        [helper.make_tensor_value_info("y", T.FLOAT, [1, 16])],
        [w],
    )
    return _save(graph, path, opset=17, ir_version=9)


def qdq_model(path: Path, weights_bytes: int = 1 << 16, seed: int = 0) -> Path:
    """A static uint8 QDQ MatMul chain the HTP backend takes whole (the qnn target's own kind)."""
    from harness.targets.qnn.qdq import make_qdq_model

    make_qdq_model(path, weights_bytes, seed=seed)
    return path


def compile_shared_pipeline(folder: Path, names=("prompt", "token")) -> list[Path]:
    """Two QDQ models compiled into ONE shared QNN context binary, as LLM pipelines ship them
    (``ep.share_ep_contexts`` while compiling, ``ep.stop_share_ep_contexts`` for the last):
    ``<first>_ctx.onnx`` and ``<second>_ctx.onnx`` both name ``<first>_ctx_qnn.bin``."""
    import onnxruntime as ort

    from harness.targets.qnn.ep import register_qnn_ep

    folder.mkdir(parents=True, exist_ok=True)
    out = []
    for i, name in enumerate(names):
        src = qdq_model(folder / f"{name}.onnx", seed=i)
        so = ort.SessionOptions()
        so.log_severity_level = 3
        so.add_provider_for_devices(register_qnn_ep(), {"backend_type": "htp"})
        so.add_session_config_entry("ep.share_ep_contexts", "1")
        if i == len(names) - 1:
            so.add_session_config_entry("ep.stop_share_ep_contexts", "1")
        ort.ModelCompiler(so, str(src), False).compile_to_file(str(folder / f"{name}_ctx.onnx"))
        src.unlink()  # the folder holds the compiled pipeline only
        out.append(folder / f"{name}_ctx.onnx")
    return out


def constant_weights_model(path: Path, width: int = 256, layers: int = 8) -> Path:
    """Paddle-style: every weight in a Constant node (no initializer at all), a dynamic batch
    named like paddle2onnx names it; ``layers`` fp32 MatMul+Relu of ``width``."""
    from onnx import TensorProto as T
    from onnx import helper, numpy_helper

    rng = np.random.default_rng(23)
    nodes = []
    prev = "x"
    for i in range(layers):
        w = (rng.standard_normal((width, width)) / np.sqrt(width)).astype(np.float32)
        nodes.append(helper.make_node("Constant", [], [f"w{i}"], value=numpy_helper.from_array(w, f"w{i}")))
        nodes.append(helper.make_node("MatMul", [prev, f"w{i}"], [f"m{i}"]))
        out = "y" if i == layers - 1 else f"h{i}"
        nodes.append(helper.make_node("Relu", [f"m{i}"], [out]))
        prev = out
    graph = helper.make_graph(
        nodes,
        "paddle_style",
        [helper.make_tensor_value_info("x", T.FLOAT, ["p2o.DynamicDimension.0", width])],
        [helper.make_tensor_value_info("y", T.FLOAT, ["p2o.DynamicDimension.0", width])],
    )
    return _save(graph, path, opset=17, ir_version=9)


def float8_model(path: Path) -> Path:
    """float8 (e4m3fn) weights dequantized per tensor, then MatMul: the float8 storage ORT
    supports (DequantizeLinear, opset 21)."""
    import ml_dtypes
    from onnx import TensorProto as T
    from onnx import helper, numpy_helper

    rng = np.random.default_rng(88)
    values = rng.standard_normal((64, 32)).astype(ml_dtypes.float8_e4m3fn)
    w8 = helper.make_tensor("w8", T.FLOAT8E4M3FN, [64, 32], values.view(np.uint8).tobytes(), raw=True)
    inits = [w8, numpy_helper.from_array(np.array(0.125, np.float32), "s")]
    nodes = [helper.make_node("DequantizeLinear", ["w8", "s"], ["wd"]), helper.make_node("MatMul", ["x", "wd"], ["y"])]
    graph = helper.make_graph(
        nodes,
        "float8",
        [helper.make_tensor_value_info("x", T.FLOAT, [2, 64])],
        [helper.make_tensor_value_info("y", T.FLOAT, [2, 32])],
        inits,
    )
    return _save(graph, path)


def fp16_cancelling_model(path: Path) -> Path:
    """z = (x @ w + 3e4) - 3e4: exact in fp32 (ORT's CPU EP), all lost in fp16 (the HTP runs a
    float graph in fp16: one step at 3e4 is 16), so the compiled model's output is wrong."""
    from onnx import TensorProto as T
    from onnx import helper, numpy_helper

    w = numpy_helper.from_array(np.random.default_rng(1).standard_normal((16, 16)).astype(np.float32), "w")
    big = numpy_helper.from_array(np.array([3e4], np.float32), "big")
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["y"]),
        helper.make_node("Add", ["y", "big"], ["s"]),
        helper.make_node("Sub", ["s", "big"], ["z"]),
    ]
    graph = helper.make_graph(
        nodes,
        "cancel",
        [helper.make_tensor_value_info("x", T.FLOAT, [1, 16])],
        [helper.make_tensor_value_info("z", T.FLOAT, [1, 16])],
        [w, big],
    )
    return _save(graph, path, opset=17, ir_version=9)


def dynamic_quantized_model(path: Path) -> Path:
    """A MatMul model quantized by ORT's own ``quantize_dynamic``: DynamicQuantizeLinear and
    MatMulInteger, as dynamically quantized transformers ship."""
    from onnx import TensorProto as T
    from onnx import helper, numpy_helper
    from onnxruntime.quantization import quantize_dynamic

    w = numpy_helper.from_array(np.random.default_rng(3).standard_normal((64, 64)).astype(np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])],
        "dyn",
        [helper.make_tensor_value_info("x", T.FLOAT, [1, 64])],
        [helper.make_tensor_value_info("y", T.FLOAT, [1, 64])],
        [w],
    )
    source = _save(graph, path.with_name(path.stem + "-float.onnx"), opset=17, ir_version=9)
    quantize_dynamic(str(source), str(path))
    return path


def nchwc_conv_model(path: Path, channels: int = 60) -> Path:
    """Three 3x3 convs of ``channels`` (not a multiple of 8/16): ORT's NCHWc layout pads their
    weights to its block size when it optimizes the graph, so the weights grow (260 KiB to 295)."""
    from onnx import TensorProto as T
    from onnx import helper, numpy_helper

    rng = np.random.default_rng(60)
    shapes = {"w1": (channels, 3, 3, 3), "w2": (channels, channels, 3, 3), "w3": (channels, channels, 3, 3)}
    inits = [numpy_helper.from_array((rng.standard_normal(s) * 0.05).astype(np.float32), n) for n, s in shapes.items()]
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["a"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["a"], ["b"]),
        helper.make_node("Conv", ["b", "w2"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["d"]),
        helper.make_node("Conv", ["d", "w3"], ["y"], pads=[1, 1, 1, 1]),
    ]
    graph = helper.make_graph(
        nodes,
        "nchwc",
        [helper.make_tensor_value_info("x", T.FLOAT, [1, 3, 32, 32])],
        [helper.make_tensor_value_info("y", T.FLOAT, [1, channels, 32, 32])],
        inits,
    )
    return _save(graph, path, opset=17, ir_version=9)


def embedding_model(path: Path, rows: int = 32768, width: int = 256) -> Path:
    """A 32 MiB fp32 embedding table read by Gather at 16 token ids, then a small MatMul: the
    generated ids (0/1) touch two rows, so a mapped worker keeps a few pages of the table."""
    from onnx import TensorProto as T
    from onnx import helper, numpy_helper

    rng = np.random.default_rng(7)
    table = numpy_helper.from_array(rng.standard_normal((rows, width)).astype(np.float32), "table")
    w = numpy_helper.from_array(rng.standard_normal((width, 16)).astype(np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("Gather", ["table", "ids"], ["e"]), helper.make_node("MatMul", ["e", "w"], ["y"])],
        "embedding",
        [helper.make_tensor_value_info("ids", T.INT64, [1, 16])],
        [helper.make_tensor_value_info("y", T.FLOAT, [1, 16, 16])],
        [table, w],
    )
    return _save(graph, path, opset=17, ir_version=9)


def pnet_model(path: Path) -> Path:
    """MTCNN P-Net's shape: fully convolutional with dynamic N, M1, M2 (a 3x3 conv, a 2x2 pool,
    two more 3x3 convs, no padding): it takes 12 x 12 pixels at least."""
    from onnx import TensorProto as T
    from onnx import helper, numpy_helper

    rng = np.random.default_rng(12)
    shapes = {"w1": (10, 3, 3, 3), "w2": (16, 10, 3, 3), "w3": (32, 16, 3, 3)}
    inits = [numpy_helper.from_array((rng.standard_normal(s) * 0.1).astype(np.float32), n) for n, s in shapes.items()]
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["a"]),
        helper.make_node("MaxPool", ["a"], ["b"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Conv", ["b", "w2"], ["c"]),
        helper.make_node("Conv", ["c", "w3"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "pnet",
        [helper.make_tensor_value_info("x", T.FLOAT, ["N", 3, "M1", "M2"])],
        [helper.make_tensor_value_info("y", T.FLOAT, ["N", 32, None, None])],
        inits,
    )
    return _save(graph, path, opset=17, ir_version=9)


def graph_batch_model(path: Path, nodes_count: int = 6, features: int = 256) -> Path:
    """A graph network's readout: node features x[nodes, F] pooled into one graph embedding,
    then handed back to every node by its graph index ``batch`` (Gather): the generated 0/1
    indices overrun a batch of one graph; ``--input batch=0`` is what runs it."""
    from onnx import TensorProto as T
    from onnx import helper, numpy_helper

    w = numpy_helper.from_array(np.random.default_rng(9).standard_normal((features, features)).astype(np.float32), "w")
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["h"]),
        helper.make_node("ReduceMean", ["h"], ["pooled"], axes=[0], keepdims=1),
        helper.make_node("Gather", ["pooled", "batch"], ["per_node"], axis=0),
        helper.make_node("Add", ["h", "per_node"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "readout",
        [
            helper.make_tensor_value_info("x", T.FLOAT, [nodes_count, features]),
            helper.make_tensor_value_info("batch", T.INT64, [nodes_count]),
        ],
        [helper.make_tensor_value_info("y", T.FLOAT, [nodes_count, features])],
        [w],
    )
    return _save(graph, path, opset=17, ir_version=9)


def lstm_model(path: Path, steps: int = 8, width: int = 16, hidden: int = 32) -> Path:
    """One LSTM over ``steps`` steps of a [steps, 1, width] sequence (static shapes)."""
    from onnx import TensorProto as T
    from onnx import helper, numpy_helper

    rng = np.random.default_rng(8)
    w = numpy_helper.from_array((rng.standard_normal((1, 4 * hidden, width)) * 0.1).astype(np.float32), "W")
    r = numpy_helper.from_array((rng.standard_normal((1, 4 * hidden, hidden)) * 0.1).astype(np.float32), "R")
    graph = helper.make_graph(
        [helper.make_node("LSTM", ["x", "W", "R"], ["y"], hidden_size=hidden)],
        "lstm",
        [helper.make_tensor_value_info("x", T.FLOAT, [steps, 1, width])],
        [helper.make_tensor_value_info("y", T.FLOAT, [steps, 1, 1, hidden])],
        [w, r],
    )
    return _save(graph, path, opset=17, ir_version=9)


def partly_qnn_model(path: Path) -> Path:
    """A float MatMul (64x64 fp32: QNN takes it) beside a bfloat16 table read by Gather (8 KiB:
    QNN cannot map bf16 data, so the compile leaves it, and its weights, to ORT's CPU EP)."""
    import ml_dtypes
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(3)
    w = numpy_helper.from_array((rng.standard_normal((64, 64)) * 0.1).astype(np.float32), "W")
    values = (rng.standard_normal((256, 16)) * 0.5).astype(ml_dtypes.bfloat16)
    table = helper.make_tensor("T", TensorProto.BFLOAT16, [256, 16], values.tobytes(), raw=True)
    nodes = [
        helper.make_node("MatMul", ["x", "W"], ["y"]),
        helper.make_node("Gather", ["T", "idx"], ["g"]),
        helper.make_node("Cast", ["g"], ["z"], to=TensorProto.FLOAT),
    ]
    inputs = [
        helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64]),
        helper.make_tensor_value_info("idx", TensorProto.INT64, [1, 4]),
    ]
    outputs = [
        helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64]),
        helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, 4, 16]),
    ]
    return _save(helper.make_graph(nodes, "partly_qnn", inputs, outputs, [w, table]), path, opset=17, ir_version=9)
