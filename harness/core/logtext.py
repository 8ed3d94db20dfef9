"""A worker's log as text: on Windows ORT's ``std::wclog`` writes UTF-16LE lines between Python's UTF-8 ones."""

from __future__ import annotations

_WIDE_NEWLINE = b"\n\x00"


def decode_log(data: bytes) -> str:
    """``data`` as text: UTF-8, each UTF-16LE line (found by its NULs) decoded as such; never raises."""
    parts: list[str] = []
    pos = 0
    while (nul := data.find(b"\x00", pos)) != -1:
        start = max(pos, nul - 1)
        end = start
        while end + 1 < len(data):
            unit = data[end : end + 2]
            end += 2
            if unit == _WIDE_NEWLINE:
                break
        else:
            end = len(data)
        parts.append(data[pos:start].decode("utf-8", errors="replace"))
        parts.append(data[start:end].decode("utf-16-le", errors="replace"))
        pos = end
    parts.append(data[pos:].decode("utf-8", errors="replace"))
    return "".join(parts)
