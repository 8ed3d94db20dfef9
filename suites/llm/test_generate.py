"""The generate workload (issue 45): a greedy loop over a decoder with a KV cache in every worker,
for real (real ORT, real worker processes, real memory figures), and its refusals."""

from __future__ import annotations

import io
import json

import numpy as np
import pytest

from harness.cli import main
from harness.core.schema import GENERATE_COLUMNS
from harness.prep.llama import HEAD_DIM, LlamaDims

PROMPT, NEW = 16, 8


@pytest.fixture(scope="module")
def generate_run(harness_runner, request, tmp_path_factory):
    """The issue's first Done-when command, as typed (the generated decoder at its default size)."""
    args = ["run", "--workload", "generate", "--processes", "2", "--prompt-tokens", str(PROMPT)]
    args += ["--new-tokens", str(NEW), "--quiet", "--no-report"]
    outcome = harness_runner.run(*args, owner=request.module.__name__, scratch=tmp_path_factory.mktemp("gen"))
    assert outcome.returncode == 0, outcome.stdout + outcome.stderr
    return outcome


@pytest.mark.memory
def test_every_worker_generates_the_reference_tokens(generate_run):
    rows = generate_run.results()
    meta = json.loads((generate_run.out / "metadata.json").read_text())["run"]
    expected = meta["generate"]["expected_ids"]
    assert meta["workload"] == "generate" and len(meta["generate"]["prompt_ids"]) == PROMPT and len(expected) == NEW
    assert len(rows) == 4 and all(r.output_ok and r.tokens_ok and not r.error for r in rows), [r.error for r in rows]
    assert {r.generated_tokens for r in rows} == {" ".join(map(str, expected))}
    assert {r.path_taken for r in rows if r.mode == "mapped"} == {"mapped"}
    assert {r.path_taken for r in rows if r.mode == "heap"} == {"heap"}
    for r in rows:
        assert all(getattr(r, name) is not None for name in GENERATE_COLUMNS), r
        assert r.ttft_s > 0 and r.decode_tokens_per_s > 0
        assert r.token_latency_p50_s <= r.token_latency_p90_s <= r.token_latency_p99_s


@pytest.mark.memory
def test_kv_cache_bytes_are_the_cache_the_shapes_say(generate_run):
    """layers x 2 x heads x head_dim x tokens x 4 bytes: the last token is generated, not fed."""
    dims = LlamaDims.of_size(256 * 1024**2)
    tokens = PROMPT + NEW - 1
    want = dims.layers * 2 * dims.heads * HEAD_DIM * tokens * 4
    assert {r.kv_cache_bytes for r in generate_run.results()} == {want}


@pytest.mark.memory
def test_mapped_workers_share_the_weights_and_the_control_holds_a_cache(generate_run):
    rows = generate_run.results()
    weights = rows[0].weights_bytes
    mapped = [r for r in rows if r.mode == "mapped"]
    heap = [r for r in rows if r.mode == "heap"]
    assert all(r.copied_bytes < 0.1 * weights for r in mapped)
    assert all(r.copied_bytes > 0.9 * weights for r in heap)
    assert all(r.runtime_bytes > r.kv_cache_bytes for r in rows)


def test_the_loop_with_its_cache_is_the_loop_without_one(model_cache):
    """The ids a plain onnxruntime loop recomputing the whole sequence each step makes (no KV
    cache) are the ones the harness's loop feeding present back as past makes."""
    import onnxruntime as ort

    from harness.prep.decoder import DecoderIO, generate, kv_types
    from harness.prep.llama import generated_decoder

    model = generated_decoder(1024**2, cache_dir=model_cache)
    session = ort.InferenceSession(str(model.onnx_path), providers=["CPUExecutionProvider"])
    io = DecoderIO.find(model.inputs, model.outputs, "test")
    empty = {n: np.zeros(shape, dtype) for n, (dtype, shape) in kv_types(io, model).items()}

    def run(feeds):
        return dict(zip(model.outputs, session.run(model.outputs, feeds), strict=True))

    ids = [5, 9, 2, 7]
    for _ in range(6):
        feeds = {"input_ids": np.array([ids]), "attention_mask": np.ones((1, len(ids)), np.int64)}
        feeds["position_ids"] = np.arange(len(ids))[None]
        ids.append(int(np.argmax(run({**feeds, **empty})["logits"][0, -1])))
    assert generate([run], io, kv_types(io, model), [5, 9, 2, 7], 6).ids == ids[4:]


