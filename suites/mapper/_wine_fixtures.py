"""Fixtures of the Wine tests (`test_wine_job.py`, `test_wine_differential.py`,
`test_wine_flags.py`, `test_wine_winmem.py`, each imports them): the mingw cross compiler and
the C probes (`_wine_probe.c`, `_wine_memprobe.c`) each compiled once per test process, run
under one Wine prefix in a pytest temporary folder. Either tool missing makes those tests skip,
with the reason (`.ci/run` installs both). Not a conftest.py: the suites import the root
conftest by that name."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

PROBE_SOURCE = Path(__file__).with_name("_wine_probe.c")
#: The parent's memory reads of `harness.runner.winmem`; PSAPI_VERSION=1 links psapi.dll's
#: GetProcessMemoryInfo and GetPerformanceInfo, the exports winmem's ctypes calls.
MEMPROBE_SOURCE = Path(__file__).with_name("_wine_memprobe.c")
MEMPROBE_FLAGS = ("-DPSAPI_VERSION=1", "-lpsapi")
WINE_TIMEOUT = 300  # the first start of a fresh prefix takes 20-30 s on a loaded machine


@pytest.fixture(scope="session")
def mingw() -> str:
    """The mingw-w64 C compiler for x86_64 Windows."""
    gcc = shutil.which("x86_64-w64-mingw32-gcc")
    if not gcc:
        pytest.skip("gcc-mingw-w64-x86-64 not installed (.ci/run installs it)")
    return gcc


#: Each compiled probe with its prefix, made once per test process: each importing module gets
#: a session fixture of its own, and a second Wine prefix would cost another first start (all
#: probes share the first one's folder).
_PROBE: dict[str, tuple[Callable[..., list[dict]], Path]] = {}


@pytest.fixture(scope="session")
def wine(mingw, tmp_path_factory) -> tuple[Callable[..., list[dict]], Path]:
    """(run, folder): ``run(*args)`` runs the compiled probe under Wine (no display, no debug
    output) and returns its JSON lines; ``folder`` is the session's scratch folder."""
    return _probe(mingw, tmp_path_factory, PROBE_SOURCE)


@pytest.fixture(scope="session")
def wine_memory(mingw, tmp_path_factory) -> tuple[Callable[..., list[dict]], Path]:
    """(run, folder) as ``wine`` gives them, for `_wine_memprobe.c`."""
    return _probe(mingw, tmp_path_factory, MEMPROBE_SOURCE, MEMPROBE_FLAGS)


def _probe(mingw: str, tmp_path_factory, source: Path, flags: tuple[str, ...] = ()):
    wine = shutil.which("wine") or shutil.which("wine64") or shutil.which("wine64", path="/usr/lib/wine")
    if not wine:
        pytest.skip("wine64 not installed (.ci/run installs it)")
    if source.name not in _PROBE:
        folder = next(iter(_PROBE.values()))[1] if _PROBE else tmp_path_factory.mktemp("wine")
        _PROBE[source.name] = _compile(mingw, wine, folder, source, flags)
    return _PROBE[source.name]


def _compile(
    mingw: str, wine: str, folder: Path, source: Path, flags: tuple[str, ...]
) -> tuple[Callable[..., list[dict]], Path]:
    exe = folder / f"{source.stem.removeprefix('_wine_')}.exe"  # probe.exe, memprobe.exe
    subprocess.run([mingw, "-O1", "-o", str(exe), str(source), *flags], check=True, capture_output=True)
    env = {k: v for k, v in os.environ.items() if k != "DISPLAY"}
    env.update(WINEPREFIX=str(folder / "prefix"), WINEDEBUG="-all")

    def run(*args: str) -> list[dict]:
        done = subprocess.run([wine, str(exe), *args], env=env, capture_output=True, text=True, timeout=WINE_TIMEOUT)
        assert done.returncode == 0, done.stderr[-2000:]
        return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]

    return run, folder
