"""Several models in every session group of a worker: a repeated --model, a folder, or the
files an onnxruntime-genai genai_config.json names; on cpu/ort-native and, with shared context
binaries, on qnn."""

from __future__ import annotations

import json

import generated
import pytest
from models_support import ONE, assert_all_ok, assert_usage_error, qnn_skip_reason, worker_specs


@pytest.fixture(scope="module")
def two_models(tmp_path_factory):
    folder = tmp_path_factory.mktemp("pipeline")
    return [generated.int8_qdq_model(folder / "first.onnx"), generated.fp16_model(folder / "second.onnx")]


@pytest.mark.parametrize("target", ["cpu", pytest.param("ort-native", marks=pytest.mark.slow)])
def test_two_models_load_together_in_one_worker(run_harness, two_models, target):
    outcome = run_harness(
        "run",
        "--target",
        target,
        "--model",
        str(two_models[0]),
        "--model",
        str(two_models[1]),
        "--sessions-per-process",
        "2",
        *ONE,
    )
    rows = assert_all_ok(outcome, workers=2)  # one worker per mode, each with 2 groups x 2 models
    meta = json.loads((outcome.out / "metadata.json").read_text())
    assert meta["run"]["models"] == [str(p) for p in two_models]
    folders = [s["models"] for s in worker_specs(outcome.out)]
    assert all(len(f) == 2 for f in folders)
    from harness.prep.folder import PreparedModel

    weights = sum(PreparedModel.load(__import__("pathlib").Path(f)).weights_bytes for f in folders[0])
    assert {r.weights_bytes for r in rows} == {weights}
    if target == "cpu":  # 4 loads in a worker, none retried: not "mapped after a retry"
        assert {r.map_attempts for r in rows if r.mode == "mapped"} == {1}
        assert "after a retry" not in outcome.stdout


def test_a_folder_is_a_pipeline_and_genai_config_names_its_models(run_harness, two_models, tmp_path):
    folder = two_models[0].parent
    whole = run_harness("run", "--model", str(folder), *ONE, out=tmp_path / "folder")
    assert_all_ok(whole, workers=2)
    assert json.loads((whole.out / "metadata.json").read_text())["run"]["models"] == [str(p) for p in two_models]
    genai = tmp_path / "genai"
    genai.mkdir()
    for p in two_models:
        (genai / p.name).write_bytes(p.read_bytes())
    config = {"model": {"type": "test", "decoder": {"pipeline": [{"lm_head": {"filename": "second.onnx"}}]}}}
    (genai / "genai_config.json").write_text(json.dumps(config))
    named = run_harness("run", "--model", str(genai), *ONE, out=tmp_path / "named")
    assert_all_ok(named, workers=2)
    assert json.loads((named.out / "metadata.json").read_text())["run"]["models"] == [str(genai / "second.onnx")]


@pytest.mark.parametrize(
    ("layout", "expected"),
    [
        ("twice", ["given twice"]),
        ("config-names-missing", ["genai_config.json entry 'nothere.onnx' is missing"]),
        ("shape-unknown", ["--shape names unknown input(s) ['nope']"]),
    ],
    ids=["same-model-twice", "genai-missing-file", "shape-unknown-in-every-model"],
)
def test_bad_pipelines_are_one_line(run_harness, two_models, tmp_path, layout, expected):
    if layout == "twice":
        args = ["--model", str(two_models[0]), "--model", str(two_models[0])]
    elif layout == "config-names-missing":
        (tmp_path / "genai_config.json").write_text(json.dumps({"model": {"decoder": {"filename": "nothere.onnx"}}}))
        args = ["--model", str(tmp_path)]
    else:
        args = ["--model", str(two_models[0]), "--model", str(two_models[1]), "--shape", "nope=1"]
    assert_usage_error(run_harness("run", *args, *ONE), *expected)


@pytest.mark.qnn
def test_a_pipeline_names_every_unresolved_input_of_every_model_at_once(run_harness, tmp_path):
    """A three-model face detector took two tries: the first model's missing shapes, then the
    next one's. Now one error names both models and every input of each."""
    first = generated.three_dynamic_inputs_model(tmp_path / "first.onnx")
    second = generated.no_shape_input_model(tmp_path / "second.onnx")
    line = assert_usage_error(
        run_harness("run", "--model", str(first), "--model", str(second), *ONE),
        "the pipeline's inputs are not all resolved",
        "first.onnx: input shape(s) not static: ids[batch,sequence]",
        "type_ids[batch,sequence]",
        "second.onnx: input shape(s) not static: x[?...]",
    )
    assert line.count("--free-dim batch=1") == 1


def test_a_shared_context_pipeline_runs_on_qnn(run_harness, tmp_path):
    """Two EPContext models sharing ONE context binary, as LLM pipelines ship: measured as they
    are, both in every session group, ep.share_ep_contexts on (as onnxruntime-genai does), the
    binary counted once."""
    reason = qnn_skip_reason()
    if reason:
        pytest.skip(reason)
    paths = generated.compile_shared_pipeline(tmp_path / "llm")
    bins = sorted((tmp_path / "llm").glob("*.bin"))
    assert len(bins) == 1
    outcome = run_harness("run", "--target", "qnn", "--model", str(tmp_path / "llm"), *ONE)
    rows = assert_all_ok(outcome, workers=2)
    assert {r.weights_bytes for r in rows} == {bins[0].stat().st_size}
    assert all(r.ep_file_mapping and r.ep_file_mapping != "n/a" for r in rows)
    for options in [s["options"] for s in worker_specs(outcome.out)]:
        assert options["share_ep_contexts"] is True and options["onnx"] == [str(p) for p in paths]
    notes = json.loads((outcome.out / "metadata.json").read_text())["target_notes"]
    assert any("share QNN context binaries" in n for n in notes)
    assert sum("pre-compiled EPContext model, measured as it is" in n for n in notes) == 2
