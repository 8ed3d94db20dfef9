"""The genai peer's ground truth, standalone: onnxruntime-genai's greedy loop (the harness's
`harness.targets.genai.genai_generate`) generates the same ids as a plain onnxruntime loop over
decoders in optimum's layout the harness never generated, and the KV cache those loops hold
is layers x 2 x kv_heads x head_dim x tokens x element size."""

from __future__ import annotations

import pytest
from unseen_decoders import VARIANTS, DecoderShape, greedy_ids, kv_cache_bytes, write_decoder

PROMPT = [3, 1, 4, 1, 5, 9, 2, 6]
NEW_TOKENS = 8


@pytest.fixture(scope="module")
def decoders(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("unseen")
    return {name: write_decoder(root / name, shape) for name, shape in VARIANTS.items()}


def test_layout_is_optimums(decoders) -> None:
    """Inputs, outputs and weights where optimum puts them: every weight in model.onnx.data."""
    import onnx

    for name, path in decoders.items():
        shape = VARIANTS[name]
        model = onnx.load(str(path), load_external_data=False)
        inputs = [i.name for i in model.graph.input]
        assert inputs[:2] == ["input_ids", "attention_mask"]
        assert ("position_ids" in inputs) == shape.position_ids
        assert [o.name for o in model.graph.output][:3] == ["logits", "present.0.key", "present.0.value"]
        assert sum(n.startswith("past_key_values.") for n in inputs) == 2 * shape.layers
        assert model.graph.initializer and all(
            t.data_location == onnx.TensorProto.EXTERNAL for t in model.graph.initializer
        ), name
        assert {e.value for t in model.graph.initializer for e in t.external_data if e.key == "location"} == {
            "model.onnx.data"
        }
        assert (path.parent / "genai_config.json").is_file()


@pytest.mark.parametrize("name", list(VARIANTS))
def test_kv_cache_bytes_formula(decoders, name) -> None:
    """The present tensors after prefill + G-1 decode steps hold P + G - 1 tokens, and their bytes
    are the formula's (fp16 KV: half of fp32's)."""
    shape = VARIANTS[name]
    run = greedy_ids(decoders[name], PROMPT, NEW_TOKENS)
    assert run.kv_tokens == len(PROMPT) + NEW_TOKENS - 1
    assert run.kv_cache_bytes == kv_cache_bytes(shape, run.kv_tokens)


def test_reference_loop_depends_on_the_prompt(decoders) -> None:
    """The reference is not a constant: another prompt, other ids (so equal ids below mean something)."""
    path = decoders["mha-pos-fp32"]
    assert greedy_ids(path, PROMPT, NEW_TOKENS).ids != greedy_ids(path, PROMPT[::-1], NEW_TOKENS).ids


@pytest.mark.parametrize("name", list(VARIANTS))
def test_genai_ids_equal_plain_ort_loop(decoders, name) -> None:
    """onnxruntime-genai reads the folder's genai_config.json and generates the reference's ids,
    with a TTFT and per-token latencies measured."""
    og = pytest.importorskip("onnxruntime_genai", reason="onnxruntime-genai is not installed (the [test] extra)")
    from harness.targets.genai import genai_generate

    expected = greedy_ids(decoders[name], PROMPT, NEW_TOKENS).ids
    got = genai_generate(og.Model(str(decoders[name].parent)), PROMPT, NEW_TOKENS)
    assert got.ids == expected
    assert got.ttft_s > 0 and len(got.token_s) == NEW_TOKENS - 1 and all(t > 0 for t in got.token_s)
    assert got.decode_tokens_per_s == pytest.approx((NEW_TOKENS - 1) / sum(got.token_s))


def test_genai_sees_a_different_decoder(tmp_path) -> None:
    """Another seed's weights: genai follows the model, not a cached answer (its ids change with
    the reference's)."""
    og = pytest.importorskip("onnxruntime_genai", reason="onnxruntime-genai is not installed (the [test] extra)")
    from harness.targets.genai import genai_generate

    path = write_decoder(tmp_path / "other", DecoderShape(seed=1234))
    expected = greedy_ids(path, PROMPT, NEW_TOKENS).ids
    assert genai_generate(og.Model(str(path.parent)), PROMPT, NEW_TOKENS).ids == expected
