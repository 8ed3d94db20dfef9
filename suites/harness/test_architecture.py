"""The layering the code relies on, checked on the source (imports inside functions included):

- `harness.core` (schema, tables, summary, gates, notes, verdict) is the bottom: it imports
  nothing else of the project, so the runner, the reports and the tests share one meaning.
- `reports` presents judged runs: it may use `harness.core` and nothing else of `harness`
  (never the runner, the worker or the targets).
- Outside `harness/cli.py`, the composition root, `harness` never imports `reports`.
- Every registered target is one module exposing ``TARGET``, a `Target` named as registered.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def imported_modules(path: Path) -> set[str]:
    """Absolute names of every module ``path`` imports, relative imports resolved."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = ".".join(path.relative_to(ROOT).with_suffix("").parts[:-1])
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                name = ".".join(base + ([node.module] if node.module else []))
            else:
                name = node.module or ""
            found.add(name)
            found.update(f"{name}.{alias.name}" for alias in node.names)
    return found


def modules_under(folder: str) -> list[Path]:
    return sorted((ROOT / folder).rglob("*.py"))


def _violations(files: list[Path], forbidden) -> list[str]:
    return [
        f"{path.relative_to(ROOT)} imports {name}"
        for path in files
        for name in sorted(imported_modules(path))
        if forbidden(name)
    ]


def test_core_is_the_bottom_layer():
    def outside_core(name: str) -> bool:
        return (name.startswith(("harness.", "reports")) and not name.startswith("harness.core")) or name == "reports"

    assert _violations(modules_under("harness/core"), outside_core) == []


def test_reports_use_only_the_core_of_the_harness():
    def runner_side(name: str) -> bool:
        return name.startswith("harness.") and not name.startswith("harness.core")

    assert _violations(modules_under("reports"), runner_side) == []


def test_only_the_command_line_imports_reports():
    files = [p for p in modules_under("harness") if p != ROOT / "harness" / "cli.py"]
    assert _violations(files, lambda name: name == "reports" or name.startswith("reports.")) == []


def test_the_checker_sees_imports_inside_functions(tmp_path):
    """The rules above would pass vacuously if lazy imports were missed."""
    names = imported_modules(ROOT / "harness" / "cli.py")
    assert "reports" in names  # imported inside cmd_run/report_run only
    assert "harness.runner.sweep.execute" in names


@pytest.mark.parametrize("name", __import__("harness.targets", fromlist=["NAMES"]).NAMES)
def test_each_target_is_one_module_behind_the_interface(name):
    from harness.targets import get_target
    from harness.targets.base import Target

    target = get_target(name)
    assert isinstance(target, Target) and target.name == name
    assert target.summary
    flags = [o.flag for o in target.options]
    assert len(flags) == len(set(flags))
