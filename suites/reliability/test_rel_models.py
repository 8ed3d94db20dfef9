"""Bring-your-own models, end to end: every bad model or bad --shape is exit 2 with one
stderr line naming the problem (never a traceback, nothing written), and the same models
with the right --shape run with every worker checking its output against the reference.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
from rel_support import assert_usage_error

#: The silero-vad package ships its ONNX models as package data (pip install silero-vad --no-deps).
SILERO_MODEL = "silero_vad_16k_op15.onnx"


def _matmul_model(batch: int | str = "batch"):
    """y = x @ W + b: W (16x32 fp32, 2 KiB) is externalised and mapped, b (128 B) stays inline."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(7)
    w = numpy_helper.from_array(rng.standard_normal((16, 32)).astype(np.float32), "W")
    b = numpy_helper.from_array(rng.standard_normal(32).astype(np.float32), "b")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["xw"]), helper.make_node("Add", ["xw", "b"], ["y"])],
        "tiny",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 32])],
        [w, b],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    return model


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> Path:
    import onnx

    folder = tmp_path_factory.mktemp("models")
    onnx.save(_matmul_model(), str(folder / "dynamic.onnx"))
    for name in ("external", "no-data", "short-data"):  # saving with external data rewrites the proto: one each
        onnx.save(
            _matmul_model(),
            str(folder / f"{name}.onnx"),
            save_as_external_data=True,
            all_tensors_to_one_file=True,
            location=f"{name}.data",
            size_threshold=1024,
        )
    (folder / "no-data.data").unlink()
    short = folder / "short-data.data"
    short.write_bytes(short.read_bytes()[:1000])  # W needs 2048 bytes
    (folder / "text.onnx").write_text("this is not an ONNX model\n")
    (folder / "empty.onnx").write_bytes(b"")
    (folder / "no-models").mkdir()  # a folder is a pipeline of its models: this one has none
    return folder


@pytest.mark.parametrize(
    ("model", "args", "expected"),
    [
        ("text.onnx", [], ["not a readable ONNX model"]),
        ("empty.onnx", [], ["not an ONNX model"]),
        ("no-data.onnx", ["--shape", "x=1x16"], ["external data file 'no-data.data'", "is missing"]),
        (
            "short-data.onnx",
            ["--shape", "x=1x16"],
            ["--model", "short-data.onnx", "the tensor ends at byte 2048", "has 1000 bytes"],
        ),
        ("dynamic.onnx", [], ["input shape(s) not static: x[batch,16]", "--shape x=1x16"]),
        ("dynamic.onnx", ["--shape", "y=1x16"], ["unknown input(s) ['y']", "the model's inputs: x"]),
        ("dynamic.onnx", ["--shape", "x=1x2x16"], ["--shape x", "rank 2, got 3 dims"]),
        ("dynamic.onnx", ["--shape", "x=1x8"], ["--shape x", "dimension 1 is fixed to 16", "got 8"]),
        ("dynamic.onnx", ["--shape", "x=1xlots"], ["--shape 'x=1xlots'", "expected NAME=DIMxDIM"]),
        ("dynamic.onnx", ["--shape", "x=0x16"], ["--shape 'x=0x16'"]),
        ("missing.onnx", [], ["no such file"]),
        ("no-models", [], ["a folder without .onnx files"]),
    ],
    ids=[
        "not-onnx",
        "empty-file",
        "external-data-missing",
        "external-data-too-short",
        "dynamic-without-shape",
        "shape-unknown-input",
        "shape-wrong-rank",
        "shape-conflicts-with-fixed-dim",
        "shape-not-a-number",
        "shape-zero-dim",
        "no-such-file",
        "a-folder",
    ],
)
def test_bad_model_or_shape_is_one_line_exit_2(run_harness, models, model, args, expected):
    outcome = run_harness("run", "--model", str(models / model), *args, "--processes", "1", "--quiet")
    assert_usage_error(outcome, *expected)


@pytest.mark.parametrize("model", [pytest.param("dynamic.onnx", marks=pytest.mark.slow), "external.onnx"])
def test_dynamic_model_with_shape_runs(run_harness, models, model):
    """The tiny dynamic-batch model (embedded or external weights) with --shape: both modes
    run and every worker's first inference matches the reference."""
    outcome = run_harness(
        "run",
        "--model",
        str(models / model),
        "--shape",
        "x=2x16",
        "--processes",
        "1",
        "--quiet",
        "--no-report",
        check_exit=0,
    )
    rows = outcome.results()
    assert sorted(r.path_taken for r in rows) == ["heap", "mapped"]
    assert all(r.output_ok and not r.error for r in rows), [r.error for r in rows]
    assert {r.weights_bytes for r in rows} == {16 * 32 * 4}


