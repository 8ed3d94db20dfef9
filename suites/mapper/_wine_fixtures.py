"""Fixtures of the Wine tests (`test_wine_job.py`, `test_wine_differential.py`,
`test_wine_flags.py`, each imports them): the mingw cross compiler and the C probe
(`_wine_probe.c`) compiled once per test process under a Wine prefix of its own in a pytest
temporary folder. Either tool missing makes those tests skip, with the reason (`.ci/run`
installs both). Not a conftest.py: the suites import the root conftest by that name."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

PROBE_SOURCE = Path(__file__).with_name("_wine_probe.c")
WINE_TIMEOUT = 300  # the first start of a fresh prefix takes 20-30 s on a loaded machine


@pytest.fixture(scope="session")
def mingw() -> str:
    """The mingw-w64 C compiler for x86_64 Windows."""
    gcc = shutil.which("x86_64-w64-mingw32-gcc")
    if not gcc:
        pytest.skip("gcc-mingw-w64-x86-64 not installed (.ci/run installs it)")
    return gcc


#: The compiled probe and its prefix, made once per test process: each importing module gets
#: a session fixture of its own, and a second Wine prefix would cost another first start.
_PROBE: dict[str, tuple[Callable[..., list[dict]], Path]] = {}


@pytest.fixture(scope="session")
def wine(mingw, tmp_path_factory) -> tuple[Callable[..., list[dict]], Path]:
    """(run, folder): ``run(*args)`` runs the compiled probe under Wine (no display, no debug
    output) and returns its JSON lines; ``folder`` is the session's scratch folder."""
    wine = shutil.which("wine") or shutil.which("wine64") or shutil.which("wine64", path="/usr/lib/wine")
    if not wine:
        pytest.skip("wine64 not installed (.ci/run installs it)")
    if "probe" not in _PROBE:
        _PROBE["probe"] = _compile(mingw, wine, tmp_path_factory.mktemp("wine"))
    return _PROBE["probe"]


def _compile(mingw: str, wine: str, folder: Path) -> tuple[Callable[..., list[dict]], Path]:
    exe = folder / "probe.exe"
    subprocess.run([mingw, "-O1", "-o", str(exe), str(PROBE_SOURCE)], check=True, capture_output=True)
    env = {k: v for k, v in os.environ.items() if k != "DISPLAY"}
    env.update(WINEPREFIX=str(folder / "prefix"), WINEDEBUG="-all")

    def run(*args: str) -> list[dict]:
        done = subprocess.run([wine, str(exe), *args], env=env, capture_output=True, text=True, timeout=WINE_TIMEOUT)
        assert done.returncode == 0, done.stderr[-2000:]
        return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]

    return run, folder
