"""The call sequence cannot drift (issue 23, part 3): `_winapi.py`'s constants and structures
equal mingw's windows.h (a compile-time check, no Wine needed), and the mapper's mapping
calls, flag by flag and in order, equal the probe's own statement of upstream's sequence
(`_wine_probe.c upstream`, windows.h constants), which Wine runs. A deliberate change of one
flag, made in a copy or by monkeypatching, never in the source, fails each check."""

from __future__ import annotations

import sys
from pathlib import Path

import _wine_fixtures
import pytest
from _wine_exec import run_scenario, wine_path
from _wine_flags import compile_check, header_check, load_copy, mapping_sequence
from wine_scenarios import SCENARIOS

from mapper_impl import _winapi
from mapper_impl import _windows as win

mingw, wine = _wine_fixtures.mingw, _wine_fixtures.wine  # the session fixtures, for pytest
pytestmark = [
    pytest.mark.xdist_group("wine"),
    # The Linux stand-in for a real kernel32: on Windows, test_windows_real.py runs the mapper
    # over the real one (and the scenario files' POSIX permissions and links mean nothing there).
    pytest.mark.skipif(sys.platform == "win32", reason="Windows runs the mapper over its own kernel32"),
]
WINAPI_SOURCE = Path(_winapi.__file__).read_text(encoding="utf-8")
BY_NAME = {scenario.name: scenario for scenario in SCENARIOS}


def test_winapi_constants_and_structures_match_windows_h(mingw):
    """Every constant `_winapi` defines equals windows.h's, every structure has its size and
    offsets (mingw compiles the generated assertions)."""
    source = header_check(_winapi, WINAPI_SOURCE)
    assert source.count("_Static_assert") >= 50, source  # 20 constants, 5 structure sizes, 29 offsets
    done = compile_check(mingw, source)
    assert done.returncode == 0, done.stderr


def test_a_changed_constant_fails_the_header_check(mingw):
    """The negative control: a copy of `_winapi` whose FILE_SHARE_READ is 3 does not compile,
    and the error names the constant."""
    changed = WINAPI_SOURCE.replace("FILE_SHARE_READ = 0x00000001", "FILE_SHARE_READ = 0x00000003")
    assert changed != WINAPI_SOURCE
    done = compile_check(mingw, header_check(load_copy(changed), changed))
    assert done.returncode != 0
    assert "_winapi.FILE_SHARE_READ = 0x3" in done.stderr, done.stderr


def _upstream(wine, tmp_path) -> tuple[list[dict], list[dict]]:
    """(the mapper's mapping calls over the fake, the probe's upstream sequence under Wine)."""
    run = run_scenario(tmp_path, BY_NAME["map_whole_file"])
    probe, _ = wine
    native = probe("upstream", wine_path(str(tmp_path / "map_whole_file" / "f")))
    return mapping_sequence(run.trace, run.outcomes), native


def test_mapping_calls_follow_the_probes_upstream_sequence(wine, tmp_path):
    """Open, mapping, one whole view, mapping closed, file closed, unmapped: the same calls,
    flags and results in the Python mapper and in the probe's windows.h statement of it."""
    ours, native = _upstream(wine, tmp_path)
    assert [step["call"] for step in native] == [
        "CreateFileW",
        "CreateFileMappingW",
        "MapViewOfFile",
        "CloseHandle",
        "CloseHandle",
        "UnmapViewOfFile",
    ]
    assert ours == native


def test_a_changed_share_mode_is_caught(wine, tmp_path, monkeypatch):
    """The negative control: the mapper opening with FILE_SHARE_ALL instead of FILE_SHARE_READ
    (monkeypatched) breaks the sequence check, and the writer scenario no longer ends as
    documented (the writer is not refused)."""
    monkeypatch.setattr(win.WindowsFileMapper._open, "__defaults__", (win.FILE_SHARE_ALL,))
    ours, native = _upstream(wine, tmp_path)
    assert ours != native
    assert [s["args"][1] for s in ours if s["call"] == "CreateFileW"] == [win.FILE_SHARE_ALL]
    writer = BY_NAME["writer_refused"]
    assert tuple(run_scenario(tmp_path, writer).results) != writer.expect