def test_a_worker_with_other_tokens_fails(model_cache):
    """A session whose ids differ from the reference's fails its worker, saying both."""
    import onnxruntime as ort

    from harness.contract.spec import WorkerRecord, WorkerSettings
    from harness.prep.llama import generated_decoder
    from harness.runner.worker import run_generate
    from harness.targets import get_target
    from harness.targets.base import LiveSessions

    model = generated_decoder(1024**2, cache_dir=model_cache)
    live = LiveSessions()
    live.add_group([ort.InferenceSession(str(model.onnx_path), providers=["CPUExecutionProvider"])])
    record = WorkerRecord()
    settings = WorkerSettings(new_tokens=3, prompt_ids=[1, 2, 3], expected_ids=[0, 0, 0])
    steps = run_generate(get_target("cpu"), live, [model], record, settings)
    assert len(steps) == 2 and record.tokens_ok is False and record.output_ok is False
    assert record.error.startswith("wrong tokens: ") and record.error.endswith("where the reference generated 0 0 0")
    assert live.keepalive, "the KV cache stays alive for the memory sample"


def _error_of(capsys, argv: list[str]) -> str:
    assert main(argv) == 2
    captured = capsys.readouterr()
    (line,) = captured.err.splitlines()
    return line


def test_a_model_that_is_no_decoder_is_refused_in_one_line(capsys, tmp_path):
    import onnx
    from onnx import TensorProto, helper

    weight = helper.make_tensor("w", TensorProto.FLOAT, [64, 64], np.ones(64 * 64, np.float32))
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64])],
        [weight],
    )
    path = tmp_path / "plain.onnx"
    onnx.save(helper.make_model(graph), str(path))
    line = _error_of(capsys, ["run", "--workload", "generate", "--model", str(path), "--out", str(tmp_path / "o")])
    assert line.startswith(f"error: --model {path}: not a decoder")
    assert "not a decoder" in line and "input input_ids" in line and "output logits" in line
    assert "past_key_values" in line and line.endswith("input(s) the loop cannot feed: x")
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize(
    "argv, words",
    [
        (["--workload", "generate", "--prompt-ids", "3,1,4", "--prompt-tokens", "3"], "give one of them"),
        (["--new-tokens", "4"], "--new-tokens applies to --workload generate only"),
        (["--workload", "generate", "--runs", "5"], "--runs does not apply to --workload generate"),
        (["--workload", "generate", "--prompt-ids", "3,-1"], "token ids"),
        (["--workload", "generate", "--prompt-ids", "99999"], "id 99999 is not below the model's vocabulary of 2048"),
        (["--workload", "generate", "--prompt-tokens", "500", "--new-tokens", "13"], "the model's 512 positions"),
    ],
)
def test_contradictions_are_refused_before_any_work(capsys, tmp_path, argv, words):
    assert words in _error_of(capsys, ["run", *argv, "--out", str(tmp_path / "o")])


def test_an_empty_past_is_a_dimension_one_may_name():
    from harness.contract.modelargs import parse_free_dims

    assert parse_free_dims(["past_sequence_length=0"]) == {"past_sequence_length": 0}


