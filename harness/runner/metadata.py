"""Small functions that say where and with what a run was measured; the dict travels with
the results in metadata.json."""

from __future__ import annotations

import platform
import socket
import subprocess
import sys
from importlib import metadata as importlib_metadata
from pathlib import Path


def package_version(name: str) -> str | None:
    try:
        return importlib_metadata.version(name)
    except importlib_metadata.PackageNotFoundError:
        return None


def cpu_name() -> str:
    if sys.platform.startswith("linux"):
        try:
            for line in Path("/proc/cpuinfo").read_text().splitlines():
                if line.lower().startswith(("model name", "hardware", "processor\t: a")):
                    return line.split(":", 1)[1].strip()
        except OSError:
            pass
    return platform.processor() or platform.machine()


def git_commit(cwd: Path | None = None) -> str | None:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short=12", "HEAD"],
            cwd=cwd or Path(__file__).parent,
            capture_output=True,
            text=True,
            timeout=5,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def target_versions() -> dict[str, str | None]:
    """Versions every target reports (onnxruntime-qnn, the QNN SDK...), whatever the run's target."""
    from harness.targets import all_targets

    versions: dict[str, str | None] = {}
    for target in all_targets():
        try:
            reported = target.versions()
        except Exception:  # metadata never fails a run
            continue
        versions.update({k: v for k, v in reported.items() if v is not None or k not in versions})
    return versions


def target_version_env() -> dict:
    """Every target's versions (None where unknown) and ``version_labels``, what reports call them."""
    from harness.targets import version_labels

    labels = version_labels()
    reported = {k: v for k, v in target_versions().items() if v is not None}
    return dict.fromkeys(labels) | reported | {"version_labels": labels}


def environment() -> dict:
    import psutil

    env = {
        "os": platform.platform(),
        "system": platform.system(),
        "arch": platform.machine(),
        "cpu": cpu_name(),
        "cpu_count": psutil.cpu_count(logical=True),
        "ram_bytes": int(psutil.virtual_memory().total),
        "python": platform.python_version(),
        "onnxruntime": package_version("onnxruntime"),
        "numpy": package_version("numpy"),
        "hostname": socket.gethostname(),
        "git_commit": git_commit(),
    } | target_version_env()
    return env | wine_env()


def wine_env() -> dict:
    """``{"wine": version}`` when this Windows is Wine (its figures are Wine's: docs/ci.md)."""
    if sys.platform != "win32":
        return {}
    from mapper_impl._winapi import wine_version

    version = wine_version()
    return {"wine": version} if version else {}
