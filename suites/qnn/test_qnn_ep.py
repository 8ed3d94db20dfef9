"""The real QNN EP (HTP simulator on Linux x86_64, the NPU on Windows ARM64): compile a small QDQ
model once, load it with disable_file_mapped_weights "0"/"1", read the EP's log, compare outputs
with the CPU EP, and check the input errors users will hit. Log-classification and option checks
are pure unit tests and run everywhere; the rest skips cleanly without onnxruntime-qnn.

Device branch (Windows ARM64): the same tests expect "active" / "disabled" instead of
"unavailable"; it runs in the device CI only.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
from qnn_support import qnn_skip_reason

from harness.core.errors import InputError as QnnInputError
from harness.targets.qnn.compile import CompiledModel, compile_epcontext
from harness.targets.qnn.ep import (
    compare_outputs,
    qnn_session_options,
    qnn_versions,
    register_qnn_ep,
)
from harness.targets.qnn.qdq import make_feeds, make_qdq_model, reference_output

pytestmark = pytest.mark.qnn

_SKIP = qnn_skip_reason()
_HAVE_QNN = _SKIP is None
needs_qnn = pytest.mark.skipif(not _HAVE_QNN, reason=_SKIP or "")

# ----------------------------------------------------------------------------- pure unit tests
# (the EP log classifier has its own suites: test_eplog.py, test_eplog_strings.py)


@pytest.mark.parametrize("bad", ["", "2", "yes", None, 0, 1, " 0", "0 "])
def test_invalid_option_values_are_value_errors(bad: object) -> None:
    with pytest.raises(ValueError, match="disable_file_mapped_weights must be"):
        qnn_session_options(disable_file_mapped_weights=bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("severity", [2, 3])
def test_log_severity_that_hides_the_evidence_is_refused(severity: int) -> None:
    """At warning level the EP's INFO lines, the only positive evidence of mapping, vanish."""
    with pytest.raises(ValueError, match="log_severity"):
        qnn_session_options(disable_file_mapped_weights="0", log_severity=severity)


def test_versions_never_raise() -> None:
    v = qnn_versions()
    assert set(v) >= {"onnxruntime_qnn", "qnn_sdk"}
    if _HAVE_QNN:
        assert v["onnxruntime_qnn"] and v["qnn_sdk"]


