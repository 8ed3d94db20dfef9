"""`harness run --target qnn` end to end with the real QNN EP (HTP simulator on Linux x86_64).

On Linux the EP's file mapping is gated off: the harness must detect that from the EP's own
log and say so, not pretend a difference. On a Windows ARM64 device the same test asserts the
feature is active and saves memory.
"""

from __future__ import annotations

import json
import sys

import pytest

# `memory` only where a figure is asserted (on a device): the others judge the EP path and outputs.
pytestmark = [pytest.mark.qnn, pytest.mark.usefixtures("needs_qnn")]


@pytest.fixture(scope="module")
def on_device() -> bool:
    """A QNN device as the EP reports it (NPU device, HTP usable, RPCMem loadable), not an OS guess."""
    from harness.targets.qnn.device import device_skip_reason

    return device_skip_reason() is None


def _rows_by_mode(outcome):
    rows = outcome.results()
    return {m: [r for r in rows if r.mode == m] for m in ("mapped", "heap")}


def test_qnn_run_classifies_the_ep_path(run_harness, on_device):
    outcome = run_harness("run", "--target", "qnn", "--model-size", "8MiB", "--processes", "2", "--quiet")
    assert outcome.returncode == 0, outcome.stdout + outcome.stderr
    rows = _rows_by_mode(outcome)
    assert all(r.output_ok for rs in rows.values() for r in rs), [r.error for rs in rows.values() for r in rs]
    everyone = rows["mapped"] + rows["heap"]
    assert all(r.ep_sessions for r in everyone), "every worker records its sessions' verdicts"
    if on_device:
        assert {r.ep_file_mapping for r in rows["mapped"]} == {"active"}
        assert {r.ep_file_mapping for r in rows["heap"]} == {"disabled"}
    elif sys.platform.startswith("linux"):
        assert {r.ep_sessions for r in everyone} == {"unavailable=1"}
        assert {r.path_taken for r in everyone} == {"heap"}  # the gate: both modes read the .bin
    else:  # Windows ARM64 without an NPU (hosted runner): a verdict, never "active" without evidence
        assert "active" not in {r.ep_file_mapping for r in everyone}
    if not on_device and sys.platform.startswith("linux"):
        assert {r.ep_file_mapping for r in rows["mapped"] + rows["heap"]} == {"unavailable"}
        assert all("only available on Windows arm64" in r.ep_log_tail for r in rows["mapped"])
        meta = json.loads((outcome.out / "metadata.json").read_text())
        assert meta["run"]["target_options"] == {
            "embed_mode": 0,
            "share_ep_contexts": False,
            "resource_sharing": "none",
            "backend_type": "htp",
            "quantize": "none",
            "calibration_size": 8,
        }
        assert "unavailable on this platform" in outcome.stdout
        assert "verdict: PASS; file mapping: unavailable on this platform" in outcome.stdout
        html = (outcome.out / "report.html").read_text(encoding="utf-8")
        assert "Feature unavailable on this platform" in html  # the report says it in plain words
    assert all(r.weights_bytes and r.weights_bytes >= 8 * 1024**2 * 0.9 for r in rows["mapped"])


@pytest.mark.device
@pytest.mark.memory
def test_qnn_mapping_saves_private_memory_on_device(run_harness):
    """On the device the mapped mode's summed private bytes stay well under heap's."""
    outcome = run_harness(
        "run", "--target", "qnn", "--model-size", "64MiB", "--processes", "2", "--quiet", "--no-report"
    )
    assert outcome.returncode == 0, outcome.stdout + outcome.stderr
    rows = _rows_by_mode(outcome)
    weights = rows["heap"][0].weights_bytes
    heap = sum(r.private_bytes for r in rows["heap"])
    mapped = sum(r.private_bytes for r in rows["mapped"])
    assert mapped < heap - 0.8 * weights


