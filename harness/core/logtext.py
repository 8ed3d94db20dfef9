"""A worker's log as text, whichever way each writer encoded its lines.

Why: on Windows ONNX Runtime's default log sink is ``std::wclog`` (``WOStreamSink``,
onnxruntime/core/common/logging/sinks/clog_sink.h and ostream_sink.cc), and the UCRT's
``fputwc`` writes a wide character as its two bytes when the stream's descriptor is in binary
mode (ucrt stdio/fputwc.cpp). CPython puts descriptors 0-2 in binary mode at start-up
(``config_init_stdio``: ``_setmode(fileno(stderr), O_BINARY)``), and onnxruntime.dll shares
that C runtime with Python. So in a worker's log file the EP's lines (the platform gate, the
option echo, the mapping lines) are UTF-16LE between Python's own UTF-8 lines: read as UTF-8
they match nothing, and every verdict would be "unknown", on the ARM64 device as under Wine
(where the Wine lane found it).

`decode_log` reads both: UTF-8 has no NUL byte, so the first NUL marks the high byte of a
UTF-16LE code unit (ORT's lines start with the ASCII timestamp or an ESC colour code); the wide
run goes on unit by unit to the line's end (``L"\\n"``, ORT ends every message with it) and is
decoded as UTF-16LE. On Linux and macOS the log has no NUL and this is a plain UTF-8 decode.
"""

from __future__ import annotations

_WIDE_NEWLINE = b"\n\x00"


def decode_log(data: bytes) -> str:
    """``data`` (a log's bytes, or a segment of them) as text: UTF-8, with each UTF-16LE line
    decoded as such; undecodable bytes are replaced, never raised."""
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
