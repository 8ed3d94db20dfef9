"""The layering the code relies on, checked on the source (imports inside functions included):

- `harness.core` (schema, tables, summary, gates, notes, verdict) is the bottom: it imports
  nothing else of the project, so the runner, the reports and the tests share one meaning.
- `reports` presents judged runs: it may use `harness.core` and nothing else of `harness`
  (never the runner, the worker or the targets).
- Outside `harness/cli.py` and `harness/publish.py`, the composition roots, `harness` never imports
  `reports`.
- No import circles between modules of `harness/`, `reports/` and `mapper_impl/`.
- Every registered target is one module exposing ``TARGET``, a `Target` named as registered.
- One Windows bindings module, `mapper_impl/_winapi.py`: no other module of the project (or
  the CI scripts) loads a Windows DLL, declares a function's argtypes/restype, or uses
  ``ctypes.wintypes``. It lives in the library (the harness imports it; the library imports
  nothing of the harness).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _import_targets(path: Path):
    """Per import statement, the absolute names it reaches: ``import a.b`` gives ``a.b``;
    ``from a import x, y`` gives ``a`` and ``a.x``, ``a.y`` (relative imports resolved)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = ".".join(path.relative_to(ROOT).with_suffix("").parts[:-1])
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, [alias.name]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                name = ".".join(base + ([node.module] if node.module else []))
            else:
                name = node.module or ""
            yield name, [f"{name}.{alias.name}" for alias in node.names]


def imported_modules(path: Path) -> set[str]:
    """Absolute names of every module ``path`` imports, relative imports resolved."""
    found = set()
    for name, names in _import_targets(path):
        found.add(name)
        found.update(names)
    return found


PROJECT = ("harness", "reports", "mapper_impl")


def project_modules() -> dict[str, Path]:
    """Every module of the project by dotted name (a package by its own name)."""
    found = {}
    for folder in PROJECT:
        for path in modules_under(folder):
            parts = path.relative_to(ROOT).with_suffix("").parts
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def import_graph() -> dict[str, set[str]]:
    """Module -> the project modules it imports, lazy imports and ``TYPE_CHECKING`` ones included.

    ``from pkg import sub`` reaches the submodule ``pkg.sub`` (not ``pkg``'s ``__init__``, which
    Python runs first in any case); ``from pkg import name`` of a non-module reaches ``pkg``.
    """
    modules = project_modules()

    def owner(name: str) -> str | None:
        parts = name.split(".")
        while parts and ".".join(parts) not in modules:
            parts.pop()
        return ".".join(parts) or None

    graph = {}
    for module, path in modules.items():
        reached = {owner(name) for _, names in _import_targets(path) for name in names}
        graph[module] = {name for name in reached if name and name != module}
    return graph


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle (as a closed path ``a -> b -> a``) per strongly connected group of modules."""
    cycles, state = [], {}

    def visit(node: str, path: list[str]) -> None:
        state[node] = "open"
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == "open":
                cycles.append(path[path.index(nxt) :] + [nxt])
            elif nxt not in state:
                visit(nxt, path)
        path.pop()
        state[node] = "done"

    for node in sorted(graph):
        if node not in state:
            visit(node, [])
    return cycles


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
    roots = {ROOT / "harness" / "cli.py", ROOT / "harness" / "publish.py"}
    files = [p for p in modules_under("harness") if p not in roots]
    assert _violations(files, lambda name: name == "reports" or name.startswith("reports.")) == []


def test_the_checker_sees_imports_inside_functions(tmp_path):
    """The rules above would pass vacuously if lazy imports were missed."""
    names = imported_modules(ROOT / "harness" / "publish.py")
    assert "reports" in names  # imported inside report_run and friends only
    names = imported_modules(ROOT / "harness" / "cli.py")
    assert "harness.runner.sweep.execute" in names


def test_no_import_circles():
    """A circle makes import order matter and hides which layer owns what; none is allowed."""
    cycles = find_cycles(import_graph())
    assert not cycles, "import circles:\n" + "\n".join(" -> ".join(cycle) for cycle in cycles)


def test_the_circle_finder_finds_circles():
    """The test above would pass vacuously if the finder missed circles."""
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert find_cycles(graph) == [["a", "b", "c", "a"]]
    assert find_cycles({"a": {"b"}, "b": set()}) == []
    assert "harness.runner.sweep" in import_graph()["harness.cli"]


@pytest.mark.parametrize("name", __import__("harness.targets", fromlist=["NAMES"]).NAMES)
def test_each_target_is_one_module_behind_the_interface(name):
    from harness.targets import get_target
    from harness.targets.base import Target

    target = get_target(name)
    assert isinstance(target, Target) and target.name == name
    assert target.summary
    flags = [o.flag for o in target.options]
    assert len(flags) == len(set(flags))


#: The one module that may declare Windows functions, and what the rule covers.
BINDINGS = ROOT / "mapper_impl" / "_winapi.py"
_DLL_LOADERS = {"WinDLL", "windll", "OleDLL", "oledll"}


def windows_declarations(source: str) -> list[str]:
    """Where ``source`` loads a Windows DLL, declares a Windows function's signature (a
    CamelCase name, as every Win32 function is; libc's lowercase ones are the POSIX modules'
    own) or uses wintypes: ``line: what`` for each."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store) and node.attr in ("argtypes", "restype"):
            owner = node.value
            name = owner.attr if isinstance(owner, ast.Attribute) else getattr(owner, "id", "")
            if name[:1].isupper():
                found.append(f"{node.lineno}: sets {name}.{node.attr}")
        elif isinstance(node, ast.Attribute) and node.attr in _DLL_LOADERS | {"wintypes"}:
            found.append(f"{node.lineno}: uses ctypes.{node.attr}")
        elif isinstance(node, ast.Name) and node.id in _DLL_LOADERS:
            found.append(f"{node.lineno}: uses {node.id}")
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("ctypes"):
            names = {a.name for a in node.names} | {node.module or ""}
            if names & (_DLL_LOADERS | {"wintypes", "ctypes.wintypes"}):
                found.append(f"{node.lineno}: imports {', '.join(sorted(names))}")
        elif isinstance(node, ast.Import) and any(a.name == "ctypes.wintypes" for a in node.names):
            found.append(f"{node.lineno}: imports ctypes.wintypes")
    return found


