"""Is this machine a QNN device (NPU-typed EP device, HTP usable, RPCMem loaded)? Asked of the EP in a child."""

from __future__ import annotations

import argparse
import functools
import json
import platform
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from harness.core.vocab import EpState
from harness.targets.qnn.eplog import (
    REASON_RPCMEM,
    EpVerdict,
    classify_session,
    echo_style,
    find_messages,
    read_log_segment,
)

DEFAULT_TIMEOUT_S = 120.0


@dataclass
class EpDevice:
    """One OrtEpDevice of the QNN EP, as ORT reports it."""

    hardware_type: str  # CPU | GPU | NPU
    hardware_vendor: str = ""
    vendor_id: int = 0
    device_id: int = 0
    ep_vendor: str = ""
    ep_metadata: dict[str, str] = field(default_factory=dict)
    device_metadata: dict[str, str] = field(default_factory=dict)

    def describe(self) -> str:
        meta = ", ".join(
            f"{k}={v}" for k, v in {**self.device_metadata, **self.ep_metadata}.items() if k != "library_path"
        )
        return (
            f"{self.hardware_type} ({self.hardware_vendor or 'unknown vendor'}, vendor_id 0x{self.vendor_id:04x}, "
            f"device_id 0x{self.device_id:04x})" + (f" [{meta}]" if meta else "")
        )