def _gqa_decoder(folder, layers=2, heads=4, kv_heads=2, head=8, vocab=50, iterator=False, past_len="past"):
    """A decoder in onnxruntime-genai's model-builder layout: ORT's GroupQueryAttention, fed
    ``seqlens_k`` and ``total_sequence_length`` beside ``input_ids`` and the KV cache; weights
    in model.onnx.data. ``iterator``: also a decode graph over the same file, whose lm_head is
    another tensor of it, and a genai_config.json naming the pair as a pipeline."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(3)
    hidden = heads * head
    inits, nodes = [], []

    def weight(name, *shape):
        inits.append(numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32) * 0.5, name))
        return name

    nodes.append(helper.make_node("Gather", [weight("embed", vocab, hidden), "input_ids"], ["h0"]))
    inputs = [
        helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "seq"]),
        helper.make_tensor_value_info("seqlens_k", TensorProto.INT32, ["batch"]),
        helper.make_tensor_value_info("total_sequence_length", TensorProto.INT32, []),
    ]
    outputs = [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", "seq", vocab])]
    for i in range(layers):
        qkv = [f"{p}{i}" for p in "qkv"]
        for name, width in zip(qkv, (hidden, kv_heads * head, kv_heads * head), strict=True):
            nodes.append(helper.make_node("MatMul", [f"h{i}", weight(f"w{name}", hidden, width)], [name]))
        past = [f"past_key_values.{i}.key", f"past_key_values.{i}.value"]
        present = [f"present.{i}.key", f"present.{i}.value"]
        nodes.append(
            helper.make_node(
                "GroupQueryAttention",
                [*qkv, *past, "seqlens_k", "total_sequence_length"],
                [f"a{i}", *present],
                domain="com.microsoft",
                num_heads=heads,
                kv_num_heads=kv_heads,
            )
        )
        nodes.append(helper.make_node("MatMul", [f"a{i}", weight(f"wo{i}", hidden, hidden)], [f"o{i}"]))
        nodes.append(helper.make_node("Add", [f"h{i}", f"o{i}"], [f"h{i + 1}"]))
        for p, q in zip(past, present, strict=True):
            inputs.append(helper.make_tensor_value_info(p, TensorProto.FLOAT, ["batch", kv_heads, past_len, head]))
            outputs.append(helper.make_tensor_value_info(q, TensorProto.FLOAT, ["batch", kv_heads, "total", head]))
    nodes.append(helper.make_node("MatMul", [f"h{layers}", weight("lm_head", hidden, vocab)], ["logits"]))
    if iterator:
        weight("lm_head_decode", hidden, vocab)
    graph = helper.make_graph(nodes, "gqa", inputs, outputs, inits)
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]
    )
    folder.mkdir()
    onnx.save(model, str(folder / "model.onnx"), save_as_external_data=True, location="model.onnx.data")
    if iterator:
        decode = onnx.load(str(folder / "model.onnx"), load_external_data=False)
        decode.graph.node[-1].input[1] = "lm_head_decode"
        onnx.save(decode, str(folder / "decode.onnx"))
        pipeline = [{"context": {"filename": "model.onnx"}}, {"iterator": {"filename": "decode.onnx"}}]
        (folder / "genai_config.json").write_text(json.dumps({"model": {"decoder": {"pipeline": pipeline}}}))
    return folder / "model.onnx", layers * 2 * kv_heads * head * 4


def test_a_group_query_attention_decoder_gets_its_sequence_lengths(harness_runner, request, tmp_path):
    """seqlens_k and total_sequence_length are fed where the model has them: its ids are those of a
    plain onnxruntime loop recomputing the whole sequence each step (no cache)."""
    import onnxruntime as ort

    path, per_token = _gqa_decoder(tmp_path / "gqa")
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    ids = [3, 1, 4, 1, 5]
    empty = {n: np.zeros((1, 2, 0, 8), np.float32) for n in [i.name for i in session.get_inputs()] if "past" in n}
    for _ in range(6):
        feeds = {"input_ids": np.array([ids]), "seqlens_k": np.array([len(ids) - 1], np.int32)}
        feeds["total_sequence_length"] = np.array(len(ids), np.int32)
        ids.append(int(np.argmax(session.run(["logits"], {**feeds, **empty})[0][0, -1])))
    args = ["run", "--workload", "generate", "--model", str(path), "--prompt-ids", "3,1,4,1,5", "--new-tokens", "6"]
    outcome = _one_mapped_worker(harness_runner, request, tmp_path, *args)
    assert outcome.returncode == 0, outcome.stdout + outcome.stderr
    (row,) = outcome.results()
    assert row.tokens_ok and row.generated_tokens == " ".join(map(str, ids[5:]))
    assert row.kv_cache_bytes == per_token * (5 + 6 - 1)


@pytest.mark.memory
def test_the_summary_and_the_headline_carry_the_generate_figures(generate_run):
    """Declared once in the metric registry: summary.csv, headline.json and the terminal show them."""
    from statistics import median

    rows = generate_run.results()
    for s in generate_run.summary():
        group = [r for r in rows if r.mode == s.mode]
        assert s.ttft_s_median == pytest.approx(median(r.ttft_s for r in group))
        assert s.decode_tokens_per_s_median == pytest.approx(median(r.decode_tokens_per_s for r in group))
        assert s.sum_kv_cache_bytes == sum(r.kv_cache_bytes for r in group)
    top = generate_run.headline()["per_n"][-1]
    assert top["ratios"]["ttft_ratio"] == pytest.approx(top["mapped"]["ttft_s_median"] / top["heap"]["ttft_s_median"])
    assert top["ratios"]["decode_throughput_ratio"] > 0


def test_the_terminal_table_leaves_out_what_neither_mode_measured():
    """An infer run has no TTFT line; a generate run shows tokens/s as a rate, not in seconds."""
    from dataclasses import replace

    from rich.console import Console

    from harness.console import summary_table
    from harness.core.schema import ResultRow
    from harness.core.summary import summarize

    row = ResultRow(target="cpu", mode="mapped", processes=1, sessions_per_process=1, repeat=0, worker=0)
    row = replace(row, output_ok=True, init_s=0.01, uss_bytes=5, pss_bytes=5, rss_bytes=9, private_bytes=5)
    infer = [row, replace(row, mode="heap")]
    generate = [replace(r, ttft_s=0.5, decode_tokens_per_s=12.5, kv_cache_bytes=1024) for r in infer]

    def text(rows):
        out = Console(width=200, record=True, file=io.StringIO())
        out.print(summary_table(summarize(rows)))
        return out.export_text()

    assert "TTFT" not in text(infer) and "decode tokens/s" not in text(infer) and "median init" in text(infer)
    assert "median TTFT" in text(generate) and "12.5/s" in text(generate)


def test_a_prompt_id_beyond_your_decoders_vocabulary_is_refused_before_any_work(capsys, tmp_path):
    path, _ = _gqa_decoder(tmp_path / "gqa")
    argv = ["run", "--workload", "generate", "--model", str(path), "--prompt-ids", "3,50", "--out", str(tmp_path / "o")]
    assert "id 50 is not below the model's vocabulary of 50" in _error_of(capsys, argv)
    assert not (tmp_path / "o").exists()


def _plain_loop(prefill, decode, prompt, new_tokens):
    """A plain onnxruntime loop over GroupQueryAttention graphs: ``prefill`` for the prompt, ``decode`` after."""
    ids = list(prompt)
    names = [i.name for i in prefill.get_inputs() if i.name.startswith("past")]
    kv = {n: np.zeros((1, 2, 0, 8), np.float32) for n in names}
    for step in range(new_tokens):
        session = prefill if step == 0 else decode
        fed = ids if step == 0 else ids[-1:]
        feeds = {"input_ids": np.array([fed]), "seqlens_k": np.array([len(ids) - 1], np.int32)}
        feeds["total_sequence_length"] = np.array(len(ids), np.int32)
        out = dict(zip([o.name for o in session.get_outputs()], session.run(None, {**feeds, **kv}), strict=True))
        ids.append(int(np.argmax(out["logits"][0, -1])))
        kv = {n: out[n.replace("past_key_values", "present")] for n in names}
    return ids[len(prompt) :]


def test_a_prefill_and_a_decode_graph_over_one_weights_file_run_as_one_pipeline(harness_runner, request, tmp_path):
    """A genai_config.json naming a context and an iterator graph: the first prefills, the second
    decodes (its own lm_head: ids a single graph would not give), as a plain onnxruntime loop does."""
    import onnxruntime as ort

    path, _ = _gqa_decoder(tmp_path / "pair", iterator=True)
    prefill, decode = (ort.InferenceSession(str(path.parent / n)) for n in ("model.onnx", "decode.onnx"))
    want = _plain_loop(prefill, decode, [3, 1, 4, 1, 5], 6)
    assert want != _plain_loop(prefill, prefill, [3, 1, 4, 1, 5], 6), "the decode graph must matter"
    args = ["run", "--workload", "generate", "--model", str(path.parent), "--prompt-ids", "3,1,4,1,5"]
    args += ["--new-tokens", "6", "--processes", "1", "--quiet", "--no-report"]
    outcome = harness_runner.run(*args, owner=request.node.nodeid, scratch=tmp_path)
    assert outcome.returncode == 0, outcome.stdout + outcome.stderr
    rows = outcome.results()
    assert len(rows) == 2 and all(r.tokens_ok and r.generated_tokens == " ".join(map(str, want)) for r in rows)


def test_a_decode_graph_that_differs_from_its_prefill_graph_is_refused(capsys, tmp_path):
    first, _ = _gqa_decoder(tmp_path / "a")
    other, _ = _gqa_decoder(tmp_path / "b", layers=1)
    argv = ["run", "--workload", "generate", "--model", str(first), "--model", str(other), "--out", str(tmp_path / "o")]
    assert "the decode graph's inputs and KV cache differ from model.onnx's" in _error_of(capsys, argv)


def test_every_session_and_every_target_runs_the_loop(harness_runner, request, tmp_path):
    """M sessions per worker each hold a cache (summed), and the peer target fills the same columns."""
    path, per_token = _gqa_decoder(tmp_path / "gqa")
    args = ["run", "--workload", "generate", "--model", str(path), "--prompt-tokens", "4", "--new-tokens", "3"]
    args += ["--processes", "1", "--sessions-per-process", "2", "--modes", "mapped", "--peer", "ort-native"]
    outcome = harness_runner.run(*args, "--quiet", "--no-report", owner=request.node.nodeid, scratch=tmp_path)
    assert outcome.returncode == 0, outcome.stdout + outcome.stderr
    rows = outcome.results()
    assert sorted(r.target for r in rows) == ["cpu", "ort-native"]
    assert all(r.tokens_ok and r.kv_cache_bytes == 2 * per_token * (4 + 3 - 1) for r in rows)
    assert len({r.generated_tokens for r in rows}) == 1


def test_a_target_whose_model_is_no_decoder_fails_in_one_line(model_cache):
    """A target that prepared no decoder (the qnn target before its generate workload): one line."""
    from types import SimpleNamespace

    from harness.core.errors import InputError
    from harness.prep.decoder import generation
    from harness.prep.generated import generated_matmul_chain

    chain = generated_matmul_chain(1024**2, cache_dir=model_cache)
    opts = SimpleNamespace(prompt_ids=[], prompt_tokens=None, new_tokens=None)
    with pytest.raises(InputError, match=r"^generated:matmul-chain:.*: not a decoder .* no input input_ids"):
        generation(opts, [chain])


def test_the_infer_workload_takes_a_decoder_with_an_empty_past(harness_runner, request, tmp_path, model_cache):
    """``--free-dim past_sequence_length=0``: one inference over an empty KV cache (refused before)."""
    from harness.prep.llama import generated_decoder

    model = generated_decoder(1024**2, cache_dir=model_cache)
    dims = ["batch_size=1", "sequence_length=4", "past_sequence_length=0", "total_sequence_length=4"]
    args = ["run", "--model", str(model.onnx_path), *(a for d in dims for a in ("--free-dim", d))]
    outcome = _one_mapped_worker(harness_runner, request, tmp_path, *args)
    assert outcome.returncode == 0, outcome.stdout + outcome.stderr
    (row,) = outcome.results()
    assert row.output_ok and row.ttft_s is None and row.kv_cache_bytes is None


def test_a_decoder_whose_cache_has_a_fixed_length_is_refused_in_one_line(capsys, tmp_path):
    path, _ = _gqa_decoder(tmp_path / "static", past_len=16)
    line = _error_of(capsys, ["run", "--workload", "generate", "--model", str(path), "--out", str(tmp_path / "o")])
    assert "a KV cache of fixed length (past_key_values.0.key['batch', 2, 16, 8])" in line


def _one_mapped_worker(harness_runner, request, tmp_path, *args: str):
    """``python -m harness *args`` with one mapped worker, quiet, no report (the session's cache)."""
    more = ["--processes", "1", "--modes", "mapped", "--quiet", "--no-report"]
    return harness_runner.run(*args, *more, owner=request.node.nodeid, scratch=tmp_path)
