"""Suggestions that work (issue 34 item 4): the dynamic-shape error suggests sizes a conv
model's kernels and strides take (P-Net's pattern was told ``--free-dim M1=1``, which then
failed with a hint pointing at ``--input``), or calls its values placeholders; a run that fails
because an index input overruns its table names the input and the ``--input NAME=0`` that runs
it (a graph model's ``batch``). Each suggestion is run as given."""

from __future__ import annotations

import re
import shlex

import generated
import pytest
from models_support import ONE, assert_all_ok, assert_usage_error

#: A suggestion "runs" when its run is correct: one mode is enough (the inputs are the same).
RUNS = (*ONE, "--modes", "mapped")


def _suggested_free_dims(line: str) -> list[str]:
    args = re.search(r"name the dimensions once with --free-dim \(([^)]*)\)", line)
    assert args, line
    return shlex.split(args.group(1))


def test_a_conv_model_is_told_sizes_its_convolutions_take(run_harness, tmp_path):
    path = generated.pnet_model(tmp_path / "pnet.onnx")
    line = assert_usage_error(run_harness("run", "--model", str(path), *ONE), "x[N,3,M1,M2]", "--shape x=1x3x12x12")
    assert "12: the smallest size its convolutions' kernels and strides take" in line and "placeholder" not in line
    free = _suggested_free_dims(line)
    assert free == ["--free-dim", "N=1", "--free-dim", "M1=12", "--free-dim", "M2=12"]
    assert_all_ok(run_harness("run", "--model", str(path), *free, *RUNS))  # the suggestion runs


def test_a_size_too_small_for_the_convolutions_says_which_works(run_harness, tmp_path):
    """What the old suggestion (1) gave: ORT's "Invalid input shape: {1,1}", now with the size
    that works, not the --input hint."""
    path = generated.pnet_model(tmp_path / "pnet.onnx")
    small = ("--free-dim", "N=1", "--free-dim", "M1=1", "--free-dim", "M2=1")
    line = assert_usage_error(run_harness("run", "--model", str(path), *small, *ONE), "Invalid input shape")
    assert "12 is the smallest size their kernels and strides take" in line and "--input" not in line


def test_dimensions_the_graph_cannot_size_are_called_placeholders(run_harness, tmp_path):
    path = generated.three_dynamic_inputs_model(tmp_path / "three.onnx")
    line = assert_usage_error(run_harness("run", "--model", str(path), *ONE), "--free-dim sequence=1")
    assert "values are placeholders: put your model's real sizes there" in line


def test_ppocr_is_told_a_size_its_feature_pyramid_takes(run_harness):
    """PP-OCRv4's detector adds up-sampled maps to down-sampled ones: 33 pixels fail, the
    suggestion (a multiple of its total stride, 32) runs."""
    from test_real_models import MODELS, locate

    path = locate(MODELS[0])
    if path is None:
        pytest.skip("rapidocr-onnxruntime is not installed")
    line = assert_usage_error(run_harness("run", "--model", str(path), *ONE), "--shape x=1x3x32x32")
    assert "32: the smallest size" in line
    assert_all_ok(run_harness("run", "--model", str(path), "--shape", "x=1x3x32x32", *RUNS))


def test_an_index_input_past_its_table_is_named_with_the_value_that_runs(run_harness, tmp_path):
    path = generated.graph_batch_model(tmp_path / "gnn.onnx")
    line = assert_usage_error(run_harness("run", "--model", str(path), *ONE), "indices element out of data bounds")
    assert "input(s) batch index a table" in line and "--input batch=0 runs the model" in line
    assert_all_ok(run_harness("run", "--model", str(path), "--input", "batch=0", *RUNS))


@pytest.mark.qnn
@pytest.mark.usefixtures("needs_qnn")
def test_the_suggested_sizes_compile_and_run_on_qnn(run_harness, tmp_path):
    """The case of the issue: P-Net on --target qnn, told M1=1, could not run."""
    path = generated.pnet_model(tmp_path / "pnet.onnx")
    line = assert_usage_error(run_harness("run", "--target", "qnn", "--model", str(path), *ONE), "--free-dim M1=12")
    assert_all_ok(run_harness("run", "--target", "qnn", "--model", str(path), *_suggested_free_dims(line), *RUNS))
