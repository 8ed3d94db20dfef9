"""The embedded default decoder of the generate workload: a llama-shaped fp32 model (token and
position embeddings, L blocks of RMSNorm, attention over a KV cache that the graph concatenates,
SwiGLU MLP, lm_head) of about ``--model-size`` bytes of weights, from standard ONNX ops, with a
genai_config.json beside it; cached like the generated chain."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from harness.cache import default_cache_dir

from .cachekeys import settings_tag
from .externalise import external_tensor_proto, write_aligned
from .folder import PreparedModel, TensorEntry, cached_model
from .sessions import SessionSettings

HEAD_DIM = 64
VOCAB = 2048
CONTEXT = 512  # positions the model has: P + G may not exceed it
EOS = 0  # its lm_head column is zero, so greedy decoding never picks it: every run makes G tokens


@dataclass(frozen=True)
class LlamaDims:
    hidden: int
    layers: int
    vocab: int = VOCAB
    context: int = CONTEXT

    @property
    def heads(self) -> int:
        return self.hidden // HEAD_DIM

    @property
    def mlp(self) -> int:
        return 3 * self.hidden

    def weights_bytes(self) -> int:
        per_layer = 4 * self.hidden**2 + 3 * self.hidden * self.mlp + 2 * self.hidden
        return 4 * (self.layers * per_layer + (2 * self.vocab + self.context + 1) * self.hidden)

    @classmethod
    def of_size(cls, weights_bytes: int) -> LlamaDims:
        """The widest hidden size that gives at least two layers near ``weights_bytes``."""
        for hidden in (1024, 512, 256, 128, 64):
            fixed = cls(hidden, 0).weights_bytes()
            layers = round((weights_bytes - fixed) / (4 * 13 * hidden * hidden))
            if layers >= 2 or hidden == 64:
                return cls(hidden, max(layers, 1))
        raise AssertionError("unreachable")


def generated_decoder(
    weights_bytes: int, *, seed: int = 0, cache_dir: Path | None = None, settings: SessionSettings | None = None
) -> PreparedModel:
    """The decoder of about ``weights_bytes``, built once and cached."""
    from .decoder import decoder_request
    from .inputs import generate_feeds, given_feeds, model_inputs, resolve_shapes
    from .reference import write_reference

    settings = settings or SessionSettings()
    dims = LlamaDims.of_size(weights_bytes)
    name = f"llama-cm-d{dims.hidden}-l{dims.layers}-v{dims.vocab}-s{seed}{settings_tag(settings)}"

    def build(tmp: Path) -> PreparedModel:
        import onnx

        tensors = _write_decoder(tmp, dims, seed)
        graph = onnx.load(str(tmp / "model.onnx"), load_external_data=False)
        request = decoder_request(graph, "the generated decoder")
        inputs = model_inputs(graph)
        shapes = resolve_shapes(inputs, request, {}, "the generated decoder")
        outputs = {o.name: o.type.tensor_type.elem_type for o in graph.graph.output}
        prepared = PreparedModel(
            tmp,
            f"generated:llama:{dims.layers}x{dims.hidden}xfp32,vocab{dims.vocab}",
            tensors,
            shapes,
            {i.name: i.onnx_type for i in inputs},
            list(outputs),
            sum(t.length for t in tensors),
            output_types=outputs,
            extra={"gathered_bytes": 4 * (dims.vocab + dims.context) * dims.hidden, "vocab_size": dims.vocab},
        )
        feeds = generate_feeds(inputs, shapes, given_feeds(inputs, request))
        write_reference(prepared, prepared.onnx_path, feeds, settings)
        return prepared

    return cached_model((cache_dir or default_cache_dir()) / name, build)


class _Graph:
    """Nodes and weights of the decoder as it is written: weights go to ``weights.bin`` at once."""

    def __init__(self, f, rng) -> None:
        self.f, self.rng = f, rng
        self.nodes, self.protos, self.consts, self.tensors = [], [], [], []
        self._n = 0

    def op(self, op_type: str, *inputs: str, out: str = "", **attrs) -> str:
        from onnx import helper

        self._n += 1
        out = out or f"{op_type.lower()}{self._n}"
        self.nodes.append(helper.make_node(op_type, list(inputs), [out], **attrs))
        return out

    def const(self, name: str, values, dtype: str = "int64") -> str:
        import numpy as np
        from onnx import numpy_helper

        self.consts.append(numpy_helper.from_array(np.array(values, dtype), name))
        return name

    def weight(self, name: str, shape: tuple[int, ...], scale: float | None = None, fill: float | None = None) -> str:
        """A weight: ``fill`` everywhere, else seeded normal values times ``scale`` (1/sqrt(rows))."""
        import numpy as np
        from onnx import TensorProto

        if fill is not None:
            w = np.full(shape, fill, np.float32)
        else:
            w = self.rng.standard_normal(shape, dtype=np.float32)
            w *= np.float32(scale if scale is not None else 1 / np.sqrt(shape[0]))
        if name == "lm_head":
            w[:, EOS] = 0.0
        offset = write_aligned(self.f, w.data)
        self.tensors.append(TensorEntry(name, "float32", list(shape), offset, w.nbytes, TensorProto.FLOAT))
        self.protos.append(external_tensor_proto(name, TensorProto.FLOAT, list(shape), offset, w.nbytes))
        return name

    def rms_norm(self, x: str, name: str, hidden: int) -> str:
        mean = self.op("ReduceMean", self.op("Mul", x, x), axes=[-1], keepdims=1)
        root = self.op("Sqrt", self.op("Add", mean, "eps"))
        return self.op("Mul", self.op("Div", x, root), self.weight(name, (hidden,), fill=1.0))


def _write_decoder(tmp: Path, dims: LlamaDims, seed: int) -> list[TensorEntry]:
    """``weights.bin``, ``model.onnx`` pointing into it, and ``genai_config.json``."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper

    d, heads = dims.hidden, dims.heads
    with open(tmp / "weights.bin", "wb") as f:
        g = _Graph(f, np.random.default_rng(seed))
        g.const("eps", 1e-5, "float32")
        g.const("heads_shape", [0, 0, heads, HEAD_DIM])
        g.const("hidden_shape", [0, 0, d])
        g.const("neg", -1e9, "float32")
        g.const("zero", 0.0, "float32")
        g.const("one", 1.0, "float32")
        g.const("scale", 1 / np.sqrt(HEAD_DIM), "float32")
        hidden = g.op(
            "Add",
            g.op("Gather", g.weight("embed", (dims.vocab, d), scale=1.0), "input_ids"),
            g.op("Gather", g.weight("positions", (dims.context, d), scale=0.1), "position_ids"),
        )
        bias = _attention_bias(g)
        for i in range(dims.layers):
            hidden = _block(g, hidden, bias, i, dims)
        normed = g.rms_norm(hidden, "norm", d)
        head = g.weight("lm_head", (d, dims.vocab))
        g.op("MatMul", normed, head, out="logits")
    kv = ["batch_size", heads, "past_sequence_length", HEAD_DIM]
    present = ["batch_size", heads, "total_sequence_length", HEAD_DIM]
    value = helper.make_tensor_value_info
    inputs = [
        value("input_ids", TensorProto.INT64, ["batch_size", "sequence_length"]),
        value("attention_mask", TensorProto.INT64, ["batch_size", "total_sequence_length"]),
        value("position_ids", TensorProto.INT64, ["batch_size", "sequence_length"]),
    ]
    outputs = [value("logits", TensorProto.FLOAT, ["batch_size", "sequence_length", dims.vocab])]
    for i in range(dims.layers):
        for kind in ("key", "value"):
            inputs.append(value(f"past_key_values.{i}.{kind}", TensorProto.FLOAT, kv))
            outputs.append(value(f"present.{i}.{kind}", TensorProto.FLOAT, present))
    graph = helper.make_graph(g.nodes, "llama", inputs, outputs, [*g.protos, *g.consts])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    onnx.save(model, str(tmp / "model.onnx"))
    (tmp / "genai_config.json").write_text(json.dumps(genai_config(dims), indent=1), encoding="utf-8")
    return g.tensors