def _write_model(path: Path, op: str, in_shape: list, out_shape: list | None = None) -> Path:
    import onnx
    from onnx import TensorProto, helper

    nodes = [helper.make_node(op, ["X"], ["Y"])] if op else []
    outs = ["Y" if op else "X"]
    graph = helper.make_graph(
        nodes,
        op or "empty",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, in_shape)],
        [helper.make_tensor_value_info(outs[0], TensorProto.FLOAT, out_shape or in_shape)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    model.ir_version = 10
    onnx.save(model, str(path))
    return path


def test_dynamic_shape_gets_the_shape_hint(tmp_path: Path) -> None:
    src = _write_model(tmp_path / "dyn.onnx", "Relu", ["batch", 3, 224, 224])
    with pytest.raises(QnnInputError, match=r"X\[batch,3,224,224\].*--shape X=1x3x224x224"):
        compile_epcontext(src, tmp_path / "out")


def test_not_onnx_and_empty_graph_are_input_errors(tmp_path: Path) -> None:
    junk = tmp_path / "junk.onnx"
    junk.write_bytes(b"\x00definitely not a protobuf model\xff" * 10)
    with pytest.raises(QnnInputError, match="not a readable ONNX model"):
        compile_epcontext(junk, tmp_path / "out")
    with pytest.raises(QnnInputError, match="no node assigned to QNN"):
        compile_epcontext(_write_model(tmp_path / "empty.onnx", "", [1, 4]), tmp_path / "out")
    with pytest.raises(QnnInputError, match="not found"):
        compile_epcontext(tmp_path / "missing.onnx", tmp_path / "out")


# ----------------------------------------------------------------------------- real EP


@pytest.fixture(scope="session")
def qdq(tmp_path_factory: pytest.TempPathFactory) -> SimpleNamespace:
    """One 3 MiB QDQ model, compiled once (embed_mode 0), with a CPU reference output."""
    if _SKIP:
        pytest.skip(_SKIP)
    d = tmp_path_factory.mktemp("qnn")
    src = d / "qdq.onnx"
    info = make_qdq_model(src, 3 << 20, seed=0)
    feeds = make_feeds(info, seed=1)
    return SimpleNamespace(
        dir=d,
        src=src,
        info=info,
        feeds=feeds,
        ref=reference_output(src, feeds),
        compiled=compile_epcontext(src, d / "ctx", embed_mode=0),
    )


def _load(compiled: CompiledModel, flag: str) -> object:
    """A session over the compiled model (how the EP treated mapping is read from a worker's
    own log: test_eplog.py and the harness suites check that)."""
    import onnxruntime as ort

    return ort.InferenceSession(str(compiled.onnx_path), qnn_session_options(disable_file_mapped_weights=flag))


def _check_output(qdq: SimpleNamespace, session: object) -> None:
    out = session.run(None, qdq.feeds)[0]  # type: ignore[attr-defined]
    res = compare_outputs(out, qdq.ref, quant_step=qdq.info["output_scale"])
    assert res["ok"], res


@needs_qnn
def test_register_is_idempotent() -> None:
    assert len(register_qnn_ep()) == len(register_qnn_ep()) >= 1


@needs_qnn
def test_compiled_model_shape(qdq: SimpleNamespace) -> None:
    c = qdq.compiled
    assert c.embed_mode == 0 and len(c.bin_paths) == 1 and c.bin_paths[0].name.endswith("_qnn.bin")
    assert c.context_bytes == c.bin_paths[0].stat().st_size >= qdq.info["weights_bytes"]
    assert c.onnx_path.stat().st_size < 64 * 1024  # the weights live in the .bin, not the onnx


@needs_qnn
@pytest.mark.parametrize("flag", ["0", "1"])
def test_load_both_option_values(qdq: SimpleNamespace, flag: str) -> None:
    _check_output(qdq, _load(qdq.compiled, flag))


@needs_qnn
def test_embed_mode_1(qdq: SimpleNamespace, tmp_path: Path) -> None:
    c = compile_epcontext(qdq.src, qdq.dir / "ctx", embed_mode=1)
    assert c.embed_mode == 1 and c.bin_paths == [] and not c.cached
    assert qdq.info["weights_bytes"] <= c.context_bytes <= c.onnx_path.stat().st_size
    _check_output(qdq, _load(c, "0"))


@needs_qnn
def test_cache_reuses_compiled_files(qdq: SimpleNamespace) -> None:
    first = qdq.compiled
    files = [first.onnx_path, *first.bin_paths]
    stamps = [p.stat().st_mtime_ns for p in files]
    again = compile_epcontext(qdq.src, qdq.dir / "ctx", embed_mode=0)
    assert again.cached and again.onnx_path == first.onnx_path
    assert again.source_sha256 == first.source_sha256
    assert [p.stat().st_mtime_ns for p in files] == stamps


@needs_qnn
def test_changed_source_is_recompiled(tmp_path: Path) -> None:
    src = tmp_path / "m.onnx"
    make_qdq_model(src, 1 << 20, seed=0)
    first = compile_epcontext(src, tmp_path / "ctx")
    make_qdq_model(src, 1 << 20, seed=1)  # same name, other weights
    second = compile_epcontext(src, tmp_path / "ctx")
    assert not second.cached and second.source_sha256 != first.source_sha256


@needs_qnn
def test_no_node_for_qnn_is_an_input_error(tmp_path: Path) -> None:
    src = _write_model(tmp_path / "det.onnx", "Det", [2, 3, 3], [2])  # QNN has no Det
    with pytest.raises(QnnInputError, match="no node was assigned to QNN"):
        compile_epcontext(src, tmp_path / "out")
    assert not list((tmp_path / "out").glob(".build-*"))  # scratch folder cleaned up
