"""One error tree for the harness (as `mapper_impl._common` has one): every exception class
of `harness` is declared in `harness/core/errors.py` under `HarnessError`, and each branch
carries the exit code the command line gives it."""

from __future__ import annotations

import ast
from pathlib import Path

from harness.core import errors

ROOT = Path(__file__).resolve().parents[2]


def _exception_classes(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            bases = [b.id if isinstance(b, ast.Name) else getattr(b, "attr", "") for b in node.bases]
            if any(b.endswith(("Error", "Exception", "Failed", "Unreachable", "Entry")) for b in bases):
                found.append(node.name)
    return found


def test_every_harness_exception_is_declared_in_the_error_tree():
    elsewhere = {
        str(path.relative_to(ROOT)): names
        for path in sorted((ROOT / "harness").rglob("*.py"))
        if path != ROOT / "harness" / "core" / "errors.py" and (names := _exception_classes(path))
    }
    assert elsewhere == {}


def test_every_error_is_a_harness_error_with_its_exit_code():
    declared = [getattr(errors, name) for name in _exception_classes(ROOT / "harness" / "core" / "errors.py")]
    assert declared and all(issubclass(cls, errors.HarnessError) for cls in declared)
    assert errors.InputError.exit_code == errors.EXIT_USAGE == 2
    assert errors.RunFailed.exit_code == errors.EXIT_FAILED == 1
    assert issubclass(errors.InputError, ValueError)  # callers that catch ValueError keep working
    assert issubclass(errors.QnnUnavailableError, RuntimeError)
