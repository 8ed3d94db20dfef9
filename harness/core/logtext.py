"""A worker's log as text, whichever way each writer encoded its lines: on Windows ORT's
``std::wclog`` sink writes UTF-16LE into the binary-mode stderr CPython leaves, between
Python's UTF-8 lines. UTF-8 has no NUL, so the first NUL starts a wide run, decoded up to its
``L"\\n"``; on Linux and macOS this is a plain UTF-8 decode."""

from __future__ import annotations

_WIDE_NEWLINE = b"\n\x00"


def decode_log(data: bytes) -> str:
    """``data`` as text: UTF-8, each UTF-16LE line (found by its NULs) decoded as such; never raises."""
    parts: list[str] = []
    pos = 0
    while (nul := data.find(b"\x00", pos)) != -1:
        start = max(pos, nul - 1)
        end = _wide_end(data, start)
        parts.append(data[pos:start].decode("utf-8", errors="replace"))
        parts.append(data[start:end].decode("utf-16-le", errors="replace"))
        pos = end
    parts.append(data[pos:].decode("utf-8", errors="replace"))
    return "".join(parts)


def _wide_end(data: bytes, start: int) -> int:
    """Just past the first ``L"\\n"`` on a code-unit boundary from ``start`` (searched, not
    stepped unit by unit: that took 0.45 s per MiB), or the end of ``data``."""
    at = start
    while (hit := data.find(_WIDE_NEWLINE, at)) != -1:
        if (hit - start) % 2 == 0:
            return hit + 2
        at = hit + 1
    return len(data)
