"""Fixtures of the Wine tests (`test_wine_job.py`, `test_wine_differential.py`,
`test_wine_flags.py`, `test_wine_winmem.py`, each imports them): the mingw cross compiler and
the C probes (`_wine_probe.c`, `_wine_memprobe.c`) each compiled once per test process, run
under one Wine prefix in a pytest temporary folder. Either tool missing makes those tests skip,
with the reason (`.ci/run` installs both). Not a conftest.py: the suites import the root
conftest by that name.

The prefix is booted once, as `.ci/wine_lane.py` boots its own: a persistent wineserver and the
prefix's services started with no inherited pipe, no Mono or Gecko install. Without it each
probe run started a wineserver of its own (it ends 3 s after its last program) and the
services it starts held the probe's output pipe open until they ended: 2-3 s per run, where a
run on the booted prefix takes 0.03-0.1 s. The server is ended at the session's end (`-k`),
and ends by itself 60 s after its last program if the test process is killed first."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

PROBE_SOURCE = Path(__file__).with_name("_wine_probe.c")
#: The parent's memory reads of `harness.runner.winmem`; PSAPI_VERSION=1 links psapi.dll's
#: GetProcessMemoryInfo and GetPerformanceInfo, the exports winmem's ctypes calls.
MEMPROBE_SOURCE = Path(__file__).with_name("_wine_memprobe.c")
MEMPROBE_FLAGS = ("-DPSAPI_VERSION=1", "-lpsapi")
WINE_TIMEOUT = 300  # the first start of a fresh prefix takes 20-30 s on a loaded machine
#: How long the session's wineserver outlives its last Windows program: only a killed test
#: process leaves it behind (the session's end stops it), and then for no longer than this.
SERVER_LINGER_S = 60


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
def wine(mingw, request) -> tuple[Callable[..., list[dict]], Path]:
    """(run, folder): ``run(*args)`` runs the compiled probe under Wine (no display, no debug
    output) and returns its JSON lines; ``folder`` is the session's scratch folder."""
    return _probe(mingw, request, PROBE_SOURCE)


@pytest.fixture(scope="session")
def wine_memory(mingw, request) -> tuple[Callable[..., list[dict]], Path]:
    """(run, folder) as ``wine`` gives them, for `_wine_memprobe.c`."""
    return _probe(mingw, request, MEMPROBE_SOURCE, MEMPROBE_FLAGS)


def _probe(mingw: str, request: pytest.FixtureRequest, source: Path, flags: tuple[str, ...] = ()):
    """The probe compiled from ``source``, run under the session's one booted prefix."""
    if source.name not in _PROBE:
        _PROBE[source.name] = _compile(mingw, _booted_prefix(request), source, flags)
    return _PROBE[source.name]


@dataclass(frozen=True)
class _Prefix:
    wine: str
    env: dict[str, str]
    folder: Path  # the session's scratch folder; the prefix is its ``prefix/``


_PREFIX: list[_Prefix] = []


def _booted_prefix(request: pytest.FixtureRequest) -> _Prefix:
    """The session's prefix, booted on first use; its wineserver is stopped when the test
    process ends its session (``config.add_cleanup``)."""
    if _PREFIX:
        return _PREFIX[0]
    wine = shutil.which("wine") or shutil.which("wine64") or shutil.which("wine64", path="/usr/lib/wine")
    wineserver = shutil.which("wineserver") or shutil.which("wineserver64", path="/usr/lib/wine")
    if not wine or not wineserver:
        pytest.skip("wine64 not installed (.ci/run installs it)")
    folder = request.getfixturevalue("tmp_path_factory").mktemp("wine")
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY")}
    env.update(WINEPREFIX=str(folder / "prefix"), WINEDEBUG="-all", WINEDLLOVERRIDES="mscoree,mshtml=")
    quiet = {"stdin": subprocess.DEVNULL, "stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}

    def stop() -> None:
        subprocess.run([wineserver, "-k"], env=env, check=False, timeout=WINE_TIMEOUT, **quiet)
        subprocess.run([wineserver, "-w"], env=env, check=False, timeout=WINE_TIMEOUT, **quiet)

    (folder / "prefix").mkdir()  # wineserver refuses a prefix folder that does not exist yet
    request.config.add_cleanup(stop)
    # it forks into the background and returns at once; wineboot then starts the services
    subprocess.run(
        [wineserver, f"-p{SERVER_LINGER_S}"], env=env, check=True, timeout=WINE_TIMEOUT, start_new_session=True, **quiet
    )
    subprocess.run([wine, "wineboot", "-i"], env=env, check=True, timeout=WINE_TIMEOUT, **quiet)
    _PREFIX.append(_Prefix(wine, env, folder))
    return _PREFIX[0]


def _compile(
    mingw: str, prefix: _Prefix, source: Path, flags: tuple[str, ...]
) -> tuple[Callable[..., list[dict]], Path]:
    folder, wine, env = prefix.folder, prefix.wine, prefix.env
    exe = folder / f"{source.stem.removeprefix('_wine_')}.exe"  # probe.exe, memprobe.exe
    subprocess.run([mingw, "-O1", "-o", str(exe), str(source), *flags], check=True, capture_output=True)

    def run(*args: str) -> list[dict]:
        done = subprocess.run([wine, str(exe), *args], env=env, capture_output=True, text=True, timeout=WINE_TIMEOUT)
        assert done.returncode == 0, done.stderr[-2000:]
        return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]

    return run, folder
