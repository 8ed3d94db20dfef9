"""The targets the harness measures, one module each behind the `Target` interface.

Adding a target is one new module defining ``TARGET = MyTarget()`` (a `harness.targets.base.Target`)
plus one line in `_MODULES` below: the command line, the runner, the worker, the pytest plugin
and the reports pick it up from here. Modules are imported only when their target is used, so
listing the targets stays cheap.
"""

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
    """Every target's own version keys (metadata ``env`` key -> what reports call it), in the
    order of `NAMES`: the generic layers list onnxruntime, then these, then the machine's."""
    labels: dict[str, str] = {}
    for target in all_targets():
        labels.update(target.version_keys())
    return labels


__all__ = ["DEFAULT", "NAMES", "Target", "TargetOption", "all_targets", "get_target", "version_labels"]
