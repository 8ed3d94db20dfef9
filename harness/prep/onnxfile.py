"""Reading a user's ONNX file, and ORT's errors in one line: every problem an InputError naming the file."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness.core.errors import InputError


def external_data_files(path: Path, model: Any, label: str | None = None) -> list[Path]:
    """Every external-data file the model reads, resolved and checked by `containment` before anything opens it."""
    from harness.prep.containment import external_refs

    return sorted({ref.path for ref in external_refs(Path(path), model, label or f"--model {path}")})


def load_onnx(path: Path, *, external_data: bool = True, label: str = "--model") -> Any:
    """The model (with its external data when asked); InputError for anything not a readable model."""
    import onnx
    from onnx.external_data_helper import load_external_data_for_model

    from harness.core.inputfiles import ONNX_MAX_BYTES, read_bytes_bounded
    from harness.prep.graphs import refuse_duplicate_initializers, refuse_non_text_names

    path = Path(path)
    if path.is_dir():
        raise InputError(f"{label} {path}: a folder, not an ONNX file")
    if not path.exists():
        raise InputError(f"{label} {path}: model file not found")
    data = read_bytes_bounded(path, label, ONNX_MAX_BYTES)
    try:
        model = onnx.load_model_from_string(data)
    except Exception as err:  # protobuf raises several unrelated types
        raise InputError(f"{label} {path}: not a readable ONNX model ({type(err).__name__})") from None
    del data
    refuse_non_text_names(model, f"{label} {path}")  # before anything uses a name
    external_data_files(path, model, f"{label} {path}")  # every path it names checked, before any use
    refuse_duplicate_initializers(model, f"{label} {path}")
    if not model.graph.node:  # an empty file, or bytes that happen to parse as an empty message
        raise InputError(f"{label} {path}: not an ONNX model (no graph nodes): no node assigned to QNN or any other EP")
    if not external_data:
        return model
    try:
        load_external_data_for_model(model, str(path.parent))
    except FileNotFoundError as err:
        raise InputError(f"{label} {path}: external data missing ({err.filename or err})") from None
    except Exception as err:  # onnx raises ValidationError, OSError, ValueError...
        raise InputError(f"{label} {path}: cannot load its external data ({first_line(err)})") from None
    return model


def first_line(err: BaseException) -> str:
    """The first line of an exception's text (ORT and onnx put whole reports in theirs)."""
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__


def ort_reason(err: BaseException | str) -> str:
    """The first line of an ORT error without its status prefix."""
    import re

    text = err if isinstance(err, str) else first_line(err)
    text = re.sub(r"^\[ONNXRuntimeError\]\s*:\s*\d+\s*:\s*\w+\s*:\s*", "", text).strip()
    return _without_source_location(text)


def _without_source_location(text: str) -> str:
    """Drop the source location part of an ORT enforce message."""
    import re

    match = re.search(r"\S+\.(?:cc|cpp|h):\d+ ", text)
    if not match:
        return text
    depth, end = 0, None
    for i in range(match.end(), len(text)):
        if text[i] == "(":
            depth += 1
        elif text[i] == ")":
            depth -= 1
            if depth == 0:
                end = i + 1
                break
    if end is None:
        return text
    return (text[: match.start()] + text[end:].lstrip()).strip()
