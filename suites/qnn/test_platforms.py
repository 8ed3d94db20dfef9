"""Where onnxruntime-qnn installs (issue 21, point 8): Linux x86_64, Windows x64 and Windows
ARM64 wheels exist; on the first two the EP prints the platform gate. The dependency marker and
the platform check agree with that list."""

from __future__ import annotations

from pathlib import Path

import pytest
import tomllib

from harness.targets.qnn import ep

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("sys_platform", "machine", "supported", "words"),
    [
        ("linux", "x86_64", True, "platform gate"),
        ("win32", "AMD64", True, "Windows x64 (HTP simulator, platform gate)"),
        ("win32", "ARM64", True, "Windows ARM64"),
        ("darwin", "arm64", False, "needs Linux x86_64, Windows x64 or Windows ARM64"),
        ("linux", "aarch64", False, "not linux aarch64"),
    ],
)
def test_platform_check(monkeypatch, sys_platform, machine, supported, words):
    monkeypatch.setattr(ep.sys, "platform", sys_platform)
    monkeypatch.setattr(ep.platform, "machine", lambda: machine)
    ok, why = ep.qnn_platform_supported()
    assert ok is supported and words in why, why


def test_the_dependency_marker_names_the_three_wheels():
    from packaging.markers import Marker

    deps = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["dependencies"]
    (qnn,) = [d for d in deps if d.startswith("onnxruntime-qnn")]
    marker = Marker(qnn.split(";", 1)[1])
    for platform, machine, expected in [
        ("linux", "x86_64", True),
        ("win32", "AMD64", True),
        ("win32", "ARM64", True),
        ("win32", "x86", False),
        ("darwin", "arm64", False),
        ("linux", "aarch64", False),
    ]:
        assert marker.evaluate({"sys_platform": platform, "platform_machine": machine}) is expected, (platform, machine)
