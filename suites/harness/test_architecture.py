"""The layering the code relies on, checked on the source (imports inside functions included):

- `harness.core` (schema, tables, summary, gates, notes, verdict) is the bottom: it imports
  nothing else of the project, so the runner, the reports and the tests share one meaning.
- `reports` presents judged runs: it may use `harness.core` and nothing else of `harness`
  (never the runner, the worker or the targets).
- Outside `harness/cli.py` and `harness/publish.py`, the composition roots, `harness` never imports
  `reports`.
- No import circles between modules of `harness/`, `reports/` and `mapper_impl/`.
- Every registered target is one module exposing ``TARGET``, a `Target` named as registered.
- Each vocabulary (modes, paths, EP states, feature states, gate statuses, verdicts, run
  statuses, page-cache states) is defined once, in `harness.core.vocab`: outside it, none of
  their values is written as a literal where it is compared, matched, used as a key or index,
  assigned to a field of that vocabulary or spelled out again as a tuple (found with ``ast``;
  the message names the enum member to use).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from harness.core import vocab

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


# ------------------------------------------------------------------ one definition per vocabulary

#: The vocabularies whose values may not be written as literals. `PeakPhase` and `Tone` are
#: left out: their words ("load", "create", "warn") are everyday words of other vocabularies
#: (a compile child's stages, pytest-xdist's --dist, note kinds), so a literal of theirs says
#: nothing about which vocabulary it belongs to.
CHECKED_VOCABULARIES = (
    vocab.Mode,
    vocab.PathTaken,
    vocab.EpState,
    vocab.FeatureStatus,
    vocab.GateStatus,
    vocab.Verdict,
    vocab.RunStatus,
    vocab.PageCache,
)
#: Names of fields and variables that hold a vocabulary value: a literal assigned to one (or
#: passed as that keyword) is that vocabulary's value spelled out.
VOCABULARY_FIELDS = {"mode", "modes", "path_taken", "ep_file_mapping", "page_cache", "status", "state", "verdict"}
#: (file, value, how) of literals that are another vocabulary's word, each with why.
LITERAL_ALLOW: dict[tuple[str, str, str], str] = {
    (
        "harness/core/composition.py",
        "contended",
        "used as a key",
    ): "the SummaryRow column `contended`, not a gate status",
    ("harness/prep/sessions.py", "disabled", "used as a key"): "ORT's graph optimization level, not an EP state",
    (
        "harness/targets/qnn/eplog.py",
        "ep-error",
        "used as an index",
    ): "a log pattern's effect (eplog_patterns._EFFECTS)",
    (
        "harness/targets/qnn/eplog.py",
        "ep-disabled",
        "used as an index",
    ): "a log pattern's effect (eplog_patterns._EFFECTS)",
}


def _members(value: str, vocabularies=CHECKED_VOCABULARIES) -> list[str]:
    return [f"{v.__name__}.{m.name}" for v in vocabularies for m in v if m.value == value]


def _strings(node: ast.AST):
    """String constants of an expression: itself, or the elements of a literal tuple/list/set."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        yield node
    elif isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        for element in node.elts:
            yield from _strings(element)


def _field_name(target: ast.AST) -> str | None:
    if isinstance(target, ast.Attribute):
        return target.attr
    if isinstance(target, ast.Name):
        return target.id
    if isinstance(target, ast.Subscript) and isinstance(target.slice, ast.Constant):
        return str(target.slice.value)
    return None


def _assigned(node: ast.Assign | ast.AnnAssign) -> list[ast.Constant]:
    """Literals assigned to a vocabulary field (``row.path_taken = "heap"``, ``a.state, b = "x", 1``)."""
    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
    found = []
    for target in targets:
        if isinstance(target, ast.Tuple) and isinstance(node.value, ast.Tuple):
            pairs = zip(target.elts, node.value.elts, strict=False)
        else:
            pairs = [(target, node.value)]
        found += [c for t, v in pairs if v is not None and _field_name(t) in VOCABULARY_FIELDS for c in _strings(v)]
    return found


def _spelled_out(node: ast.AST) -> tuple[list[ast.Constant], list[str]]:
    """A literal tuple/list/set of two or more strings, all values of one vocabulary: that
    vocabulary written again (and the vocabularies it copies)."""
    if not isinstance(node, (ast.Tuple, ast.List, ast.Set)) or len(node.elts) < 2:
        return [], []
    if not all(isinstance(e, ast.Constant) and isinstance(e.value, str) for e in node.elts):
        return [], []
    values = {e.value for e in node.elts}
    copied = [v.__name__ for v in CHECKED_VOCABULARIES if values <= set(v.values())]
    return (list(node.elts), copied) if copied else ([], [])


