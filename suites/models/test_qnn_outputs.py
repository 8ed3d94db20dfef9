"""qnn output checks (issue 34 item 2), with the real QNN EP on generated models:

- an output the reference itself gives differently on two runs (RandomNormalLike noise, as a TTS
  model's) is checked by shape, as the cpu target checks it: by cosine it was a false failure;
- the compile child already runs the compiled model once: it checks the output there, so a wrong
  compile is refused once, in one line, before any worker (before: every worker of both modes
  failed with the same error);
- ``--quantize qdq`` of a model that is already quantized (DynamicQuantizeLinear, MatMulInteger)
  is refused first, in one line (before: ``KeyError: 'x_scale'`` from ORT's tools).
"""

from __future__ import annotations

import json

import generated
import pytest
from models_support import ONE, assert_all_ok, assert_usage_error

pytestmark = [pytest.mark.qnn, pytest.mark.usefixtures("needs_qnn")]


def test_a_random_output_is_checked_by_shape(run_harness, tmp_path):
    path = generated.random_output_model(tmp_path / "random.onnx")
    outcome = run_harness("run", "--target", "qnn", "--model", str(path), *ONE)
    assert_all_ok(outcome, workers=2)
    details = [json.loads(p.read_text())["output_detail"] for p in (outcome.out / "workers").rglob("w*.result.json")]
    assert len(details) == 2 and all("noise: not compared (non-deterministic" in d for d in details), details
    meta = json.loads((outcome.out / "metadata.json").read_text())
    assert any("noise differ between two runs of the reference" in n for n in meta["target_notes"])


def test_a_wrong_compile_is_refused_once_before_any_worker(run_harness, tmp_path):
    """(y + 3e4) - 3e4 in the HTP's fp16 loses y: a real wrong result, not a fault injected."""
    path = generated.fp16_cancelling_model(tmp_path / "cancel.onnx")
    outcome = run_harness("run", "--target", "qnn", "--model", str(path), *ONE)
    line = assert_usage_error(outcome, f"--model {path}", "output is wrong", "no worker was started", "z: cosine")
    assert line.count("cosine") == 2  # the figure and the bound, once
    assert not (outcome.out / "workers").exists() or not any((outcome.out / "workers").iterdir())


def test_quantizing_an_already_quantized_model_is_refused_first(run_harness, tmp_path):
    path = generated.dynamic_quantized_model(tmp_path / "dyn.onnx")
    cache = tmp_path / "cache"
    outcome = run_harness(
        "run", "--target", "qnn", "--model", str(path), "--quantize", "qdq", "--cache-dir", str(cache), *ONE
    )
    assert_usage_error(outcome, "already quantized", "DynamicQuantizeLinear", "MatMulInteger", "without --quantize")
    assert not list(cache.glob("qnnsrc-*")), "refused after work was done"