def test_embed_mode_and_shared_contexts(run_harness):
    """Context embedded in the ONNX file, M=2 sessions sharing EP contexts: runs and is correct."""
    outcome = run_harness(
        "run",
        "--target",
        "qnn",
        "--model-size",
        "4MiB",
        "--processes",
        "1",
        "--sessions-per-process",
        "2",
        "--embed-mode",
        "1",
        "--share-ep-contexts",
        "--quiet",
        "--no-report",
    )
    assert outcome.returncode == 0, outcome.stdout + outcome.stderr
    rows = outcome.results()
    assert len(rows) == 2 and all(r.output_ok for r in rows)
    assert all(r.sessions_per_process == 2 for r in rows)
    if sys.platform.startswith("linux"):  # the platform gate, seen in each session's own log slice
        assert {r.ep_sessions for r in rows} == {"unavailable=2"}


def test_qnn_dynamic_shape_model_is_a_clear_error(run_harness, tmp_path):
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper, save

    w = numpy_helper.from_array(np.ones((16, 16), np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 16])],
        [w],
    )
    path = tmp_path / "dyn.onnx"
    save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    outcome = run_harness("run", "--target", "qnn", "--model", str(path), "--quiet")
    assert outcome.returncode == 2
    assert len(outcome.stderr.strip().splitlines()) == 1
    assert "--shape x=" in outcome.stderr


def test_relative_paths_written_by_the_ep_land_in_the_run(run_harness, tmp_path):
    """A provider option naming a relative file (the QNN profiler's output here) writes into the
    worker's own folder of the run, never into the harness's checkout (workers used to run
    there) nor beside other workers' files."""
    from harness.contract.spawn import PACKAGE_ROOT

    outcome = run_harness(
        "run",
        "--target",
        "qnn",
        "--model-size",
        "1MiB",
        "--processes",
        "1",
        "--modes",
        "mapped",
        "--provider-option",
        "profiling_level=basic",
        "--provider-option",
        "profiling_file_path=prof.csv",
        "--quiet",
        "--no-report",
    )
    assert outcome.returncode == 0, outcome.stdout + outcome.stderr
    written = list((outcome.out / "workers").rglob("prof*"))
    assert written and all(p.parent.name == "w0" for p in written), written
    assert not list(PACKAGE_ROOT.glob("prof*"))


def test_shared_resource_options_are_set_and_a_refusal_is_named(run_harness, on_device):
    """`--resource-sharing vtcm-backup-buffer` sets enable_vtcm_backup_buffer_sharing=1 on the
    workers' sessions (the EP's list path). On the Linux x86_64 simulator SetupBackend refuses
    it with QNN_COMMON_ERROR_NOT_SUPPORTED: the worker's error says exactly that (not a
    misleading "EPContext node not compatible"), and the run fails: never a silent pass."""
    if on_device or not sys.platform.startswith("linux"):
        pytest.skip("the refusal is the Linux x86_64 simulator's; a device runs the list path")
    outcome = run_harness(
        "run", "--target", "qnn", "--model-size", "1MiB", "--processes", "1", "--modes", "mapped",
        "--resource-sharing", "vtcm-backup-buffer", "--quiet", "--no-report",
    )  # fmt: skip
    assert outcome.returncode == 1, outcome.stdout + outcome.stderr
    (row,) = outcome.results()
    assert "the QNN backend refused enable_vtcm_backup_buffer_sharing=1" in row.error, row.error
    assert "QNN_COMMON_ERROR_NOT_SUPPORTED" in row.error and not row.output_ok
    meta = json.loads((outcome.out / "metadata.json").read_text())
    assert meta["run"]["target_options"]["resource_sharing"] == "vtcm-backup-buffer"


def test_refusal_is_read_only_for_the_sharing_options():
    from harness.targets.qnn.sharing import refusal, sharing_provider_options

    line = (
        "[E:onnxruntime:, x.cc:1 G] QNN SetupBackend failed Failed to create context. Error: "
        "QNN_COMMON_ERROR_NOT_SUPPORTED: API or feature is not supported by implementation., Code:1000"
    )
    assert sharing_provider_options("htp-share-resource") == {"htp_share_resource_optimization": "1"}
    assert sharing_provider_options("none") == {}
    assert refusal(line, {}) is None and refusal("other text", {"htp_share_resource_optimization": "1"}) is None
    why = refusal(line, {"htp_share_resource_optimization": "1"})
    assert why.startswith("the QNN backend refused htp_share_resource_optimization=1: SetupBackend failed with")