def _uses(node: ast.AST) -> list[tuple[str, ast.Constant]]:
    """(how, literal) of the string literals ``node`` uses as a vocabulary value."""
    if isinstance(node, ast.Compare):
        return [("compared", c) for side in (node.left, *node.comparators) for c in _strings(side)]
    if isinstance(node, ast.MatchValue):
        return [("matched", c) for c in _strings(node.value)]
    if isinstance(node, ast.Subscript):
        return [("used as an index", c) for c in _strings(node.slice)]
    if isinstance(node, ast.Dict):
        return [("used as a key", c) for key in node.keys if key is not None for c in _strings(key)]
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args:
        if node.func.attr in ("get", "pop", "setdefault"):
            return [("used as a key", c) for c in _strings(node.args[0])]
    if isinstance(node, ast.keyword) and node.arg in VOCABULARY_FIELDS:
        return [("assigned", c) for c in _strings(node.value)]
    if isinstance(node, (ast.Assign, ast.AnnAssign)):
        return [("assigned", c) for c in _assigned(node)]
    return []


def vocabulary_literals(source: str, where: str) -> list[str]:
    """One line per vocabulary value written as a literal in ``source``, naming the member to use."""
    found: dict[tuple[int, int], str] = {}
    for node in ast.walk(ast.parse(source)):
        spelled, copied = _spelled_out(node)
        for const in spelled:
            names = [f"{name}.{vocab_member(name, const.value)}" for name in copied]
            found.setdefault(
                (const.lineno, const.col_offset),
                f"{where}:{const.lineno}: {const.value!r} spelled out "
                f"again: use {' or '.join(names)} (harness.core.vocab)",
            )
        for how, const in _uses(node):
            names = _members(const.value)
            if names and (where, const.value, how) not in LITERAL_ALLOW:
                found.setdefault(
                    (const.lineno, const.col_offset),
                    f"{where}:{const.lineno}: {const.value!r} {how} as a literal: use {' or '.join(names)} "
                    "(harness.core.vocab)",
                )
    return [found[key] for key in sorted(found)]


def vocab_member(vocabulary: str, value: str) -> str:
    return next(m.name for m in getattr(vocab, vocabulary) if m.value == value)


def _checked_sources() -> list[Path]:
    files = [*modules_under("harness"), *modules_under("reports"), ROOT / "qnn_fmw_harness_plugin.py"]
    return [p for p in files if p != ROOT / "harness" / "core" / "vocab.py"]


def test_vocabulary_values_are_never_literals_outside_the_vocabulary_module():
    """ "mapped" compared in twelve files, verdict.py's ("active", "n/a", None, "") against
    schema.MAPPED_STATES: a vocabulary spelled out in many places drifts. Each is a string
    enum of harness.core.vocab; a member compares equal to its string, so code written with
    literals still works, but this test names each literal and the member to use instead."""
    found = []
    for path in _checked_sources():
        found += vocabulary_literals(path.read_text(encoding="utf-8"), path.relative_to(ROOT).as_posix())
    assert not found, "vocabulary values written as literals:\n" + "\n".join(found)


def test_the_literal_allow_list_has_no_stale_entry():
    """An allowed literal that is gone (or became a member) leaves a hole: the list stays exact."""
    used = set()
    for path in _checked_sources():
        where = path.relative_to(ROOT).as_posix()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            used |= {(where, c.value, how) for how, c in _uses(node)}
    assert set(LITERAL_ALLOW) <= used, sorted(set(LITERAL_ALLOW) - used)


def test_the_literal_check_finds_literals():
    """The check above would pass vacuously if it missed the forms vocabularies are written in."""
    source = """
if row.mode == "mapped" or "heap" in modes:
    pass
match g.status:
    case "inconclusive":
        pass
x = top["heap"], counts.get("retried"), {"unavailable": 1}
row.path_taken = "fallback"
Row(verdict="incomplete")
ORDER = ("active", "unknown", "retried")
status = "complete"
fine = ("load", "run") + ("mapped", "other")
if name == "n/a_column":
    pass
"""
    lines = vocabulary_literals(source, "x.py")
    shown = "\n".join(lines)
    for value, member in [
        ("mapped", "Mode.MAPPED"),
        ("heap", "Mode.HEAP"),
        ("inconclusive", "GateStatus.INCONCLUSIVE"),
        ("retried", "EpState.RETRIED"),
        ("unavailable", "EpState.UNAVAILABLE"),
        ("fallback", "PathTaken.FALLBACK"),
        ("incomplete", "Verdict.INCOMPLETE"),
        ("complete", "RunStatus.COMPLETE"),
    ]:
        assert any(f"{value!r}" in line and member in line for line in lines), (value, shown)
    assert "x.py:10: 'active' spelled out again: use EpState.ACTIVE" in shown, shown
    assert "'load'" not in shown and "'other'" not in shown and "n/a_column" not in shown, shown
    assert len([line for line in lines if "'mapped'" in line]) == 1, shown  # ("mapped", "other") is no vocabulary
