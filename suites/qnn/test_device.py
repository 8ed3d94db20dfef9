"""device: what the QNN EP reports about this machine, never the OS or CPU alone.

The real probe runs here (Linux x86_64: the HTP simulator on a CPU-typed EP device, the platform
gate, no NPU). Failures of the environment are made real too: a probe killed by its time limit,
an EP library ORT cannot load (a shadow onnxruntime_qnn pointing at a missing file), a missing
package. The on-device outcome (NPU + HTP + RPCMem) cannot exist here: its judgement is tested
from a child record and the EP's Windows log lines.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import psutil
import pytest
from qnn_support import qnn_skip_reason

from harness.targets.qnn.device import (
    DeviceReport,
    EpDevice,
    _fill,
    _judge,
    device_skip_reason,
    probe_device,
    render_lines,
)

ROOT = Path(__file__).resolve().parents[2]
ON_LINUX = sys.platform.startswith("linux")


@pytest.fixture(scope="module")
def report() -> DeviceReport:
    reason = qnn_skip_reason()
    if reason:
        pytest.skip(reason)
    return probe_device()


def _probe_children() -> list[psutil.Process]:
    out = []
    for p in psutil.Process().children(recursive=True):
        try:
            if "harness.targets.qnn.device" in " ".join(p.cmdline()):
                out.append(p)
        except psutil.Error:
            pass
    return out


# ----------------------------------------------------------------------------- the real probe


@pytest.mark.qnn
def test_probe_reports_what_the_ep_says(report: DeviceReport) -> None:
    d = report.to_dict()
    assert json.loads(json.dumps(d)) == d
    assert report.ep_registered and report.ep_devices, report.ep_error
    assert report.onnxruntime_qnn and report.qnn_sdk and report.onnxruntime
    assert report.npu_present == any(x.hardware_type == "NPU" for x in report.ep_devices)
    assert report.is_device == (report.npu_present and report.htp_usable and report.rpcmem_loadable is True)
    assert "\n" not in report.verdict and report.verdict
    assert report.file_mapping["state"] in ("active", "retried", "ep-disabled", "unavailable", "unknown")
    if not report.is_device:
        assert report.reason and device_skip_reason() == f"not a QNN device: {report.reason}"


@pytest.mark.qnn
@pytest.mark.skipif(not ON_LINUX, reason="the Linux x86_64 build: HTP simulator and platform gate")
def test_probe_on_linux_is_the_simulator_without_file_mapping(report: DeviceReport) -> None:
    assert [x.hardware_type for x in report.ep_devices] == ["CPU"]  # the simulator's device type
    assert not report.npu_present
    assert report.htp_usable and "HTP simulator" in report.htp_detail, report.htp_detail
    assert report.file_mapping_available is False
    assert report.file_mapping_detail.startswith("File mapped weights feature is only available on Windows arm64")
    assert report.file_mapping["state"] == "unavailable"
    assert report.rpcmem_loadable is None and "platform gate" in report.rpcmem_detail
    assert not report.is_device
    assert report.reason.startswith("no NPU-typed QNN EP device (EP devices: CPU)")
    assert "RPCMem not probed" in report.reason
    assert report.verdict.startswith("not a QNN device: onnxruntime-qnn") and "HTP usable (simulator)" in report.verdict
    assert set(report.steps_s) == {"import", "register", "compile", "session", "run"}


@pytest.mark.qnn
def test_doctor_text(report: DeviceReport) -> None:
    lines = report.lines()
    assert lines[0] == report.verdict
    labels = [ln.split()[0] for ln in lines[1:] if not ln.startswith(" " * 19)]
    assert labels == ["platform", "versions", "QNN", "EP", "NPU", "HTP", "RPCMem", "file", "is", "probe"]
    assert any(ln.startswith("  file mapping     no: File mapped weights") for ln in lines) or not ON_LINUX


# ----------------------------------------------------------------------------- environment problems are data


@pytest.mark.qnn
def test_a_probe_over_its_time_limit_is_killed_and_reported() -> None:
    if qnn_skip_reason():
        pytest.skip(qnn_skip_reason())
    r = probe_device(timeout_s=0.05)
    assert not r.ep_registered and not r.is_device
    assert "did not finish in 0.05 s (killed)" in r.ep_error
    assert r.reason.startswith("QNN EP not registered: probe process did not finish")
    assert _probe_children() == []  # nothing left running


@pytest.mark.qnn
def test_an_ep_library_ort_cannot_load_is_reported(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if qnn_skip_reason():
        pytest.skip(qnn_skip_reason())
    shadow = tmp_path / "shadow" / "onnxruntime_qnn"
    shadow.mkdir(parents=True)
    missing = tmp_path / "libonnxruntime_providers_qnn_missing.so"
    (shadow / "__init__.py").write_text(
        f"__version__ = '0.0.0'\ndef get_library_path():\n    return {str(missing)!r}\n"
    )
    (shadow / "build_and_package_info.py").write_text("qnn_version = '0.0'\n")
    monkeypatch.setenv("PYTHONPATH", str(shadow.parent))
    r = probe_device()
    assert (r.ep_registered, r.is_device, r.onnxruntime_qnn) == (False, False, "0.0.0")
    assert r.ep_error.startswith("cannot register the QNN EP library"), r.ep_error
    assert r.reason.startswith("QNN EP not registered: cannot register the QNN EP library")
    assert r.htp_detail == "not probed: the QNN EP is not registered" and r.file_mapping == {}
    assert r.verdict.startswith("not a QNN device: QNN EP not registered")


def test_a_missing_package_is_reported_without_a_child() -> None:
    code = (
        "import json, sys; sys.modules['onnxruntime_qnn'] = None\n"
        "from harness.targets.qnn.device import probe_device\n"
        "print(json.dumps(probe_device().to_dict()))"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert proc.returncode == 0, proc.stderr
    d = json.loads(proc.stdout)
    assert (d["ep_registered"], d["is_device"]) == (False, False)
    assert d["ep_error"].startswith("onnxruntime-qnn is not installed")
    assert d["verdict"] == f"not a QNN device: QNN EP not registered: {d['ep_error']}"


def test_cli_prints_the_report() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "harness.targets.qnn.device", "--json", "--timeout", "0.05"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["is_device"] is False


# ----------------------------------------------------------------------------- device judgements


def _w(where: str, text: str) -> str:
    return f"\x1b[0;93m2026-11-30 02:21:25.000000001 [W:onnxruntime:, {where}] {text}\x1b[m\n"


def _i(where: str, text: str) -> str:
    return f"2026-11-30 02:21:25.000000002 [I:onnxruntime:, {where}] {text}\n"


MAPPED_SEGMENT = (
    _i("qnn_provider_factory.cc:253 CreateEpImpl", "Creating QNN EP")
    + _i(
        "qnn_windows_file_mapper.cc:31 GetContextBinMappedMemoryPtr",
        r"Creating context bin file mapping for C:\t\probe_em0_ctx_qnn.bin",
    )
    + _i(
        "qnn_backend_manager.cc:1187 MapDmaData",
        "Mapping DMA data for request: memory mapped base "
        "pointer(000001D3F2A10000), offset(0), size(4096), total file size(20480) "
        "isBackendMappingNeeded(1)",
    )
    + _i("qnn_backend_manager.cc:1214 MapDmaData", "Created DMA data mapping with address: 000001D3F2A10000")
)
RPCMEM_SEGMENT = _i("qnn_provider_factory.cc:253 CreateEpImpl", "Creating QNN EP") + _w(
    "qnn_execution_provider.cc:1128 QnnEp",
    "Unable to load RPCMem library: Failed to initialize "
    "RPCMEM dynamic library handle: The specified module could not be found. - Disabling file "
    "mapped weights.",
)


def _record(device_type: str, *, ran: bool = True) -> dict:
    dev = {
        "hardware_type": device_type,
        "hardware_vendor": "Qualcomm",
        "vendor_id": 0x4D4F4351,
        "device_id": 0,
        "ep_vendor": "Qualcomm",
        "ep_metadata": {"version": "0.1.0"},
        "device_metadata": {},
    }
    rec = {
        "onnxruntime": "1.32.0",
        "onnxruntime_qnn": "2.7.0",
        "qnn_sdk": "2.51.0",
        "ep_registered": True,
        "ep_devices": [dev],
        "device_type": device_type,
        "model": "64x64 uint8 QDQ MatMul",
        "session_ok": ran,
    }
    if ran:
        rec.update(run_ok=True, output={"ok": True, "cosine": 0.999})
    else:
        rec["compile_error"] = "compiling for HTP failed: QNN_DEVICE_ERROR_INVALID_CONFIG"
    return rec


def _judged(rec: dict, segment: str) -> DeviceReport:
    r = DeviceReport(platform="win32 ARM64")
    _fill(r, rec, segment, "", "")
    _judge(r)
    return r


def test_npu_htp_and_rpcmem_make_a_device() -> None:
    r = _judged(_record("NPU"), MAPPED_SEGMENT)
    assert r.is_device and r.reason == "" and r.npu_present and r.htp_usable
    assert (r.rpcmem_loadable, r.file_mapping_available, r.file_mapping["state"]) == (True, True, "active")
    assert r.verdict == (
        "QNN device: NPU (Qualcomm) via onnxruntime-qnn 2.7.0 (QNN SDK 2.51.0); HTP usable, "
        "RPCMem loaded, file mapping active"
    )
    assert "an NPU-typed EP device" in r.htp_detail
    assert render_lines(r)[-2] == "  is a device      yes"


def test_hosted_arm64_runner_is_not_a_device() -> None:
    """windows-11-arm: the EP registers with a CPU-typed device, HTP does not compile, and when a
    session does load the EP says RPCMem is missing."""
    r = _judged(_record("CPU", ran=False), "")
    assert not r.is_device and not r.htp_usable
    assert r.reason == (
        "no NPU-typed QNN EP device (EP devices: CPU); HTP backend not usable: compiling for HTP "
        "failed: QNN_DEVICE_ERROR_INVALID_CONFIG; RPCMem not probed: no probe session was created"
    )
    r = _judged(_record("NPU"), RPCMEM_SEGMENT)
    assert (r.is_device, r.rpcmem_loadable, r.file_mapping_available) == (False, False, False)
    assert r.rpcmem_detail.startswith("Unable to load RPCMem library: Failed to initialize RPCMEM")
    assert r.file_mapping["state"] == "ep-disabled" and r.file_mapping["reason"] == "RPCMem unavailable"
    assert r.reason.startswith("RPCMem not loadable: Unable to load RPCMem library")


def test_ep_device_description() -> None:
    d = EpDevice("NPU", "Qualcomm", 0x4D4F4351, 0, "Qualcomm", {"version": "0.1.0", "library_path": "x"})
    assert d.describe() == "NPU (Qualcomm, vendor_id 0x4d4f4351, device_id 0x0000) [version=0.1.0]"
