"""The targets, one module each behind `Target`: a new one is a module with ``TARGET`` plus a line in `_MODULES`."""

from __future__ import annotations

import importlib

from .base import Target, TargetOption

#: target name -> module defining ``TARGET``.
_MODULES = {
    "cpu": "harness.targets.cpu",
    "ort-native": "harness.targets.ort_native",
    "qnn": "harness.targets.qnn",
    "genai": "harness.targets.genai",
}
NAMES: tuple[str, ...] = tuple(_MODULES)
DEFAULT = "cpu"


def get_target(name: str) -> Target:
    """The target called ``name``; KeyError for an unknown name (the CLI checks choices first)."""
    return importlib.import_module(_MODULES[name]).TARGET


def all_targets() -> list[Target]:
    return [get_target(name) for name in NAMES]


def version_labels() -> dict[str, str]:
    """Every target's own version keys (metadata ``env`` key -> report label), in the order of `NAMES`."""
    labels: dict[str, str] = {}
    for target in all_targets():
        labels.update(target.version_keys())
    return labels


__all__ = ["DEFAULT", "NAMES", "Target", "TargetOption", "all_targets", "get_target", "version_labels"]
