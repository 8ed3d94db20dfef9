"""The genai peer's ground truth, standalone: onnxruntime-genai's greedy loop (the harness's
`harness.targets.genai.genai_generate`) generates the same ids as a plain onnxruntime loop over
decoders in optimum's layout the harness never generated, and the KV cache those loops hold
is layers x 2 x kv_heads x head_dim x tokens x element size."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from unseen_decoders import VARIANTS, DecoderShape, greedy_ids, kv_cache_bytes, write_decoder

from conftest import one_line_error

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

    reference = greedy_ids(decoders[name], PROMPT, NEW_TOKENS)
    expected = reference.ids
    present = [f"present.{i}.{kind}" for i in range(VARIANTS[name].layers) for kind in ("key", "value")]
    got = genai_generate(og.Model(str(decoders[name].parent)), PROMPT, NEW_TOKENS, present)
    assert got.kv_bytes == reference.kv_cache_bytes  # genai's own cache, read from its present outputs
    assert got.ids == expected
    assert got.ttft_s > 0 and len(got.step_s) == NEW_TOKENS - 1 and all(t > 0 for t in got.step_s)


def test_genai_sees_a_different_decoder(tmp_path) -> None:
    """Another seed's weights: genai follows the model, not a cached answer (its ids change with
    the reference's)."""
    og = pytest.importorskip("onnxruntime_genai", reason="onnxruntime-genai is not installed (the [test] extra)")
    from harness.targets.genai import genai_generate

    path = write_decoder(tmp_path / "other", DecoderShape(seed=1234))
    expected = greedy_ids(path, PROMPT, NEW_TOKENS).ids
    assert genai_generate(og.Model(str(path.parent)), PROMPT, NEW_TOKENS).ids == expected


def _rows(outcome) -> list:
    assert outcome.returncode == 0, outcome.stdout + outcome.stderr
    return outcome.results()


@pytest.mark.memory
def test_run_with_peer_genai_adds_genai_rows(run_harness) -> None:
    """The issue's command with --peer genai on the generated decoder: rows of target genai
    (mapped, every worker) whose TTFT, tokens/s, KV bytes and ids are filled, the ids and KV
    bytes equal to the harness's own rows'."""
    outcome = run_harness(
        "run", "--workload", "generate", "--peer", "genai", "--processes", "2", "--prompt-tokens", "16",
        "--new-tokens", "8", "--quiet", "--no-report",
    )  # fmt: skip
    rows = _rows(outcome)
    assert "mapped only: TTFT / tokens/s" in outcome.stdout  # the peer's figures beside the harness's
    genai = [r for r in rows if r.target == "genai"]
    own = [r for r in rows if r.target == "cpu"]
    assert len(genai) == 2 and {r.mode for r in genai} == {"mapped"} and len(own) == 4
    assert all(r.tokens_ok and r.output_ok and not r.error for r in rows), [r.error for r in rows]
    assert {r.generated_tokens for r in genai} == {r.generated_tokens for r in own} and len(
        own[0].generated_tokens.split()
    ) == 8
    assert {r.kv_cache_bytes for r in genai} == {r.kv_cache_bytes for r in own}
    notes = json.loads((outcome.out / "metadata.json").read_text())["target_notes"]
    assert len(notes) == len(set(notes)), notes  # the peer prepares the same decoder: its notes once
    for r in genai:
        assert r.ttft_s > 0 and r.decode_tokens_per_s > 0 and r.token_latency_p50_s > 0 and r.init_s > 0
        # the path from evidence: a private copy of half the weights or more made by og.Model is heap
        assert (r.path_taken == "heap") == (r.uss_bytes >= r.weights_bytes / 2), (r.path_taken, r.uss_bytes)


@pytest.mark.memory
@pytest.mark.parametrize("name", list(VARIANTS))
def test_an_unseen_decoder_through_the_harness_and_genai(run_harness, decoders, name) -> None:
    """Done when: a decoder in optimum's layout the team never saw (GQA, fp16 KV, no
    position_ids) generates through the harness, mapped and heap, and through genai, the ids of a
    plain ORT loop over it, its kv_cache_bytes the formula's (layers x 2 x kv_heads x head_dim x
    tokens x element size)."""
    ids = ",".join(map(str, PROMPT))
    args = ["run", "--workload", "generate", "--model", str(decoders[name].parent), "--prompt-ids", ids]
    rows = _rows(run_harness(*args, "--new-tokens", str(NEW_TOKENS), "--processes", "1", "--peer", "genai", "--quiet"))
    expected = " ".join(map(str, greedy_ids(decoders[name], PROMPT, NEW_TOKENS).ids))
    assert {(r.target, r.mode) for r in rows} == {("cpu", "mapped"), ("cpu", "heap"), ("genai", "mapped")}
    assert all(r.tokens_ok and r.generated_tokens == expected for r in rows), [(r.target, r.error) for r in rows]
    want = kv_cache_bytes(VARIANTS[name], len(PROMPT) + NEW_TOKENS - 1)
    assert all(abs(r.kv_cache_bytes - want) <= 0.1 * want for r in rows), [r.kv_cache_bytes for r in rows]


@pytest.mark.parametrize(
    "args, words",
    [
        (["--peer", "genai"], "add --workload generate"),
        (["--target", "genai", "--workload", "generate"], "use it as --peer genai"),
    ],
)
def test_peer_genai_refusals(run_harness, args, words) -> None:
    one_line_error(run_harness("run", *args), 2, words)


def test_peer_genai_needs_a_genai_config(run_harness, tmp_path) -> None:
    """A decoder folder without genai_config.json: genai could not load it, said in one line."""
    path = write_decoder(tmp_path / "bare", DecoderShape())
    (path.parent / "genai_config.json").unlink()
    args = ["--workload", "generate", "--model", str(path), "--peer", "genai", "--new-tokens", "2"]
    one_line_error(run_harness("run", *args), 2, "genai_config.json", str(path))


def test_peer_genai_without_onnxruntime_genai(tmp_path) -> None:
    """Where onnxruntime-genai cannot be imported (a platform without its wheel), --peer genai is
    refused in one line before any work; a package that raises ImportError stands in for it."""
    from harness.pytest_runner import harness_env, package_root

    shadow = tmp_path / "shadow" / "onnxruntime_genai"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ImportError('no onnxruntime-genai wheel here')\n")
    env = harness_env(extra={"PYTHONPATH": os.pathsep.join([str(shadow.parent), str(package_root())])})
    argv = [sys.executable, "-m", "harness", "run", "--workload", "generate", "--peer", "genai"]
    proc = subprocess.run([*argv, "--out", str(tmp_path / "o")], capture_output=True, text=True, env=env, timeout=120)
    one_line_error(proc, 2, "onnxruntime-genai is not installed", "no onnxruntime-genai wheel here")
    assert not (tmp_path / "o").exists()