@dataclass
class DeviceReport:
    """What the QNN EP reports about this machine (JSON-serialisable with `to_dict`)."""

    platform: str
    onnxruntime: str | None = None
    onnxruntime_qnn: str | None = None
    qnn_sdk: str | None = None
    ep_library: str | None = None
    ep_registered: bool = False
    ep_error: str = ""  # why the EP library did not register / listed no device
    ep_devices: list[EpDevice] = field(default_factory=list)
    npu_present: bool = False
    htp_usable: bool = False
    htp_detail: str = ""
    rpcmem_loadable: bool | None = None  # None: not probed (the EP never tried to load it)
    rpcmem_detail: str = ""
    file_mapping_available: bool | None = None  # None: the probe could not tell
    file_mapping_detail: str = ""  # the EP's own words where it gave any
    file_mapping: dict = field(default_factory=dict)  # EpVerdict of the probe session
    is_device: bool = False
    reason: str = ""  # why not a device ("" when it is one)
    verdict: str = ""  # one line
    probe_s: float = 0.0
    steps_s: dict[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict:
        return asdict(self)

    def lines(self) -> list[str]:
        """The text of ``harness doctor --target qnn``."""
        return render_lines(self)


def _run_child(workdir: Path, timeout_s: float) -> tuple[dict, str, str]:
    """(child's JSON record, its whole log, what went wrong with the process itself)."""
    from harness.contract.spawn import run_job

    log = workdir / "probe.log"
    try:
        with open(log, "wb") as out:
            code, record = run_job(
                "harness.targets.qnn.device_child", {}, out, workdir, timeout_s=timeout_s, poll_s=0.1
            )
    except OSError as err:
        return {}, read_log_segment(log, 0), f"cannot start the probe process: {err}"
    problem = ""
    if code is None:  # run_job killed it
        problem = f"probe process did not finish in {timeout_s:g} s (killed)"
    elif code != 0:
        problem = f"probe process exited with code {code}"
    return record or {}, read_log_segment(log, 0), problem


def _importable(name: str) -> bool:
    from importlib import util

    try:
        return util.find_spec(name) is not None
    except (ImportError, ValueError):  # ValueError: sys.modules[name] is None (import blocked)
        return False


def probe_device(*, timeout_s: float = DEFAULT_TIMEOUT_S) -> DeviceReport:
    """Probe the QNN EP in a child process; environment problems become data, never an exception."""
    t0 = time.perf_counter()
    report = DeviceReport(platform=f"{sys.platform} {platform.machine()}")
    if not (_importable("onnxruntime") and _importable("onnxruntime_qnn")):
        report.ep_error = "onnxruntime-qnn is not installed (wheels exist for Linux x86_64 and Windows ARM64)"
    else:
        with tempfile.TemporaryDirectory(prefix="qnn-probe-", ignore_cleanup_errors=True) as tmp:
            record, text, problem = _run_child(Path(tmp), timeout_s)
            segment = (
                read_log_segment(Path(tmp) / "probe.log", record.get("load_log_start", 0), record.get("load_log_end"))
                if "load_log_start" in record
                else ""
            )
        _fill(report, record, segment, text, problem)
    _judge(report)
    report.probe_s = round(time.perf_counter() - t0, 3)
    return report


def _tail(text: str, n: int = 3) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return " | ".join(lines[-n:])[-400:]


def _fill(report: DeviceReport, rec: dict, segment: str, text: str, problem: str) -> None:
    for key in ("onnxruntime", "onnxruntime_qnn", "qnn_sdk", "ep_library", "ep_registered", "ep_error"):
        if key in rec:
            setattr(report, key, rec[key])
    report.ep_devices = [EpDevice(**d) for d in rec.get("ep_devices", [])]
    report.npu_present = any(d.hardware_type == "NPU" for d in report.ep_devices)
    report.steps_s = rec.get("steps_s", {})
    if problem and not report.ep_error and not rec.get("ep_registered"):
        report.ep_error = f"{problem}: {_tail(text)}"
    _fill_htp(report, rec, problem, text)
    if rec.get("session_ok"):
        echo = echo_style(report.onnxruntime_qnn)  # the echo of a version not known is a note
        _fill_mapping(report, classify_session(segment, disable_file_mapped_weights="0", echo=echo), segment)
    else:
        report.rpcmem_detail = "no probe session was created"
        report.file_mapping_detail = "no probe session was created"


def _fill_htp(report: DeviceReport, rec: dict, problem: str, text: str) -> None:
    if not rec.get("ep_registered"):
        report.htp_detail = "not probed: the QNN EP is not registered"
        return
    failed = next((rec[k] for k in ("compile_error", "session_error", "run_error") if rec.get(k)), "")
    if failed or not rec.get("run_ok"):
        crashed = f"{problem} during the {rec.get('step', '?')} step: {_tail(text)}" if problem else ""
        report.htp_detail = failed or crashed or "the probe stopped before running the model"
        return
    out = rec.get("output", {})
    on = (
        "an NPU-typed EP device"
        if rec.get("device_type") == "NPU"
        else f"a {rec.get('device_type', '?')}-typed EP device (no NPU: the HTP simulator)"
    )
    if not out.get("ok"):
        report.htp_detail = f"ran on {on} but the output differs from the CPU EP's: {out}"
        return
    report.htp_usable = True
    report.htp_detail = (
        f"compiled a {rec.get('model', 'tiny QDQ')} model for HTP, loaded and ran it on {on}; "
        f"output matches the CPU EP (cosine {out.get('cosine', 0):.4f})"
    )


def _fill_mapping(report: DeviceReport, verdict: EpVerdict, segment: str) -> None:
    report.file_mapping = verdict.to_dict()
    rpcmem_words = find_messages(segment, "rpcmem-load", "rpcmem-missing")
    if verdict.state == EpState.UNAVAILABLE:
        report.file_mapping_available = False
        report.file_mapping_detail = "; ".join(find_messages(segment, "gate"))
        report.rpcmem_detail = "the platform gate turned file mapping off before the EP would load RPCMem"
    elif rpcmem_words:
        report.rpcmem_loadable = False
        report.rpcmem_detail = rpcmem_words[-1]
        report.file_mapping_available = False
        report.file_mapping_detail = rpcmem_words[-1]
    elif not find_messages(segment, "session"):
        # A warning's absence proves nothing unless the log was captured ("Creating QNN EP" shows it was).
        report.rpcmem_detail = (
            "unknown: the probe's log holds no 'Creating QNN EP' line, so the EP's log was not captured "
            "and a missing 'Unable to load RPCMem library' warning proves nothing"
        )
        report.file_mapping_detail = f"{verdict.state}: {verdict.reason}"
    else:
        report.rpcmem_loadable = True
        report.rpcmem_detail = (
            "loaded: DMA regions were registered with it"
            if verdict.state == EpState.ACTIVE
            else "loaded: no 'Unable to load RPCMem library' warning while file mapping was enabled"
        )
        report.file_mapping_available = True if verdict.state == EpState.ACTIVE else None
        report.file_mapping_detail = f"{verdict.state}: {verdict.reason}"
    if verdict.state == EpState.EP_DISABLED and REASON_RPCMEM not in verdict.reason:
        report.file_mapping_detail = f"ep-disabled: {verdict.reason}"


def _judge(report: DeviceReport) -> None:
    missing = []
    if not report.ep_registered:
        missing.append(f"QNN EP not registered: {report.ep_error or 'unknown error'}")
    elif not report.npu_present:
        kinds = ", ".join(d.hardware_type for d in report.ep_devices) or "none"
        missing.append(f"no NPU-typed QNN EP device (EP devices: {kinds})")
    if report.ep_registered and not report.htp_usable:
        missing.append(f"HTP backend not usable: {report.htp_detail}")
    if report.ep_registered and report.rpcmem_loadable is not True:
        state = "not loadable" if report.rpcmem_loadable is False else "not probed"
        missing.append(f"RPCMem {state}: {report.rpcmem_detail}")
    report.is_device = not missing
    report.reason = "; ".join(missing)
    versions = f"onnxruntime-qnn {report.onnxruntime_qnn or '?'} (QNN SDK {report.qnn_sdk or '?'})"
    if report.is_device:
        npu = next(d for d in report.ep_devices if d.hardware_type == "NPU")
        report.verdict = (
            f"QNN device: NPU ({npu.hardware_vendor}) via {versions}; HTP usable, RPCMem loaded, "
            f"file mapping {report.file_mapping.get('state', 'unknown')}"
        )
    elif not report.ep_registered:
        report.verdict = f"not a QNN device: {missing[0]}"
    else:
        kinds = "/".join(d.hardware_type for d in report.ep_devices) or "no"
        htp = (
            "HTP usable" + (" (simulator)" if not report.npu_present else "") if report.htp_usable else "HTP not usable"
        )
        fm = report.file_mapping.get("state", "not probed")
        report.verdict = (
            f"not a QNN device: {versions} on {report.platform} lists {kinds} EP device(s), no NPU; "
            f"{htp}; RPCMem {_rpcmem_word(report)}; file mapping {fm}"
            if not report.npu_present
            else f"not a QNN device: {report.reason}"
        )


def _rpcmem_word(report: DeviceReport) -> str:
    return {True: "loaded", False: "not loadable", None: "not probed"}[report.rpcmem_loadable]


def render_lines(report: DeviceReport) -> list[str]:
    yes_no = {True: "yes", False: "no", None: "unknown"}
    devices = [d.describe() for d in report.ep_devices] or ["none"]
    lines = [
        report.verdict,
        f"  platform         {report.platform}",
        f"  versions         onnxruntime {report.onnxruntime or '-'}, onnxruntime-qnn "
        f"{report.onnxruntime_qnn or '-'}, QNN SDK {report.qnn_sdk or '-'}",
        f"  QNN EP library   {'registered' if report.ep_registered else 'NOT registered'}"
        + (f" ({report.ep_library})" if report.ep_library else "")
        + (f": {report.ep_error}" if report.ep_error else ""),
        f"  EP devices       {devices[0]}",
        *(f"                   {d}" for d in devices[1:]),
        f"  NPU present      {yes_no[report.npu_present]}",
        f"  HTP usable       {yes_no[report.htp_usable]}: {report.htp_detail}",
        f"  RPCMem loadable  {yes_no[report.rpcmem_loadable]}: {report.rpcmem_detail}",
        f"  file mapping     {yes_no[report.file_mapping_available]}: {report.file_mapping_detail}",
        f"  is a device      {yes_no[report.is_device]}" + (f": {report.reason}" if report.reason else ""),
        f"  probe            {report.probe_s:.1f} s"
        + (" (" + ", ".join(f"{k} {v:.2f} s" for k, v in report.steps_s.items()) + ")" if report.steps_s else ""),
    ]
    return lines


@functools.lru_cache(maxsize=1)
def _probe_once() -> DeviceReport:
    return probe_device()


def device_skip_reason() -> str | None:
    """None on a QNN device, else why device tests skip (probed once per process)."""
    report = _probe_once()
    return None if report.is_device else f"not a QNN device: {report.reason}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m harness.targets.qnn.device", description="what the QNN EP reports about this machine"
    )
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S, help="probe time limit (s)")
    args = parser.parse_args(argv)
    report = probe_device(timeout_s=args.timeout)
    print(json.dumps(report.to_dict(), indent=2) if args.json else "\n".join(report.lines()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
