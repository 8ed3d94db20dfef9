"""Multi-partition EPContext models (issue 22): the upstream failure reproduced, the harness's
load workaround (ORT's graph optimizations disabled for a model of several EPContext nodes), a
model the harness compiles into two partitions measured end to end, and the same compiled model
brought by a user measured as it is."""

from __future__ import annotations

import json
import shutil

import pytest

pytestmark = [pytest.mark.qnn, pytest.mark.usefixtures("needs_qnn")]


def test_upstream_still_cannot_load_a_multi_partition_model_with_default_optimizations(tmp_path):
    """Fails when an onnxruntime-qnn release loads the reproducer with ORT's default graph
    optimizations: then `partitions.load_level` and the README's workaround can go."""
    from harness.targets.qnn.ep import qnn_versions
    from harness.targets.qnn.partitions import UPSTREAM_ERRORS
    from harness.targets.qnn.partitions_repro import reproduce

    result = reproduce(tmp_path)
    code, line = result["default"]
    version = qnn_versions()["onnxruntime_qnn"]
    assert code != 0 and any(e in line for e in UPSTREAM_ERRORS), (
        f"onnxruntime-qnn {version} now loads a multi-partition EPContext model with default "
        f"optimizations (exit {code}: {line!r}): drop the load workaround in harness/targets/qnn/partitions.py"
    )
    assert result["disabled"] == (0, "loads and runs: S = [0, 3, 7, 7]"), result["disabled"]


def test_a_model_compiled_into_two_partitions_is_measured(run_harness, tmp_path):
    from harness.targets.qnn.partitions import make_shape_between_model

    path = make_shape_between_model(tmp_path / "two.onnx")
    outcome = run_harness("run", "--target", "qnn", "--model", str(path), "--processes", "1", "--quiet")
    assert outcome.returncode == 0, outcome.stdout + outcome.stderr
    rows = outcome.results()
    assert len(rows) == 2 and all(r.output_ok and not r.error for r in rows), [r.error for r in rows]
    meta = json.loads((outcome.out / "metadata.json").read_text())
    assert any("compiled into 2 QNN partitions" in n for n in meta["target_notes"]), meta["target_notes"]
    spec = json.loads(next((outcome.out / "workers").rglob("*.spec.json")).read_text())
    assert spec["options"]["partitions"] == [2]


def test_a_users_multi_partition_epcontext_model_is_measured_as_it_is(run_harness, tmp_path):
    from harness.targets.qnn.compile import compile_epcontext
    from harness.targets.qnn.partitions import make_shape_between_model

    compiled = compile_epcontext(make_shape_between_model(tmp_path / "two.onnx"), tmp_path / "cache")
    hub = tmp_path / "hub"
    hub.mkdir()
    for f in (compiled.onnx_path, *compiled.bin_paths):
        shutil.copyfile(f, hub / f.name)
    model = hub / compiled.onnx_path.name
    outcome = run_harness("run", "--target", "qnn", "--model", str(model), "--processes", "1", "--quiet")
    assert outcome.returncode == 0, outcome.stdout + outcome.stderr
    assert all(r.output_ok and not r.error for r in outcome.results())
    spec = json.loads(next((outcome.out / "workers").rglob("*.spec.json")).read_text())
    assert spec["options"]["onnx"] == [str(model)] and spec["options"]["partitions"] == [2]


@pytest.mark.parametrize("parts", [1, 3])
def test_a_load_failure_is_called_multi_partition_only_with_several_partitions(tmp_path, parts):
    """Issue 43 item 6: a compiled model of ONE EPContext node that fails to load with the
    multi-partition error's words was called "compiled into 1 QNN partitions ... multi-partition"."""
    from onnx import TensorProto, helper, save

    from harness.targets.qnn.compile import _failure
    from harness.targets.qnn.partitions import UPSTREAM_ERRORS

    nodes = [
        helper.make_node("EPContext", [f"x{i}"], [f"x{i + 1}"], domain="com.microsoft", name=f"ctx{i}")
        for i in range(parts)
    ]
    io = [helper.make_tensor_value_info(f"x{i}", TensorProto.FLOAT, [1]) for i in (0, parts)]
    onnx_path = tmp_path / "m_ctx.onnx"
    save(helper.make_model(helper.make_graph(nodes, "g", io[:1], io[1:])), str(onnx_path))
    result = {"stage": "load", "error": f"[ONNXRuntimeError] : 1 : FAIL : {UPSTREAM_ERRORS[1]}: x"}
    text = str(_failure(result, "--model m.onnx", onnx_path, "htp", None, tmp_path / "ep.log"))
    assert ("multi-partition" in text) is (parts > 1), text
    assert (f"compiled into {parts} QNN partitions" in text) is (parts > 1), text
    if parts == 1:
        assert "compiled for QNN, but the compiled model does not load" in text, text