def _attention_bias(g: _Graph) -> str:
    """[B, 1, S, T]: -1e9 where a key is in a query's future or masked out. A query's place is its
    slot in the cache (the last S of T), as optimum's masks count, not its position_ids: a
    left-padded fixed-size cache (the qnn target's static graphs) then stays causal."""
    total = g.op("Gather", g.op("Shape", "attention_mask"), g.const("one_index", 1), axis=0)
    keys = g.op("Range", g.const("start", 0), total, g.const("step", 1))
    new = g.op("Gather", g.op("Shape", "input_ids"), "one_index", axis=0)
    slots = g.op("Range", g.op("Sub", total, new), total, "step")
    queries = g.op("Unsqueeze", slots, g.const("query_axes", [1]))
    causal = g.op("Where", g.op("Greater", keys, queries), "neg", "zero")
    mask = g.op("Cast", "attention_mask", to=1)
    padding = g.op("Mul", g.op("Sub", "one", mask), "neg")
    return g.op("Add", causal, g.op("Unsqueeze", padding, g.const("mask_axes", [1, 2])))


def _block(g: _Graph, x: str, bias: str, i: int, dims: LlamaDims) -> str:
    """One transformer block; its KV cache is past concatenated with this step's keys and values."""
    d = dims.hidden
    normed = g.rms_norm(x, f"layers.{i}.attn_norm", d)

    def heads(name: str) -> str:
        projected = g.op("MatMul", normed, g.weight(f"layers.{i}.{name}", (d, d)))
        return g.op("Transpose", g.op("Reshape", projected, "heads_shape"), perm=[0, 2, 1, 3])

    q = heads("q")
    k = g.op("Concat", f"past_key_values.{i}.key", heads("k"), axis=2, out=f"present.{i}.key")
    v = g.op("Concat", f"past_key_values.{i}.value", heads("v"), axis=2, out=f"present.{i}.value")
    scores = g.op("Mul", g.op("MatMul", q, g.op("Transpose", k, perm=[0, 1, 3, 2])), "scale")
    attended = g.op("MatMul", g.op("Softmax", g.op("Add", scores, bias), axis=-1), v)
    merged = g.op("Reshape", g.op("Transpose", attended, perm=[0, 2, 1, 3]), "hidden_shape")
    x = g.op("Add", x, g.op("MatMul", merged, g.weight(f"layers.{i}.o", (d, d))))
    normed = g.rms_norm(x, f"layers.{i}.mlp_norm", d)
    gate = g.op("MatMul", normed, g.weight(f"layers.{i}.gate", (d, dims.mlp)))
    up = g.op("MatMul", normed, g.weight(f"layers.{i}.up", (d, dims.mlp)))
    act = g.op("Mul", g.op("Mul", gate, g.op("Sigmoid", gate)), up)
    return g.op("Add", x, g.op("MatMul", act, g.weight(f"layers.{i}.down", (dims.mlp, d))))


