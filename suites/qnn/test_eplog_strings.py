"""eplog's patterns against the strings of the real onnxruntime-qnn binaries, one step per release.

Offline: the committed fixtures of the INSTALLED version (harness/targets/qnn/data, provenance in their
headers). A version without fixtures fails, with the command that makes them. Online: the
installed version's win_arm64 wheel is downloaded (62 MB, ~1-3 s here) and its DLL must give
exactly the committed strings; skipped only when the package index is unreachable. The Linux
x86_64 library is the installed one, read in place.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from harness.targets.qnn.eplog import IGNORED, LINUX, PATTERNS, WIN, WIN_X64
from harness.targets.qnn.epselect import MAX_GAP, by_position, by_terms, strings_at
from harness.targets.qnn.epstrings import (
    SELECT_TERMS,
    RegistryUnreachable,
    StringsList,
    check,
    download_wheel,
    extract,
    find_fixture,
    fixture_name,
    installed_library,
    installed_version,
    missing_fixture_message,
    printable_strings,
    read_fixture,
    render_fixture,
    select,
    unused_ignored,
    write_fixture,
)

ROOT = Path(__file__).resolve().parents[2]
VERSION = installed_version()
needs_qnn = pytest.mark.skipif(VERSION is None, reason="onnxruntime-qnn is not installed")


def _extract_strings(path: Path, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    """The module's command line, ``--extract-strings PATH``, as a user runs it."""
    return subprocess.run(
        [sys.executable, "-m", "harness.targets.qnn.epstrings", "--extract-strings", str(path), *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=timeout,
    )


def _fixture(platform: str) -> StringsList:
    path = find_fixture(VERSION, platform)
    if path is None:
        pytest.fail(missing_fixture_message(VERSION, platform), pytrace=False)
    return read_fixture(path)


# ----------------------------------------------------------------------------- offline


@needs_qnn
@pytest.mark.parametrize("platform", [WIN, LINUX, WIN_X64])
def test_fixture_of_the_installed_version(platform: str) -> None:
    lst = _fixture(platform)
    assert lst.platform == platform and lst.header.get("version") == VERSION
    assert re.fullmatch(r"[0-9a-f]{64}", lst.header.get("library-sha256", "")), lst.header
    if platform != LINUX:
        assert lst.header["source"] == f"onnxruntime_qnn-{VERSION}-cp311-cp311-{platform}.whl"
        assert re.fullmatch(r"[0-9a-f]{64}", lst.header.get("source-sha256", ""))
    # made with today's selection: a changed term list means regenerating the fixtures
    assert render_fixture(lst) == Path(find_fixture(VERSION, platform)).read_text(encoding="ascii")
    assert check(lst) == []


@needs_qnn
def test_every_ignored_entry_still_matches_a_string() -> None:
    assert unused_ignored([_fixture(WIN), _fixture(LINUX), _fixture(WIN_X64)]) == []


#: mapping-step and DMA messages of the readable source (windows_file_mapper.cc, the DMA
#: callbacks and the RPCMem loader) that the reference list's terms do not reach (issue 21)
OUTSIDE_THE_TERMS = (
    "Failed to create file handle for context bin",
    "Context bin has a size of 0 bytes: ",
    "Context bin file path is empty",
    "Failed to unmap view of file with ptr: ",
    "Created file handle (",
    "Failed to get symbol remote_register_buf_attr2.",
)


@needs_qnn
def test_the_selection_catches_the_mapper_messages_outside_the_reference_terms() -> None:
    """The reference list's grep misses these; the fixture's selection (terms + the literal
    pools of the mapper and DMA functions by position) has every one, and each is read by a
    pattern or listed as deliberately ignored (check() == [])."""
    from harness.targets.qnn.epselect import REFERENCE_TERMS

    win = _fixture(WIN)
    assert [m for m in OUTSIDE_THE_TERMS if m in by_terms(OUTSIDE_THE_TERMS, REFERENCE_TERMS)] == []
    assert [m for m in OUTSIDE_THE_TERMS if m not in win.strings] == []
    assert check(win) == []


def test_position_rule_on_a_synthetic_pool() -> None:
    """Anchored pools run from the nearest foreign function name (excluded) to the next one,
    and stop at a gap of more than MAX_GAP bytes; strings outside stay out."""
    pad = b"\0" * 8
    data = (
        b"far away string"
        + b"\0" * (MAX_GAP + 50)
        + b"onnxruntime::qnn::Other\0"
        + pad
        + b"first literal of the callback\0"
        + b"onnxruntime::qnn::MapDmaDataCallback\0"
        + pad
        + b"later literal of the callback\0"
        + b"onnxruntime::qnn::NextFunction\0"
        + b"literal of the next function\0"
    )
    pool = by_position(strings_at(data))
    assert pool == {
        "first literal of the callback",
        "onnxruntime::qnn::MapDmaDataCallback",
        "later literal of the callback",
    }


def test_every_pattern_is_checked_against_a_binary() -> None:
    for p in PATTERNS:
        assert p.platforms and set(p.platforms) <= {WIN, LINUX, WIN_X64}, p
        assert p.fragments and all(len(f.strip()) >= 8 or f == p.template for f in p.fragments), p
    assert all(reason for _, reason in IGNORED)


def test_missing_fixture_fails_with_how_to_make_it() -> None:
    assert find_fixture("0.0.0", WIN) is None
    msg = missing_fixture_message("0.0.0", WIN)
    assert "onnxruntime-qnn-0.0.0-ep-strings.txt" in msg
    assert "python -m harness.targets.qnn.epstrings --fetch --version 0.0.0" in msg


def test_check_reports_a_renamed_message_and_an_unknown_string() -> None:
    lst = _fixture(WIN) if VERSION else StringsList(WIN, [])
    reworded = [s.replace("Retrying with direct read", "Retrying with a read") for s in lst.strings]
    problems = check(StringsList(WIN, reworded + ["Brand new file mapping warning."], lst.header))
    assert any("pattern 'retry-direct-read'" in p for p in problems)
    assert any("'Brand new file mapping warning.'" in p for p in problems)


# ----------------------------------------------------------------------------- the extractor


def test_printable_strings_is_strings_n8() -> None:
    data = b"\x00short\x00exactly8\x01tab\there ok\x7f" + b"A" * 7 + b"\xff"
    assert printable_strings(data) == ["exactly8", "tab\there ok"]
    assert select(["Retrying with X", "unrelated text", "RPCMEM x", "RPCMEM x"]) == ["RPCMEM x", "Retrying with X"]


@needs_qnn
def test_printable_strings_matches_gnu_strings() -> None:
    gnu = shutil.which("strings")
    lib = installed_library()
    if gnu is None or lib is None:
        pytest.skip("GNU strings (binutils) not on PATH" if gnu is None else "no provider library found")
    proc = subprocess.run([gnu, "-a", "-n", "8", str(lib)], capture_output=True, check=True)
    assert printable_strings(lib.read_bytes()) == proc.stdout.decode("ascii").split("\n")[:-1]


def test_fixture_round_trip_keeps_spaces(tmp_path: Path) -> None:
    lst = StringsList(
        WIN,
        [" leading", "trailing ", "#not a header", "plain text"],
        {"platform": WIN, "version": "9.9.9", "source": "x.whl"},
    )
    back = read_fixture(write_fixture(lst, tmp_path / "f.txt"))
    assert (back.platform, back.strings, back.header["version"]) == (WIN, lst.strings, "9.9.9")


@needs_qnn
def test_installed_library_gives_the_committed_strings() -> None:
    lib = installed_library()
    assert lib is not None
    platform = WIN if lib.suffix == ".dll" else LINUX
    fresh, committed = extract(lib), _fixture(platform)
    assert fresh.strings == committed.strings
    assert fresh.header["library-sha256"] == committed.header["library-sha256"]


@needs_qnn
def test_cli_writes_the_fixture(tmp_path: Path) -> None:
    lib = installed_library()
    platform = WIN if lib.suffix == ".dll" else LINUX
    out = tmp_path / "strings.txt"
    proc = _extract_strings(lib, "--out", str(out), timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""  # no unclassified string, no stale pattern
    assert out.read_text() == Path(find_fixture(VERSION, platform)).read_text()


@pytest.mark.parametrize("name", ["missing.whl", "notazip-1.0-cp311-cp311-win_arm64.whl", "lib.txt"])
def test_cli_bad_input_is_one_line_exit_2(tmp_path: Path, name: str) -> None:
    path = tmp_path / name
    if name != "missing.whl":
        path.write_bytes(b"not a wheel")
    proc = _extract_strings(path)
    assert proc.returncode == 2 and proc.stderr.startswith("error: ") and proc.stderr.count("\n") == 1, proc.stderr


def test_wheel_without_the_library_is_an_error(tmp_path: Path) -> None:
    whl = tmp_path / "onnxruntime_qnn-9.9.9-cp311-cp311-win_arm64.whl"
    with zipfile.ZipFile(whl, "w") as z:
        z.writestr("onnxruntime_qnn/__init__.py", "")
    proc = _extract_strings(whl)
    assert proc.returncode == 2 and "no onnxruntime_providers_qnn.dll inside" in proc.stderr


# ----------------------------------------------------------------------------- online


@needs_qnn
@pytest.mark.parametrize("platform", [WIN, WIN_X64])
def test_downloaded_windows_wheel_gives_the_committed_strings(tmp_path: Path, platform: str) -> None:
    try:
        wheel = download_wheel(VERSION, tmp_path, platform=platform)
    except RegistryUnreachable as err:
        pytest.skip(f"package index unreachable, the offline fixture test still ran: {err}")
    fresh = extract(wheel)
    committed = _fixture(platform)
    assert fresh.header["source"] == committed.header["source"] == wheel.name
    assert fresh.header["source-sha256"] == committed.header["source-sha256"]
    assert fresh.strings == committed.strings
    assert check(fresh) == []
    if platform == WIN:  # the feature's binary has a string for every term
        assert [t for t in SELECT_TERMS if not any(t.lower() in s.lower() for s in fresh.strings)] == []
    assert fixture_name(VERSION, platform) == Path(find_fixture(VERSION, platform)).name


def test_the_fixtures_ship_inside_the_package():
    """An installed harness has no suites/: the fixtures live in the package and pyproject's
    package-data ships them (every fixture matches one of its globs)."""
    import tomllib

    import harness.targets.qnn as qnn_package
    from harness.targets.qnn.epstrings import FIXTURE_DIR

    package = Path(qnn_package.__file__).parent
    assert FIXTURE_DIR.parent == package
    root = package.parents[2]
    data = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))
    globs = data["tool"]["setuptools"]["package-data"]["harness.targets.qnn"]
    fixtures = sorted(FIXTURE_DIR.glob("*-ep-strings.txt"))
    assert fixtures
    assert all(any(f.relative_to(package).match(g) for g in globs) for f in fixtures)


def test_a_library_without_msvc_literal_pools_is_selected_by_terms_only() -> None:
    """Issue 43 item 9: GCC's .rodata (the Linux wheels) packs strings with no function-name
    strings between them, so the position rule's pool around the RPCMem anchor ran across 3 304
    strings of the Linux aarch64 library. Pools are taken in a PE image (MSVC) only."""
    from harness.targets.qnn.epselect import ANCHOR_LITERALS, select_library

    dense = b"".join(f"unrelated string number {i}\0".encode() for i in range(500))
    body = dense + ANCHOR_LITERALS[0].encode() + b"\0" + dense + b"Failed to register DMA data mapping to RPCMEM\0"
    assert select_library(b"\x7fELF" + body) == [ANCHOR_LITERALS[0], "Failed to register DMA data mapping to RPCMEM"]
    assert len(select_library(b"MZ" + body)) > 100  # MSVC's layout: the pool rule applies