def test_one_windows_bindings_module():
    """kernel32 and psapi are declared once, in `mapper_impl/_winapi.py` (issue 29 item 5: the
    mapper, the job object and the memory reads each declared their own, with different
    conventions): every other module goes through `_winapi.load` / `declare`."""
    files = [*modules_under("harness"), *modules_under("reports"), *modules_under("mapper_impl")]
    files += [ROOT / "qnn_fmw_harness_plugin.py", *sorted((ROOT / ".ci").glob("*.py"))]
    offenders = {
        str(path.relative_to(ROOT)): found
        for path in files
        if path != BINDINGS and (found := windows_declarations(path.read_text(encoding="utf-8")))
    }
    assert offenders == {}, offenders
    assert windows_declarations(BINDINGS.read_text(encoding="utf-8")), "the bindings module declares them"


def test_the_bindings_checker_sees_every_way_to_declare():
    """The rule above would pass vacuously if the checker missed a way to declare a function."""
    cases = [
        "import ctypes\nk = ctypes.WinDLL('kernel32')",
        "from ctypes import WinDLL\nk = WinDLL('psapi')",
        "import ctypes\nk = ctypes.windll.kernel32",
        "from ctypes import wintypes",
        "import ctypes.wintypes",
        "def f(k):\n    k.OpenProcess.restype = None",
        "def f(k):\n    k.OpenProcess.argtypes = []",
        "def f(GetProcessMemoryInfo):\n    GetProcessMemoryInfo.argtypes = []",
    ]
    for case in cases:
        assert windows_declarations(case), case
    assert windows_declarations("import ctypes\nx = ctypes.c_uint32(1)\nprint(x.value)") == []
    assert windows_declarations("def f(libc):\n    libc.mmap.restype = None") == [], "POSIX libc is not Windows"
