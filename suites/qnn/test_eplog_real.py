"""eplog on the real EP's log: a compiled model loaded with the real onnxruntime-qnn in a child
process whose stderr is a file, exactly as a harness worker does, read back session by session
(the verdict rules themselves, on message texts: test_eplog.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from qnn_support import qnn_skip_reason

from harness.targets.qnn.ep import qnn_versions
from harness.targets.qnn.eplog import classify_log, classify_session, echo_style, read_log_segment

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def compiled(tmp_path_factory: pytest.TempPathFactory) -> Path:
    reason = qnn_skip_reason()
    if reason:
        pytest.skip(reason)
    from harness.targets.qnn.compile import compile_epcontext
    from harness.targets.qnn.qdq import make_qdq_model

    d = tmp_path_factory.mktemp("eplog")
    make_qdq_model(d / "m.onnx", 1 << 16)
    return compile_epcontext(d / "m.onnx", d / "ctx").onnx_path


_WORKER = """
import json, pathlib, sys
import onnxruntime as ort
from harness.targets.qnn.eplog import LogSegment, stderr_offset
from harness.targets.qnn.ep import qnn_session_options
model, flag, log, n, out = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5]
segments, keep = [], []
for _ in range(n):
    with LogSegment(log) as seg:
        keep.append(ort.InferenceSession(model, qnn_session_options(disable_file_mapped_weights=flag, log_severity=0)))
    segments.append([seg.start, seg.end])
pathlib.Path(out).write_text(json.dumps({"segments": segments, "stderr_offset": stderr_offset()}))
"""


def _run_worker(model: Path, flag: str, log: Path, sessions: int) -> dict:
    """Sessions created in a child whose stderr (and stdout, as in a harness worker) is `log`."""
    result = log.with_suffix(".json")
    with open(log, "wb") as out:
        proc = subprocess.run(
            [sys.executable, "-c", _WORKER, str(model), flag, str(log), str(sessions), str(result)],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            timeout=300,
            cwd=str(ROOT),
        )
    assert proc.returncode == 0, read_log_segment(log, 0)[-2000:]
    return json.loads(result.read_text())


@pytest.mark.qnn
@pytest.mark.parametrize("flag", ["0", "1"])
def test_real_log_of_each_session(compiled: Path, flag: str, tmp_path: Path) -> None:
    log = tmp_path / "worker.log"
    out = _run_worker(compiled, flag, log, sessions=2)
    segments = [read_log_segment(log, a, b) for a, b in out["segments"]]
    assert out["segments"][0][1] <= out["segments"][1][0] <= out["stderr_offset"]
    assert all(seg.count("Creating QNN EP") == 1 for seg in segments)  # each holds its own session
    echo = echo_style(qnn_versions()["onnxruntime_qnn"])  # as the qnn target reads it
    verdicts = [classify_session(seg, disable_file_mapped_weights=flag, echo=echo) for seg in segments]
    whole = classify_log(read_log_segment(log, 0), disable_file_mapped_weights=flag, echo=echo)
    if sys.platform.startswith("linux"):  # the Linux build prints the platform gate: never active
        assert [v.state for v in verdicts] == ["unavailable", "unavailable"], verdicts
        assert "only available on Windows arm64" in verdicts[0].reason
        assert (flag == "1") == ("User specified disable_file_mapped_weights: 1" in verdicts[0].evidence)
        assert (whole.state, whole.counts) == ("unavailable", {"unavailable": 2})
    else:  # Windows ARM64: what the EP says, and "1" always confirmed
        assert all(v.state != "unknown" for v in verdicts), verdicts
        assert flag == "0" or all(v.state == "disabled" for v in verdicts), verdicts
    assert all(v.state != "active" for v in verdicts) or flag == "0"
