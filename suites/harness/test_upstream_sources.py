"""docs/upstream.md's sources (issue 30): every row names what it follows (the 2.7.0 strings, the
readable source at cc7ec9e or fbd7fc5, a PR or report by number, or "inferred"), and no row
credits cc7ec9e with what that commit does not have (the per-node disable, the 3.3.3 check,
embedded contexts, the read callback, SSR, a disable after a failure). The page says 2.7.0 is
newer than cc7ec9e, and the installed 2.7.0 library's symbols agree."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGE = (ROOT / "docs" / "upstream.md").read_text(encoding="utf-8")
#: What a source cell may cite.
KINDS = re.compile(r"2\.7\.0 strings|source cc7ec9e|source fbd7fc5|#\d+|inferred|Windows heap design|\(no evidence\)")
#: What cc7ec9e does not have (its qnn_backend_manager.cc and qnn_execution_provider.cc): a
#: source cell crediting it with one of these is wrong.
NOT_IN_CC7EC9E = re.compile(r"per-node|per node|3\.3\.3|embedded|read callback|SSR|disables its own", re.I)


def source_cells() -> list[tuple[str, str]]:
    """(row name, source cell) of every table row of the page."""
    out = []
    for line in PAGE.splitlines():
        if not line.startswith("| ") or line.startswith("| ---"):
            continue
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]
        if cells[0] in ("rule", "step", "state"):
            continue
        out.append((cells[0], cells[2]))
    return out


def test_every_row_names_its_source() -> None:
    cells = source_cells()
    assert len(cells) > 30
    for name, source in cells:
        assert KINDS.search(source), f"{name}: no source of a known kind: {source!r}"
        assert "CONTEXT.md" not in source, f"{name}: our notes are no source"


def test_no_row_credits_cc7ec9e_with_what_it_lacks() -> None:
    for name, source in cells_with_cc7ec9e():
        for credit in re.findall(r"cc7ec9e[^;,]*", source):  # what the cell credits cc7ec9e with
            if not credit.startswith("cc7ec9e never"):
                assert not NOT_IN_CC7EC9E.search(credit), f"{name}: {credit!r}"


def cells_with_cc7ec9e() -> list[tuple[str, str]]:
    return [(name, source) for name, source in source_cells() if "cc7ec9e" in source]


def test_the_page_dates_its_sources() -> None:
    sources = PAGE[PAGE.index("## Sources") : PAGE.index("## mapper_impl")]
    assert "newer than cc7ec9e" in sources and "ReloadContextForSSR" in sources
    assert "an older version widened" not in PAGE, "cc7ec9e itself widens the path byte by byte"
    assert "`qnn_windows_file_mapper.cc` 51" in PAGE


def test_the_page_says_what_issue_43_read_again() -> None:
    """Issue 43 item 9: 2.7.0 is an October 2026 build; its fatal mapping step is shown by the
    DLL's code; the list path maps once per process; #839 is the list path's and injected on the
    single path only; #1124's tie to a stale registration is an inference (1002 vs 1003)."""
    sources = PAGE[PAGE.index("## Sources") : PAGE.index("## mapper_impl")]
    assert "PE date is 2026-10-08" in sources and "July 2026" not in PAGE
    assert "inferred (no string shows it)" not in PAGE and "the win_arm64 DLL's code shows it" in PAGE
    assert "the file is mapped once per process there" in PAGE
    assert "asynchronous list path" in PAGE and "injects them on the single path only" in PAGE
    assert "is an inference, a failed registration's own code being 1003" in PAGE
    eplog = (ROOT / "harness" / "targets" / "qnn" / "eplog.py").read_text(encoding="utf-8")
    assert "per-process cache hit" not in eplog and "cache hit of its backend manager" in eplog


def test_the_installed_270_library_has_the_symbols_the_page_names() -> None:
    """The Linux build of 2.7.0 (installed with the test extras) really holds the SSR reload and
    the longer CreateContextHandleFromBinary that cc7ec9e lacks."""
    qnn = pytest.importorskip("onnxruntime_qnn")
    if getattr(qnn, "__version__", "") != "2.7.0":
        pytest.skip(f"onnxruntime-qnn {getattr(qnn, '__version__', '?')} installed, not 2.7.0")
    library = Path(qnn.__file__).parent / "libonnxruntime_providers_qnn.so"
    if not library.exists():
        pytest.skip("no Linux provider library in this wheel")
    data = library.read_bytes()
    assert b"ReloadContextForSSR" in data and b"CreateContextHandleFromBinary" in data
    assert b"User specified disable_file_mapped_weights: " in data
