"""Test decoders in optimum's layout that the harness never generated (issue 45's "a decoder the
team never saw"), a plain-onnxruntime greedy loop as the independent reference of their ids, and
the KV-cache size formula.

Built with onnx.helper from standard ops only: a learned token embedding, L pre-norm blocks
(RMS norm, attention with a concatenated KV cache, optional fewer KV heads repeated GQA-style,
a SiLU MLP), an absolute position embedding when the model takes ``position_ids``, a final norm
and lm_head. Inputs ``input_ids``, ``attention_mask``, [``position_ids``],
``past_key_values.{i}.key/value``; outputs ``logits``, ``present.{i}.key/value``; every weight in
one ``model.onnx.data``; a genai_config.json beside it (onnxruntime-genai's schema).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np


@dataclass(frozen=True)
class DecoderShape:
    """What varies between the test decoders."""

    layers: int = 2
    heads: int = 4
    kv_heads: int = 4  # fewer than heads: GQA-like, each KV head serves heads / kv_heads query heads
    head_dim: int = 8
    vocab: int = 97
    ffn: int = 48
    position_ids: bool = True
    kv_fp16: bool = False
    max_positions: int = 128
    seed: int = 45

    @property
    def hidden(self) -> int:
        return self.heads * self.head_dim

    @property
    def kv_element_bytes(self) -> int:
        return 2 if self.kv_fp16 else 4


#: The variations the tests run over (names are test ids).
VARIANTS = {
    "mha-pos-fp32": DecoderShape(),
    "gqa-nopos-fp32": DecoderShape(layers=3, heads=6, kv_heads=2, head_dim=4, position_ids=False, seed=7),
    "gqa-pos-fp16kv": DecoderShape(layers=1, heads=4, kv_heads=1, head_dim=16, kv_fp16=True, vocab=61, seed=3),
}


def eos_id(shape: DecoderShape) -> int:
    """The end-of-sequence id: the last of the vocabulary, whose logit the model holds far down."""
    return shape.vocab - 1


def kv_cache_bytes(shape: DecoderShape, tokens: int, batch: int = 1) -> int:
    """layers x 2 (key, value) x kv_heads x head_dim x tokens x element size (issue 45)."""
    return batch * shape.layers * 2 * shape.kv_heads * shape.head_dim * tokens * shape.kv_element_bytes


class _Graph:
    """Nodes and initializers of one decoder, with unique names."""

    def __init__(self, rng: np.random.Generator) -> None:
        self.nodes: list = []
        self.inits: list = []
        self.rng = rng
        self.count = 0

    def name(self, stem: str) -> str:
        self.count += 1
        return f"{stem}_{self.count}"

    def op(self, op_type: str, inputs: list[str], stem: str = "t", **attrs) -> str:
        from onnx import helper

        out = self.name(stem)
        self.nodes.append(helper.make_node(op_type, inputs, [out], name=out + "_node", **attrs))
        return out

    def const(self, value: np.ndarray, stem: str = "c") -> str:
        """A small constant (axes, shapes, scalars): a Constant node, so shape inference reads it."""
        from onnx import helper, numpy_helper

        name = self.name(stem)
        tensor = numpy_helper.from_array(np.asarray(value), name + "_value")
        self.nodes.append(helper.make_node("Constant", [], [name], name=name + "_node", value=tensor))
        return name

    def initializer(self, value: np.ndarray, stem: str) -> str:
        """A weight: an initializer, saved in model.onnx.data."""
        from onnx import numpy_helper

        name = self.name(stem)
        self.inits.append(numpy_helper.from_array(value, name))
        return name

    def weight(self, shape: tuple[int, ...], stem: str, scale: float = 0.3) -> str:
        return self.initializer((self.rng.standard_normal(shape) * scale).astype(np.float32), stem)

    def rms_norm(self, x: str, dim: int) -> str:
        mean = self.op("ReduceMean", [self.op("Mul", [x, x]), self.const(np.array([-1], np.int64))], keepdims=1)
        rms = self.op("Sqrt", [self.op("Add", [mean, self.const(np.float32(1e-5))])])
        return self.op("Mul", [self.op("Div", [x, rms]), self.initializer(np.ones(dim, np.float32) + 0.1, "norm")])


def _heads(g: _Graph, x: str, n: int, d: int) -> str:
    """[B, S, n*d] -> [B, n, S, d]."""
    shaped = g.op("Reshape", [x, g.const(np.array([0, 0, n, d], np.int64))])
    return g.op("Transpose", [shaped], perm=[0, 2, 1, 3])


def _repeat_kv(g: _Graph, kv: str, s: DecoderShape) -> str:
    """[B, kvH, T, d] -> [B, H, T, d], each KV head repeated heads / kv_heads times (GQA)."""
    if s.kv_heads == s.heads:
        return kv
    group = s.heads // s.kv_heads
    five = g.op("Unsqueeze", [kv, g.const(np.array([2], np.int64))])  # [B, kvH, 1, T, d]
    shape = g.op("Shape", [five])
    target = g.op(
        "Concat",
        [
            g.op("Slice", [shape, g.const(np.array([0], np.int64)), g.const(np.array([2], np.int64))]),
            g.const(np.array([group], np.int64)),
            g.op("Slice", [shape, g.const(np.array([3], np.int64)), g.const(np.array([5], np.int64))]),
        ],
        axis=0,
    )
    expanded = g.op("Expand", [five, target])
    return g.op("Reshape", [expanded, g.const(np.array([0, s.heads, -1, s.head_dim], np.int64))])


def _mask(g: _Graph, attention_mask: str, q_len: str, total: str) -> str:
    """[B, 1, S, T] bool: key j visible to query i (absolute T - S + i) when j <= T - S + i and
    attention_mask[b, j] is 1."""
    zero, one = g.const(np.int64(0)), g.const(np.int64(1))
    keys = g.op("Range", [zero, total, one])  # [T]
    queries = g.op("Range", [g.op("Sub", [total, q_len]), total, one])  # [S]
    q_col = g.op("Unsqueeze", [queries, g.const(np.array([1], np.int64))])  # [S, 1]
    causal = g.op("Not", [g.op("Greater", [keys, q_col])])  # [S, T]
    am = g.op("Cast", [attention_mask], to=9)  # [B, T] bool
    am4 = g.op("Unsqueeze", [am, g.const(np.array([1, 2], np.int64))])  # [B, 1, 1, T]
    return g.op("And", [causal, am4])


def _scalar_dim(g: _Graph, tensor: str, axis: int) -> str:
    return g.op("Squeeze", [g.op("Shape", [tensor], start=axis, end=axis + 1), g.const(np.array([0], np.int64))])


def build_graph(s: DecoderShape):
    """The decoder as an onnx ModelProto (weights inline; `write_decoder` moves them out)."""
    from onnx import TensorProto, helper

    g = _Graph(np.random.default_rng(s.seed))
    kv_type = TensorProto.FLOAT16 if s.kv_fp16 else TensorProto.FLOAT
    inputs = [
        helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "sequence"]),
        helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch", "total_sequence"]),
    ]
    if s.position_ids:
        inputs.append(helper.make_tensor_value_info("position_ids", TensorProto.INT64, ["batch", "sequence"]))
    outputs = [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", "sequence", s.vocab])]
    x = g.op("Gather", [g.weight((s.vocab, s.hidden), "embed", 1.0), "input_ids"], axis=0)
    if s.position_ids:
        positions = g.weight((s.max_positions, s.hidden), "pos_embed", 0.5)
        x = g.op("Add", [x, g.op("Gather", [positions, "position_ids"], axis=0)])
    q_len = _scalar_dim(g, "input_ids", 1)
    mask = None
    for i in range(s.layers):
        past_k, past_v = f"past_key_values.{i}.key", f"past_key_values.{i}.value"
        for name in (past_k, past_v):
            dims = ["batch", s.kv_heads, "past_sequence", s.head_dim]
            inputs.append(helper.make_tensor_value_info(name, kv_type, dims))
        h = g.rms_norm(x, s.hidden)
        q = _heads(g, g.op("MatMul", [h, g.weight((s.hidden, s.hidden), f"q{i}")]), s.heads, s.head_dim)
        kv_dim = s.kv_heads * s.head_dim
        k = _heads(g, g.op("MatMul", [h, g.weight((s.hidden, kv_dim), f"k{i}")]), s.kv_heads, s.head_dim)
        v = _heads(g, g.op("MatMul", [h, g.weight((s.hidden, kv_dim), f"v{i}")]), s.kv_heads, s.head_dim)
        if s.kv_fp16:
            k, v = g.op("Cast", [k], to=kv_type), g.op("Cast", [v], to=kv_type)
        present_k, present_v = f"present.{i}.key", f"present.{i}.value"
        g.nodes.append(helper.make_node("Concat", [past_k, k], [present_k], axis=2, name=f"cat_k{i}"))
        g.nodes.append(helper.make_node("Concat", [past_v, v], [present_v], axis=2, name=f"cat_v{i}"))
        for name in (present_k, present_v):
            dims = ["batch", s.kv_heads, "total_sequence", s.head_dim]
            outputs.append(helper.make_tensor_value_info(name, kv_type, dims))
        keys, values = present_k, present_v
        if s.kv_fp16:
            keys = g.op("Cast", [keys], to=TensorProto.FLOAT)
            values = g.op("Cast", [values], to=TensorProto.FLOAT)
        keys, values = _repeat_kv(g, keys, s), _repeat_kv(g, values, s)
        if mask is None:
            mask = _mask(g, "attention_mask", q_len, _scalar_dim(g, present_k, 2))
        scores = g.op("MatMul", [q, g.op("Transpose", [keys], perm=[0, 1, 3, 2])])
        scores = g.op("Mul", [scores, g.const(np.float32(1.0 / np.sqrt(s.head_dim)))])
        scores = g.op("Where", [mask, scores, g.const(np.float32(-1e9))])
        attended = g.op("MatMul", [g.op("Softmax", [scores], axis=-1), values])  # [B, H, S, d]
        merged = g.op(
            "Reshape",
            [g.op("Transpose", [attended], perm=[0, 2, 1, 3]), g.const(np.array([0, 0, s.hidden], np.int64))],
        )
        x = g.op("Add", [x, g.op("MatMul", [merged, g.weight((s.hidden, s.hidden), f"o{i}")])])
        h = g.rms_norm(x, s.hidden)
        up = g.op("MatMul", [h, g.weight((s.hidden, s.ffn), f"up{i}")])
        act = g.op("Mul", [up, g.op("Sigmoid", [up])])  # SiLU
        x = g.op("Add", [x, g.op("MatMul", [act, g.weight((s.ffn, s.hidden), f"down{i}")])])
    head = g.op("MatMul", [g.rms_norm(x, s.hidden), g.weight((s.hidden, s.vocab), "lm_head", 1.0)])
    bias = np.zeros(s.vocab, np.float32)
    bias[eos_id(s)] = -1e4  # never generated: every run makes exactly its new tokens, as the reference
    g.nodes.append(helper.make_node("Add", [head, g.initializer(bias, "lm_bias")], ["logits"], name="logits_node"))
    graph = helper.make_graph(g.nodes, "unseen_decoder", inputs, outputs, g.inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=8)


def genai_config(s: DecoderShape, max_length: int) -> dict:
    """onnxruntime-genai's genai_config.json for this decoder (greedy; the model concatenates
    its KV cache, so past and present do not share a buffer)."""
    inputs = {
        "input_ids": "input_ids",
        "attention_mask": "attention_mask",
        "past_key_names": "past_key_values.%d.key",
        "past_value_names": "past_key_values.%d.value",
    }
    if s.position_ids:
        inputs["position_ids"] = "position_ids"
    return {
        "model": {
            "bos_token_id": 1,
            "context_length": s.max_positions,
            "decoder": {
                "session_options": {"log_id": "onnxruntime-genai", "provider_options": []},
                "filename": "model.onnx",
                "head_size": s.head_dim,
                "hidden_size": s.hidden,
                "inputs": inputs,
                "outputs": {
                    "logits": "logits",
                    "present_key_names": "present.%d.key",
                    "present_value_names": "present.%d.value",
                },
                "num_attention_heads": s.heads,
                "num_hidden_layers": s.layers,
                "num_key_value_heads": s.kv_heads,
            },
            "eos_token_id": eos_id(s),
            "pad_token_id": 0,
            "type": "llama",
            "vocab_size": s.vocab,
        },
        "search": {
            "do_sample": False,
            "early_stopping": True,
            "max_length": max_length,
            "min_length": 0,
            "num_beams": 1,
            "num_return_sequences": 1,
            "past_present_share_buffer": False,
            "repetition_penalty": 1.0,
            "temperature": 1.0,
            "top_k": 1,
            "top_p": 1.0,
        },
    }


def write_decoder(folder: Path, s: DecoderShape, max_length: int = 64) -> Path:
    """model.onnx + model.onnx.data (every weight) + genai_config.json in ``folder``; the .onnx path."""
    import onnx

    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "model.onnx"
    onnx.save_model(
        build_graph(s),
        str(path),
        save_as_external_data=True,
        all_tensors_to_one_file=True,
        location="model.onnx.data",
        size_threshold=0,
    )
    (folder / "genai_config.json").write_text(json.dumps(genai_config(s, max_length), indent=2), encoding="utf-8")
    return path


@dataclass
class GreedyRun:
    """What the plain onnxruntime loop generated."""

    ids: list[int]
    kv_cache_bytes: int  # the present tensors' bytes after the last step
    kv_tokens: int  # their sequence length


def greedy_ids(model_path: Path, prompt: list[int], new_tokens: int) -> GreedyRun:
    """Greedy generation with a plain onnxruntime session: prefill the prompt, then one token at
    a time, each step's present fed back as the next step's past (the independent reference)."""
    import onnxruntime as ort

    session = ort.InferenceSession(str(model_path), providers=["CPUExecutionProvider"])
    names = {i.name: i for i in session.get_inputs()}
    past = {}
    for name, info in names.items():
        if name.startswith("past_key_values."):
            dtype = np.float16 if info.type == "tensor(float16)" else np.float32
            past[name] = np.zeros((1, info.shape[1], 0, info.shape[3]), dtype)
    outputs = [o.name for o in session.get_outputs()]
    ids, step, position, generated = list(prompt), list(prompt), 0, []
    for _ in range(new_tokens):
        feeds = {
            "input_ids": np.array([step], np.int64),
            "attention_mask": np.ones((1, position + len(step)), np.int64),
            **past,
        }
        if "position_ids" in names:
            feeds["position_ids"] = np.arange(position, position + len(step), dtype=np.int64)[None, :]
        result = dict(zip(outputs, session.run(outputs, feeds), strict=True))
        token = int(np.argmax(result["logits"][0, -1]))
        generated.append(token)
        position += len(step)
        step = [token]
        past = {name: result[name.replace("past_key_values.", "present.")] for name in past}
    ids.extend(generated)
    kv = [v for k, v in result.items() if k.startswith("present.")]
    return GreedyRun(generated, sum(v.nbytes for v in kv), kv[0].shape[2])
