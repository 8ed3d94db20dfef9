"""The real QNN EP: register it once, pick its device, sessions with the option set explicitly, output checks."""

from __future__ import annotations

import platform
import sys
import threading
from typing import TYPE_CHECKING, Any

from harness.core.errors import QnnUnavailableError

if TYPE_CHECKING:
    import onnxruntime

EP_NAME = "QNNExecutionProvider"
SHARE_EP_CONTEXTS_KEY = "ep.share_ep_contexts"  #: Session config key for sharing EP resources.
BACKEND_TYPES = ("htp", "cpu", "gpu", "saver")  #: QNN backends ``backend_type`` names (htp is the NPU).
_register_lock = threading.Lock()


def qnn_platform_supported() -> tuple[bool, str]:
    """Wheels exist for Linux x86_64 and Windows x64 (simulator, feature off) and Windows ARM64."""
    machine = platform.machine().lower()
    if sys.platform.startswith("linux") and machine in ("x86_64", "amd64"):
        return True, "Linux x86_64 (HTP simulator, platform gate)"
    if sys.platform == "win32" and machine in ("amd64", "x86_64"):
        return True, "Windows x64 (HTP simulator, platform gate)"
    ok = sys.platform == "win32" and machine in ("arm64", "aarch64")
    return (
        ok,
        "Windows ARM64"
        if ok
        else f"onnxruntime-qnn needs Linux x86_64, Windows x64 or Windows ARM64, not {sys.platform} {machine}",
    )


def qnn_versions() -> dict[str, str | None]:
    """Versions for reports: the onnxruntime-qnn wheel and the QNN SDK it bundles. Never raises."""
    out: dict[str, str | None] = {"onnxruntime_qnn": None, "qnn_sdk": None}
    try:
        import onnxruntime_qnn
        from onnxruntime_qnn import build_and_package_info as info

        out["onnxruntime_qnn"] = str(getattr(onnxruntime_qnn, "__version__", "")) or None
        out["qnn_sdk"] = str(getattr(info, "qnn_version", "")) or None
    except Exception:  # any import problem just means "unknown"
        pass
    return out


def register_qnn_ep() -> list:
    """Register the QNN plugin EP once per process and return its devices (NPU preferred)."""
    try:
        import onnxruntime_qnn
    except ImportError as e:
        raise QnnUnavailableError(
            "onnxruntime-qnn is not installed (pip install onnxruntime-qnn; "
            "wheels exist for Linux x86_64 and Windows ARM64)"
        ) from e
    import onnxruntime as ort

    with _register_lock:
        if not any(d.ep_name == EP_NAME for d in ort.get_ep_devices()):
            try:
                ort.register_execution_provider_library(EP_NAME, onnxruntime_qnn.get_library_path())
            except Exception as e:  # ORT raises its own Fail type
                if "already registered" not in str(e):
                    raise QnnUnavailableError(f"cannot register the QNN EP library: {e}") from e
        devices = [d for d in ort.get_ep_devices() if d.ep_name == EP_NAME]
    if not devices:
        raise QnnUnavailableError("the QNN EP is registered but exposes no device on this machine")
    npu = [d for d in devices if d.device.type == ort.OrtHardwareDeviceType.NPU]
    return npu or devices


def disable_option_value(value: object) -> str:
    """The provider option as the EP wants it, "0" or "1"; anything else is a ValueError (the EP reads "yes" as on)."""
    from mapper_impl import parse_disable_flag

    return "1" if parse_disable_flag(value) else "0"


def qnn_session_options(
    *,
    disable_file_mapped_weights: object,
    share_ep_contexts: bool = False,
    backend_type: str = "htp",
    log_severity: int = 1,
    provider_options: dict[str, str] | None = None,
) -> onnxruntime.SessionOptions:
    """SessionOptions with the QNN device and the option under test; log_severity 0 or 1 (the verdicts need INFO)."""
    value = disable_option_value(disable_file_mapped_weights)
    if log_severity not in (0, 1):
        raise ValueError(
            f"log_severity must be 0 or 1 so the EP's file-mapping INFO lines are visible, got {log_severity!r}"
        )
    import onnxruntime as ort

    devices = register_qnn_ep()
    so = ort.SessionOptions()
    so.log_severity_level = log_severity
    # The user's provider options first: backend_type and the option under test are the harness's.
    options = {**(provider_options or {}), "backend_type": backend_type, "disable_file_mapped_weights": value}
    so.add_provider_for_devices(devices, options)
    if share_ep_contexts:
        so.add_session_config_entry(SHARE_EP_CONTEXTS_KEY, "1")
    return so


def compare_outputs(out: Any, ref: Any, *, quant_step: float | None = None, min_cosine: float = 0.99) -> dict:
    """QNN vs CPU reference: cosine >= ``min_cosine`` and mean |diff| <= 3 quantization steps (max reported only)."""
    import numpy as np

    a, b = np.asarray(out, np.float64).ravel(), np.asarray(ref, np.float64).ravel()
    if a.shape != b.shape:
        return {"ok": False, "reason": f"shape {a.shape} != {b.shape}"}
    denom = float(np.linalg.norm(a) * np.linalg.norm(b))
    cosine = float(a @ b / denom) if denom else float(np.array_equal(a, b))
    diff = np.abs(a - b)
    res = {"cosine": cosine, "max_abs": float(diff.max()), "mean_abs": float(diff.mean())}
    ok = cosine >= min_cosine
    if quant_step:
        res["mean_steps"] = res["mean_abs"] / quant_step
        res["max_steps"] = res["max_abs"] / quant_step
        ok = ok and res["mean_steps"] <= 3.0
    res["ok"] = bool(ok)
    return res