@pytest.mark.parametrize("target", ["cpu", "qnn"])
def test_a_relative_model_path_runs_on_a_fresh_cache(tmp_path, target):
    """Issue 43 item 5: ``--model tiny.onnx`` from the model's folder with an empty cache failed
    ("File doesn't exist": ORT's offline job runs in a temporary folder), on qnn with a wrong
    "give them with --input" hint; every model path is made absolute before a child sees it."""
    import onnx
    from rel_support import start_harness

    here = tmp_path / "here"
    here.mkdir()
    onnx.save(_matmul_model(batch=1), str(here / "tiny.onnx"))
    args = ["run", "--target", target, "--model", "tiny.onnx", "--processes", "1", "--quiet", "--no-report"]
    proc = start_harness(
        [*args, "--cache-dir", str(tmp_path / "fresh"), "--out", str(tmp_path / "out")], tmp_path, cwd=here
    )
    stdout, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 0, stdout + stderr
    assert "File doesn't exist" not in stdout + stderr and "verdict: PASS" in stdout
    meta = json.loads((tmp_path / "out" / "metadata.json").read_text())
    assert len(meta["run"]["model_fingerprint"]) == 24  # what --baseline compares as the model's content


def test_relative_model_paths_are_absolute_in_the_options():
    from harness.contract.options import RunOptions

    opts = RunOptions(models=[Path("a.onnx"), Path("pipeline")])
    assert opts.models == [Path.cwd() / "a.onnx", Path.cwd() / "pipeline"] and opts.model == opts.models[0]
    assert RunOptions(model=Path("b.onnx")).models == [Path.cwd() / "b.onnx"]


def test_a_model_onnx_runtime_cannot_load_gets_no_input_hint(tmp_path):
    """A load failure in the reference job is no feed's fault: "cannot load it", no --input hint."""
    from harness.core.errors import InputError
    from harness.prep.reference import reference_in_process, save_reference

    save_reference(tmp_path / "feeds.npz", {}, {})
    job = {"run_path": str(tmp_path / "gone.onnx"), "feeds": str(tmp_path / "feeds.npz"), "settings": {}}
    job |= {"level": "all", "label": "--model gone.onnx", "outputs": ["y"], "input_types": {}, "output_types": {}}
    with pytest.raises(InputError) as caught:
        reference_in_process(job)
    assert "cannot load it" in str(caught.value) and "--input" not in str(caught.value), caught.value


def _silero_model() -> Path | None:
    """The packaged silero-vad ONNX file, found without importing the package (its
    ``__init__`` needs torch, which the harness does not)."""
    spec = importlib.util.find_spec("silero_vad")
    if spec is None or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        path = Path(location) / "data" / SILERO_MODEL
        if path.is_file():
            return path
    return None


def test_real_packaged_model_runs_with_shapes(run_harness):
    """A real model (silero VAD: LSTM + convolutions, dynamic batch and sequence) through the
    harness with its shapes fixed: both modes ok in two workers each."""
    path = _silero_model()
    if path is None:
        pytest.skip(f"silero-vad is not installed (pip install silero-vad --no-deps ships {SILERO_MODEL})")
    no_shape = run_harness("run", "--model", str(path), "--processes", "2", "--quiet")
    # every dynamic input in ONE error, each with a ready --shape
    assert_usage_error(no_shape, "input[batch,sequence]", "state[2,batch,128]", "--shape input=", "--shape state=")
    outcome = run_harness(
        "run",
        "--model",
        str(path),
        "--shape",
        "input=1x512",
        "--shape",
        "state=2x1x128",
        "--processes",
        "2",
        "--quiet",
        "--no-report",
        check_exit=0,
    )
    rows = outcome.results()
    assert len(rows) == 4
    assert all(r.output_ok and not r.error and r.exit_code == 0 for r in rows), [r.error for r in rows]
    assert {r.path_taken for r in rows if r.mode == "mapped"} == {"mapped"}
    assert {r.path_taken for r in rows if r.mode == "heap"} == {"heap"}
    assert all(r.weights_bytes and r.weights_bytes > 100_000 for r in rows)
