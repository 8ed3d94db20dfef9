"""Which strings of a provider library are file-mapping messages: `SELECT_TERMS`, plus MSVC literal pools."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

#: the reference list's grep terms (shared/reference/onnxruntime-qnn-2.7.0-ep-strings.txt) ...
REFERENCE_TERMS = ("file mapp", "DMA data", "rpcmem", "direct read", "Retrying", "read callback", "disable_file_mapped")
#: ... plus terms reaching the rest of the mapping path's messages.
EXTRA_TERMS = (
    "WithCallback",
    "mapview",
    "mapping request",
    "mapped file",
    "DmaDataCallback",
    "mapping release request",
    "context binary version",
    "Creating QNN EP",
    "Context bin ",  # the mapping step's own checks ("Context bin has a size of 0 bytes: ")
    "Context binary does not exist",  # GetFileSizeIfValid's two checks, made before the mapping step's
    "File is empty: ",
)
SELECT_TERMS = REFERENCE_TERMS + EXTRA_TERMS
MIN_LEN = 8  # strings -n 8
FUNCTION_NAME = re.compile(r"onnxruntime::[\w:`'<>\-]+")  #: a ``__FUNCTION__`` string of the EP
#: the functions whose literal pools are selected by position
ANCHOR_FUNCTIONS = re.compile(
    r"onnxruntime::qnn::(\w+::)*(MapDmaDataCallback|ReleaseDmaDataCallback|MapDmaData|ReleaseDmaData|UnmapFile)"
    r"|onnxruntime::qnn::\w*FileMapper::\w+"
)
#: literal anchors of files without a function-name string (the RPCMem library loader)
ANCHOR_LITERALS = ("Failed to initialize RPCMEM dynamic library handle: ",)
MAX_GAP = 320  #: more bytes than this between two strings: another object file's data
_PRINTABLE = re.compile(rb"[\t\x20-\x7e]{%d,}" % MIN_LEN)


def strings_at(data: bytes, min_len: int = MIN_LEN) -> list[tuple[int, str]]:
    """(offset, text) of every run of >= min_len printable ASCII characters or tabs."""
    pattern = _PRINTABLE if min_len == MIN_LEN else re.compile(rb"[\t\x20-\x7e]{%d,}" % min_len)
    return [(m.start(), m.group().decode("ascii")) for m in pattern.finditer(data)]


def by_terms(strings: Iterable[str], terms: Sequence[str] = SELECT_TERMS) -> set[str]:
    low = [t.lower() for t in terms]
    return {s for s in strings if any(t in s.lower() for t in low)}


def _is_anchor(text: str) -> bool:
    return ANCHOR_FUNCTIONS.fullmatch(text) is not None or text in ANCHOR_LITERALS


def _pool(found: Sequence[tuple[int, str]], i: int) -> list[int]:
    """Indexes of the strings around anchor ``i``, out to the nearest function name or gap on each side."""
    picked = [i]
    for step in (-1, 1):
        j = i
        while 0 <= j + step < len(found):
            near, far = sorted((found[j], found[j + step]))
            if far[0] - (near[0] + len(near[1])) > MAX_GAP:
                break
            j += step
            if FUNCTION_NAME.fullmatch(found[j][1]) and not _is_anchor(found[j][1]):
                break
            picked.append(j)
    return picked


def by_position(found: Sequence[tuple[int, str]]) -> set[str]:
    """The literal pools of the anchors (see the module docstring)."""
    return {found[j][1] for i, (_, text) in enumerate(found) if _is_anchor(text) for j in _pool(found, i)}


def select(found: Iterable[tuple[int, str]] | Iterable[str], terms: Sequence[str] = SELECT_TERMS) -> list[str]:
    """The file-mapping strings, sorted, unique: by terms, and by position when offsets are given."""
    items = list(found)
    if items and isinstance(items[0], tuple):
        return sorted(by_terms([t for _, t in items], terms) | by_position(items))
    return sorted(by_terms(items, terms))


def select_library(data: bytes) -> list[str]:
    """A provider library's file-mapping strings: by terms, and by position in a PE image only
    (MSVC's literal pools, where the rule was proven): GCC's .rodata has no such pools, and a
    pool there ran across 3 304 strings of the Linux aarch64 library."""
    found = strings_at(data)
    return select(found if data[:2] == b"MZ" else [t for _, t in found])
