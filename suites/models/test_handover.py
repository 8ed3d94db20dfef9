"""Weights handed to ORT by name must be the weights ORT computes with.

ORT binds an OrtValue given with ``SessionOptions.add_initializer`` by name AFTER its graph
optimizers ran. Its transpose optimizer rewrites a single-use constant in place, under the
same name (Yahoo's open_nsfw: [1,1,1,256] -> [1,256,1,1]): handing over the original then
breaks the model, with an error or, when the stale shape still broadcasts, silently. The
harness optimizes the model offline and externalises the optimized weights, so the sessions
get what ORT would have computed with. These tests show the hazard with this ORT version (so
they fail if the premise changes) and that the harness's cpu target is right.
"""

from __future__ import annotations

import generated
import numpy as np
import pytest
from models_support import ONE, assert_all_ok


def _naive_handover(path, feeds):
    """The model with every initializer handed over as it is in the file (the old cpu target)."""
    import onnx
    import onnxruntime as ort
    from onnx import numpy_helper

    so = ort.SessionOptions()
    so.log_severity_level = 4
    keep = []
    for t in onnx.load(str(path)).graph.initializer:
        keep.append(ort.OrtValue.ortvalue_from_numpy(numpy_helper.to_array(t)))
        so.add_initializer(t.name, keep[-1])
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"]).run(None, feeds)[0]


@pytest.mark.parametrize(("width", "symptom"), [(5, "error"), (256, "silently wrong")])
def test_orts_transpose_optimizer_defeats_a_naive_handover(tmp_path, width, symptom):
    import onnxruntime as ort

    path = generated.nhwc_model(tmp_path / "nhwc.onnx", width=width)
    feeds = {"image": np.random.default_rng(0).standard_normal((1, 8, 2, width)).astype(np.float32)}
    want = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    if symptom == "error":
        with pytest.raises(Exception, match="broadcast"):
            _naive_handover(path, feeds)
    else:
        got = _naive_handover(path, feeds)
        assert not np.allclose(got, want, rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("width", [pytest.param(5, marks=pytest.mark.slow), 256])
def test_the_harness_hands_over_the_optimized_weights(tmp_path, run_harness, model_cache, width):
    """Both modes correct on cpu, and on ort-native (the peer, mapped, in the same run); the
    constants are in the mapped file in the layout ORT computes with (transposed to [1,C,1,1];
    the Add's was fused into the Conv bias by ORT)."""
    from harness.prep.folder import PreparedModel

    path = generated.nhwc_model(tmp_path / f"nhwc{width}.onnx", width=width)
    outcome = run_harness("run", "--model", str(path), "--peer", "ort-native", *ONE)
    rows = assert_all_ok(outcome, workers=3)
    assert sorted((r.target, r.mode) for r in rows) == [("cpu", "heap"), ("cpu", "mapped"), ("ort-native", "mapped")]
    folder = next(p for p in model_cache.glob(f"user-nhwc{width}-*") if (p / "manifest.json").is_file())
    model = PreparedModel.load(folder)
    assert model.session_level == "disabled"  # optimized offline: no optimizer runs in the sessions
    shapes = {t.name: t.shape for t in model.tensors}
    assert shapes["mean"] == shapes["scale"] == [1, 256, 1, 1]
    assert {r.weights_bytes for r in rows} == {model.weights_bytes}
