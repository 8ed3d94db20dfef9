"""Inputs: every dynamic or unknown input in ONE error (each with a ready --shape), --free-dim
across inputs, inputs with no shape, feeds for every type (strings get a fixed text), real
values with --input, and a clear exit 2 for what the harness cannot feed."""

from __future__ import annotations

import generated
import numpy as np
import pytest
from models_support import ONE, assert_all_ok, assert_usage_error


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    folder = tmp_path_factory.mktemp("inputs")
    return {
        name: getattr(generated, f"{name}_model")(folder / f"{name}.onnx")
        for name in ("three_dynamic_inputs", "no_shape_input", "string_input", "sequence_input", "sample_rate")
    }


def test_every_dynamic_input_in_one_error(run_harness, models):
    """Three dynamic inputs and one without any shape: one line names all four, each with a
    ready --shape, and offers --free-dim for the named dimensions."""
    outcome = run_harness("run", "--model", str(models["three_dynamic_inputs"]), *ONE)
    line = assert_usage_error(
        outcome,
        "ids[batch,sequence]",
        "mask[batch,sequence]",
        "type_ids[batch,sequence]",
        "scale[?...]",
        "--shape ids=1x1",
        "--shape mask=1x1",
        "--shape type_ids=1x1",
        "--free-dim batch=1",
        "--free-dim sequence=1",
    )
    import re

    assert len(re.findall(r"--shape \w+=", line)) == 4


def test_free_dim_fixes_a_named_dimension_in_every_input(run_harness, models, tmp_path):
    path = str(models["three_dynamic_inputs"])
    partial = run_harness("run", "--model", path, "--free-dim", "batch=1", *ONE, out=tmp_path / "a")
    assert_usage_error(partial, "ids[1,sequence]", "mask[1,sequence]", "scale[?...]")
    outcome = run_harness(
        "run",
        "--model",
        path,
        "--free-dim",
        "batch=1",
        "--free-dim",
        "sequence=8",
        "--shape",
        "scale=1",
        *ONE,
        out=tmp_path / "b",
    )
    assert_all_ok(outcome, workers=2)


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--free-dim", "seq=4"], ["--free-dim seq", "named dimensions: batch, sequence"]),
        (["--free-dim", "batch=-1"], ["--free-dim 'batch=-1'", "VALUE >= 0"]),
        (["--input", "nope=3"], ["--input names unknown input(s) ['nope']"]),
        (["--input", "ids=x.npy", "--shape", "ids=1x2"], ["--shape and --input both given for ['ids']"]),
        (
            ["--input", "ids=0.5", "--free-dim", "batch=1", "--free-dim", "sequence=2", "--shape", "scale=1"],
            ["--input ids: float64 values for a int64 input"],
        ),
    ],
    ids=["free-dim-unknown", "free-dim-negative", "input-unknown", "input-and-shape", "input-wrong-type"],
)
def test_bad_input_options_are_one_line(run_harness, models, args, expected):
    outcome = run_harness("run", "--model", str(models["three_dynamic_inputs"]), *args, *ONE)
    assert_usage_error(outcome, *expected)


def test_an_input_value_is_filled_to_the_shape_given(run_harness, models, model_cache):
    """``--input NAME=VALUE`` brings no shape of its own, so ``--shape`` for the same input
    fixes the shape it is filled to (a sequence length of a dynamic Paddle export)."""
    from harness.prep.folder import PreparedModel
    from harness.prep.reference import load_reference

    args = ["--free-dim", "batch=1", "--free-dim", "sequence=2", "--shape", "scale=3", "--input", "scale=2"]
    outcome = run_harness("run", "--model", str(models["three_dynamic_inputs"]), *args, *ONE)
    assert_all_ok(outcome, workers=2)
    folders = [p for p in model_cache.glob("user-three_dynamic_inputs-*") if (p / "manifest.json").is_file()]
    scales = [load_reference(PreparedModel.load(p))[0]["scale"].tolist() for p in folders]
    assert [2.0, 2.0, 2.0] in scales


def test_an_input_without_shape_gets_its_shape_from_shape(run_harness, models):
    outcome = run_harness("run", "--model", str(models["no_shape_input"]), "--shape", "x=3x16", *ONE)
    assert_all_ok(outcome, workers=2)


def test_string_inputs_get_a_deterministic_text(run_harness, models, model_cache):
    """Strings are fed (a fixed text: the model looks some words up) and checked exactly."""
    from harness.prep.folder import PreparedModel
    from harness.prep.reference import load_reference

    outcome = run_harness("run", "--model", str(models["string_input"]), *ONE)
    assert_all_ok(outcome, workers=2)
    folder = next(p for p in model_cache.glob("user-string_input-*") if (p / "manifest.json").is_file())
    feeds, outputs = load_reference(PreparedModel.load(folder))
    assert list(feeds["text"]) == ["the", "quick", "brown", "fox", "jumps", "over"]
    assert np.count_nonzero(outputs["y"].any(axis=1)) == 2  # "the" and "fox" are in the vocabulary


def test_sequence_and_optional_inputs_are_refused_in_one_line(run_harness, models):
    outcome = run_harness("run", "--model", str(models["sequence_input"]), *ONE)
    assert_usage_error(outcome, "input(s) the harness cannot feed", "parts (sequence)", "maybe (optional)")


def test_constrained_input_needs_real_values(run_harness, models, tmp_path):
    """A sample-rate input: the generated 0/1 makes ORT fail (one line suggesting --input);
    --input sr=16000 and --input audio=FILE.npy feed real values."""
    path = str(models["sample_rate"])
    generated_feed = run_harness("run", "--model", path, *ONE, out=tmp_path / "a")
    assert_usage_error(generated_feed, "ONNX Runtime cannot run it", "--input NAME=FILE.npy or --input NAME=VALUE")
    audio = tmp_path / "audio.npy"
    np.save(audio, np.linspace(-1, 1, 32, dtype=np.float32))
    outcome = run_harness(
        "run", "--model", path, "--input", "sr=16000", "--input", f"audio={audio}", *ONE, out=tmp_path / "b"
    )
    assert_all_ok(outcome, workers=2)
    np.save(audio, np.zeros(31, np.float32))
    wrong = run_harness(
        "run", "--model", path, "--input", "sr=16000", "--input", f"audio={audio}", *ONE, out=tmp_path / "c"
    )
    assert_usage_error(wrong, "--input audio", "dimension 0 is fixed to 32", "got 31")
