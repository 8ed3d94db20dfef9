"""The declared shape of ``metadata.json``, checked whole before use (None allowed; undeclared entries unread)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from .errors import InputError

SCALAR = (str, int, float, bool)  #: A scalar JSON value: what the free-form entries (env, target options...) may hold.
MAX_ITEMS = 4096  #: The longest list or mapping any entry may hold (64 process counts, some hundred gates).


class ListOf:
    """A JSON list whose items all have one shape."""

    def __init__(self, item: Any, max_items: int = MAX_ITEMS) -> None:
        self.item, self.max_items = item, max_items


class MapOf:
    """A JSON object with free keys (strings) whose values all have one shape."""

    def __init__(self, value: Any, max_items: int = MAX_ITEMS) -> None:
        self.value, self.max_items = value, max_items


class Required:
    """An entry that must be there and not null (a gate without its expression is no gate)."""

    def __init__(self, spec: Any) -> None:
        self.spec = spec


OTHERS = "*"  #: In a record (a dict spec), the shape of every key it does not declare.
ANY = object()  #: Any JSON value nested at most a few levels (the run folder's JSON depth is bounded on read).
OPTION = object()  #: A scalar, or a list/mapping of scalars (target options such as ``--fault``'s counts).

RUN: dict[str, Any] = {
    "run_id": str,
    "target": str,
    "peer": str,
    "model": str,
    "models": ListOf(str),
    "started": str,
    "finished": str,
    "command": str,
    "page_cache": str,
    "labels": MapOf(str),
    "target_options": MapOf(OPTION),
    "session": {"config": MapOf(str), "intra_op_threads": int, "provider_options": MapOf(str)},
    "unverified_session_config": ListOf(str),
    "inputs": {"shapes": MapOf(ListOf(int)), "free_dims": MapOf(int), "values": MapOf(str)},
    "processes": ListOf(int, 64),
    "modes": ListOf(str, 8),
    "repeat": int,
    "sessions_per_process": int,
    "runs": int,
    "warmup": int,
    "concurrency": int,
    "workload": str,
    "generate": {"prompt_ids": ListOf(int, 1_000_000), "new_tokens": int, "expected_ids": ListOf(int, 1_000_000)},
    "weights_bytes": int,
    "weights_file_bytes": int,
    "model_fingerprint": str,
    "gathered_weights_bytes": int,
    "duration_s": float,
    "project_to": {"sessions": int, "weights_bytes": int},
}
METADATA: dict[str, Any] = {
    "format_version": int,
    "status": str,
    "run": RUN,
    "gates": ListOf(str),
    "default_gates": ListOf({"expr": Required(str), "why": str}),
    "target_notes": ListOf(str),
    "env": {
        **dict.fromkeys(
            ("os", "system", "arch", "cpu", "python", "onnxruntime", "numpy", "hostname", "git_commit"), str
        ),
        "cpu_count": int,
        "ram_bytes": int,
        "version_labels": MapOf(str),
        OTHERS: OPTION,  # a target's own version keys (onnxruntime_qnn, qnn_sdk...)
    },
}


def _kind(value: Any) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean"}.get(
        type(value), "a number" if isinstance(value, int | float) else type(value).__name__
    )


def _expected(spec: Any) -> str:
    if isinstance(spec, dict) or isinstance(spec, MapOf):
        return "an object"
    if isinstance(spec, ListOf):
        return "a list"
    if spec is int:
        return "an integer"
    if spec is float:
        return "a number"
    if spec is str:
        return "a string"
    return "a number, string or boolean, or a list or object of them"


def _scalar_ok(value: Any, spec: Any) -> bool:
    if spec is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if spec is float:
        return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    if spec is str:
        return isinstance(value, str)
    if spec is OPTION:
        if isinstance(value, list):
            return all(isinstance(v, SCALAR) for v in value)
        if isinstance(value, dict):
            return all(isinstance(v, SCALAR) or v is None for v in value.values())
        return isinstance(value, SCALAR) and not (isinstance(value, float) and not math.isfinite(value))
    return spec is ANY


def check_value(path: Path | str, where: str, value: Any, spec: Any) -> None:
    """InputError unless ``value`` has the shape ``spec`` declares."""
    if isinstance(spec, Required):
        if value is None:
            raise InputError(f"{path}: {where} is missing or null, expected {_expected(spec.spec)}")
        spec = spec.spec
    if value is None:
        return
    if isinstance(spec, dict | MapOf | ListOf):
        kind = list if isinstance(spec, ListOf) else dict
        if not isinstance(value, kind):
            raise InputError(f"{path}: {where} is {_kind(value)}, expected {_expected(spec)}")
        if not isinstance(spec, dict) and len(value) > spec.max_items:
            raise InputError(f"{path}: {where} has {len(value)} items, more than the {spec.max_items} allowed")
        if isinstance(spec, ListOf):
            for index, item in enumerate(value):
                check_value(path, f"{where}[{index}]", item, Required(spec.item))
        elif isinstance(spec, MapOf):
            for item in value.values():
                check_value(path, f"{where}.<entry>", item, spec.value)
        else:
            for key, item_spec in spec.items():
                if key != OTHERS:
                    check_value(path, f"{where}.{key}" if where else key, value.get(key), item_spec)
            if OTHERS in spec:
                for key in value.keys() - spec.keys():
                    check_value(path, f"{where}.<entry>", value[key], spec[OTHERS])
        return
    if not _scalar_ok(value, spec):
        raise InputError(f"{path}: {where} is {_kind(value)}, expected {_expected(spec)}")


def check_metadata(path: Path | str, meta: Any) -> None:
    """InputError unless ``meta`` is an object whose every declared entry has its declared shape."""
    if not isinstance(meta, dict):
        raise InputError(f"{path}: is {_kind(meta)}, expected a JSON object")
    check_value(path, "", meta, METADATA)


def platform_name(env: dict[str, Any]) -> str | None:
    """ "Windows (ARM64)", "Windows under Wine 8.0 (AMD64)"; None off Windows (the figures are Linux's)."""
    if env.get("system") != "Windows":
        return None
    wine = env.get("wine")
    return f"{f'Windows under Wine {wine}' if wine else 'Windows'} ({env.get('arch') or 'unknown arch'})"


def platform_line(env: dict[str, Any]) -> str | None:
    """A Windows run's one line naming Windows (and Wine) and the figures it measures (None
    elsewhere): its memory figures are not Linux's, and under Wine fewer still."""
    where = platform_name(env)
    if where is None:
        return None
    line = (
        f"platform: {where}: private bytes (commit charge) show the "
        "saving; no PSS on Windows; the working set (RSS) counts shared file pages in every process"
    )
    if env.get("wine"):
        line += (
            "; Wine gives no USS or private working set, and ORT's 'Failed to create DXGI factory.' "
            "is its GPU probe finding no DirectX device there"
        )
    return line
