"""Shared by the qnn suites: whether the real QNN EP can run here at all."""

from __future__ import annotations


def qnn_skip_reason() -> str | None:
    """Why the real QNN EP cannot run on this machine (platform, package), or None."""
    from harness.targets.qnn.ep import qnn_platform_supported

    ok, why = qnn_platform_supported()
    if not ok:
        return why
    try:
        import onnxruntime_qnn  # noqa: F401 - cheap: the package only computes library paths
    except ImportError:
        return "onnxruntime-qnn is not installed"
    return None