def genai_config(dims: LlamaDims) -> dict:
    """What onnxruntime-genai needs to run the decoder: its IO names and sizes; the graph
    concatenates its KV cache, so past and present share no buffer."""
    return {
        "model": {
            "type": "llama",
            "bos_token_id": 1,
            "eos_token_id": EOS,
            "pad_token_id": EOS,
            "context_length": dims.context,
            "vocab_size": dims.vocab,
            "decoder": {
                "filename": "model.onnx",
                "session_options": {"log_id": "onnxruntime-genai", "provider_options": []},
                "head_size": HEAD_DIM,
                "hidden_size": dims.hidden,
                "num_attention_heads": dims.heads,
                "num_key_value_heads": dims.heads,
                "num_hidden_layers": dims.layers,
                "inputs": {
                    "input_ids": "input_ids",
                    "attention_mask": "attention_mask",
                    "position_ids": "position_ids",
                    "past_key_names": "past_key_values.%d.key",
                    "past_value_names": "past_key_values.%d.value",
                },
                "outputs": {
                    "logits": "logits",
                    "present_key_names": "present.%d.key",
                    "present_value_names": "present.%d.value",
                },
            },
        },
        "search": {
            "do_sample": False,
            "num_beams": 1,
            "max_length": dims.context,
            "min_length": 0,
            "past_present_share_buffer": False,
            "top_k": 1,
        },
    }
