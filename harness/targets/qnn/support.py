"""Which op keeps a model off the QNN EP, read from the EP's VERBOSE node-support lines."""

from __future__ import annotations

import re
from typing import Any

_FAILED = re.compile(
    r"Validation FAILED for \d+ nodes in OrtNodeUnit \((?P<unit>[^)]*)\)[^\n]*\n"
    r"\s*Operator type: (?P<op>\S+) Node name: ?(?P<name>.*?) Node index: (?P<index>\d+)[^\n]*\n"
    r"(?:\s*REASON : (?P<reason>[^\n]*))?"
)


def first_refused_op(log_text: str) -> str | None:
    """ "Acos (node 'a', index 0): Operators of type `Acos` are not supported by QNN EP", or None."""
    m = _FAILED.search(log_text)
    if m is None:
        return None
    name = m.group("name").strip()
    where = f"node {name!r}, index {m.group('index')}" if name else f"index {m.group('index')}"
    reason = (m.group("reason") or "").strip()
    reason = reason.split(f"{m.group('op')} node", 1)[0].strip() if reason else ""
    return f"{m.group('op')} ({where})" + (f": {reason}" if reason else "")


def log_node_support(so_factory: Any, src: str) -> None:
    """Open one session of ``src`` with the EP's verbose log; failures ignored (the compile's own error is reported)."""
    import onnxruntime as ort

    so = so_factory()
    so.log_severity_level = 0
    try:
        ort.InferenceSession(src, so)
    except Exception:  # only the log lines matter
        pass
