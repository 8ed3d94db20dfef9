"""Facts about the user's model that change how to read a run are said on the terminal too, not
only in the report (issue 34 item 5): outputs checked by shape only (non-deterministic), weights
ORT's optimizer made larger than the file's (an NCHWc reorder turned 6.2 MiB into 9.2 MiB), and
a saving beyond sharing that comes from inputs touching few rows of an embedding table."""

from __future__ import annotations

import generated
import pytest
from models_support import ONE, assert_all_ok


def test_a_non_deterministic_output_is_named_on_the_terminal(run_harness, tmp_path):
    path = generated.random_output_model(tmp_path / "random.onnx")
    outcome = run_harness("run", "--model", str(path), *ONE)
    assert_all_ok(outcome)
    line = next(x for x in outcome.stdout.splitlines() if x.startswith("note: Outputs checked by shape only"))
    assert "noise differ between two runs" in line and "checked by shape only" in line


def test_weights_the_optimizer_grew_are_named_on_the_terminal(run_harness, tmp_path):
    path = generated.nchwc_conv_model(tmp_path / "conv.onnx")
    outcome = run_harness("run", "--model", str(path), *ONE)
    rows = assert_all_ok(outcome)
    line = next(x for x in outcome.stdout.splitlines() if x.startswith("note: Weights larger after ORT's optimizer"))
    assert "259.5 KiB of the model's tensors became" in line, line
    assert rows[0].weights_bytes > 1.05 * 259.5 * 1024


@pytest.mark.memory
def test_a_saving_from_few_embedding_rows_says_so(run_harness, tmp_path):
    path = generated.embedding_model(tmp_path / "emb.onnx")
    outcome = run_harness("run", "--model", str(path), "--processes", "2", "--quiet", "--no-report")
    assert_all_ok(outcome, workers=4)
    sentence = next(x for x in outcome.stdout.splitlines() if x.startswith("With 2 process(es)"))
    assert "more than sharing the weights can explain" in sentence, sentence
    assert (
        "32.0 MiB of the weights are embedding tables (read by Gather) and the inputs index few of their rows"
        in sentence
    )
