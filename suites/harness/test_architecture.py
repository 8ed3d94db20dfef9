"""The layering the code relies on, checked on the source (imports inside functions included):

- `harness.core` (schema, tables, summary, gates, notes, verdict) is the bottom: it imports
  nothing else of the project, so the runner, the reports and the tests share one meaning.
- `reports` presents judged runs: it may use `harness.core` and nothing else of `harness`
  (never the runner, the worker or the targets).
- Outside `harness/cli.py` and `harness/publish.py`, the composition roots, `harness` never imports
  `reports`.
- No import circles between modules of `harness/`, `reports/` and `mapper_impl/`.
- Imports between the runner and the targets run one way: what both need (the run's options,
  the worker spec, the phase hook, spawning a child) is `harness.contract`, below both; a
  target never reaches the runner, even through another module; the runner reaches the targets
  only through their registry (`harness.targets`) and interface (`harness.targets.base`).
- No module imports a private name (``_x``) of another package.
- A run option is declared once, on `RunOptions`: no parser of the harness or the pytest plugin
  spells a run option's flag (or its ``--fmw-`` form) again; ``bench``'s and the plugin's take
  the declared types; the plugin's target list is the registry's.
- Every registered target is one module exposing ``TARGET``, a `Target` named as registered.
- Each vocabulary (modes, paths, EP states, feature states, gate statuses, verdicts, run
  statuses, page-cache states) is defined once, in `harness.core.vocab`: outside it, none of
  their values is written as a literal where it is compared, matched, used as a key or index,
  assigned to a field of that vocabulary or spelled out again as a tuple (found with ``ast``;
  the message names the enum member to use).
- One Windows bindings module, `mapper_impl/_winapi.py`: no other module of the project (or
  the CI scripts) loads a Windows DLL, declares a function's argtypes/restype, or uses
  ``ctypes.wintypes``. It lives in the library (the harness imports it; the library imports
  nothing of the harness).
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
    # the fork server preloads what the command line imports (its template compiled once)
    roots = {ROOT / "harness" / "cli.py", ROOT / "harness" / "publish.py", ROOT / "harness" / "forkserver.py"}
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


def package_of(module: str) -> str:
    """The package a module belongs to: ``harness.<sub>`` (a subpackage, or a top-level module of
    its own, as ``harness.cache``), ``reports``, ``mapper_impl``."""
    parts = module.split(".")
    return ".".join(parts[:2]) if parts[0] == "harness" and len(parts) > 1 else parts[0]


def package_graph(modules: dict[str, set[str]]) -> dict[str, set[str]]:
    """The import graph between packages (`package_of`); ``harness`` itself (its ``__init__``) is
    left out: every module of it is imported through it."""
    graph: dict[str, set[str]] = {}
    for module, reached in modules.items():
        mine = package_of(module)
        graph.setdefault(mine, set()).update(package_of(n) for n in reached if package_of(n) not in (mine, "harness"))
    return graph


def test_no_package_circles():
    """A circle between packages through imports inside functions is a circle still (issue 41:
    ``contract`` <-> ``prep``, ``cache`` <-> ``prep``): each package reaches the others one way."""
    cycles = find_cycles(package_graph(import_graph()))
    assert not cycles, "package circles:\n" + "\n".join(" -> ".join(cycle) for cycle in cycles)


def test_the_circle_finder_finds_circles():
    """The test above would pass vacuously if the finder missed circles."""
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert find_cycles(graph) == [["a", "b", "c", "a"]]
    assert find_cycles({"a": {"b"}, "b": set()}) == []
    assert "harness.runner.sweep" in import_graph()["harness.cli"]
    modules = {
        "harness.prep.a": {"harness.contract.b"},
        "harness.contract.b": {"harness.prep.c"},
        "harness.prep.c": set(),
    }
    assert find_cycles(package_graph(modules)) == [["harness.contract", "harness.prep", "harness.contract"]]


@pytest.mark.parametrize("name", __import__("harness.targets", fromlist=["NAMES"]).NAMES)
def test_each_target_is_one_module_behind_the_interface(name):
    from harness.targets import get_target
    from harness.targets.base import Target

    target = get_target(name)
    assert isinstance(target, Target) and target.name == name
    assert target.summary
    flags = [o.flag for o in target.options]
    assert len(flags) == len(set(flags))


# ----------------------------------------------------------------------------- runner, targets, contract


def _package(name: str) -> str:
    """The package a module belongs to for layering: ``harness.<sub>``, else the top level."""
    parts = name.split(".")
    return ".".join(parts[:2]) if parts[0] == "harness" else parts[0]


def reachable(graph: dict[str, set[str]], start: str) -> dict[str, str]:
    """Every module ``start`` reaches through imports (lazy ones included), each with the
    module that imports it on one path there (for the failure message)."""
    found, todo = {start: ""}, [start]
    while todo:
        node = todo.pop()
        for nxt in sorted(graph.get(node, ())):
            if nxt not in found:
                found[nxt] = node
                todo.append(nxt)
    return found


def _path_to(found: dict[str, str], end: str) -> str:
    path = [end]
    while found[path[-1]]:
        path.append(found[path[-1]])
    return " -> ".join(reversed(path))


def _reaching(sources: str, forbidden: tuple[str, ...]) -> list[str]:
    graph = import_graph()
    bad = []
    for module in sorted(m for m in graph if m == sources or m.startswith(sources + ".")):
        found = reachable(graph, module)
        bad += [_path_to(found, m) for m in sorted(found) if m.startswith(forbidden)]
    return bad


def test_targets_never_reach_the_runner():
    """A target gets what it shares with the runner from `harness.contract`: no import of the
    runner, direct or through any other module, inside functions and under TYPE_CHECKING too."""
    assert _reaching("harness.targets", ("harness.runner",)) == []


def test_the_contract_is_below_the_runner_and_the_targets():
    forbidden = ("harness.runner", "harness.targets", "harness.cli", "harness.bench", "harness.publish", "reports")
    assert _reaching("harness.contract", forbidden + ("harness.pytest_",)) == []


def test_the_runner_reaches_the_targets_only_through_the_registry():
    """The runner names no target: it asks the registry (`harness.targets`) and talks to the
    interface (`harness.targets.base`)."""
    graph = import_graph()
    used = {
        f"{module} imports {name}"
        for module, names in graph.items()
        if module.startswith("harness.runner")
        for name in names
        if name.startswith("harness.targets") and name not in ("harness.targets", "harness.targets.base")
    }
    assert used == set()
    assert "harness.targets" in graph["harness.runner.sweep"]  # the rule is not vacuous


def test_no_private_name_crosses_a_package():
    """``from harness.runner.worker import _set_parent_death_signal`` in a target was how the
    runner and the targets came to import each other: a private name stays in its package."""
    modules = project_modules()
    bad = []
    for module, path in modules.items():
        for source, names in _import_targets(path):
            for name in names:
                last = name.rsplit(".", 1)[-1]
                private = last.startswith("_") and not last.startswith("__")
                if private and source.split(".")[0] in PROJECT and _package(source) != _package(module):
                    bad.append(f"{path.relative_to(ROOT)} imports {name}")
    assert bad == []


def test_the_layering_checks_see_what_they_forbid():
    """The rules above would pass vacuously if the graph walk or the name check missed imports."""
    graph = {"a.x": {"b.y"}, "b.y": {"c.z"}, "c.z": set()}
    assert _path_to(reachable(graph, "a.x"), "c.z") == "a.x -> b.y -> c.z"
    assert "harness.contract.phases" in import_graph()["harness.targets.cpu"]  # a lazy import
    assert _package("harness.runner.worker") != _package("harness.targets.qnn.child")
    assert _package("reports.charts") == _package("reports.peakchart")


# ----------------------------------------------------------------------------- options declared once

#: Flags of a developer tool's own parser that mean something else by the same word.
OTHER_MEANINGS = {
    ("harness/targets/qnn/epstrings.py", "--out"): "the fixture file the strings tool writes",
    ("harness/cli_parser.py", "--max-processes"): "capacity's search cap, not --processes",
}


def _option_literals(path: Path) -> list[tuple[str, int]]:
    """(flag, line) of every ``add_argument``/``addoption`` call that spells its flag."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", None) in ("add_argument", "addoption"):
            for arg in node.args:
                if isinstance(arg, ast.Constant) and isinstance(arg.value, str) and arg.value.startswith("--"):
                    found.append((arg.value, node.lineno))
    return found


def _run_flags() -> set[str]:
    from harness.contract.options import command_line_fields

    return {f.metadata["flag"].flag for f in command_line_fields()}


def _spells_a_run_option(flag: str, bodies: set[str]) -> bool:
    """``--processes``, or a prefixed form of it (``--fmw-processes``)."""
    body = flag[2:]
    return body in bodies or any(body.endswith(f"-{b}") for b in bodies)


def test_no_run_option_is_declared_twice():
    """``bench`` once declared --model-size/--processes/--repeat again with other types, and the
    plugin its --fmw-* as strings: every parser now takes them from the declarations."""
    bodies = {flag[2:] for flag in _run_flags()}
    again = []
    for path in [*modules_under("harness"), ROOT / "qnn_fmw_harness_plugin.py"]:
        where = str(path.relative_to(ROOT))
        for flag, line in _option_literals(path):
            if _spells_a_run_option(flag, bodies) and (where, flag) not in OTHER_MEANINGS:
                again.append(f"{where}:{line}: {flag}")
    assert again == []
    # not vacuous: the scan sees the parsers' own literals, and the match sees a prefixed copy
    assert "--gates-file" in {flag for flag, _ in _option_literals(ROOT / "harness" / "cli_parser.py")}
    assert _spells_a_run_option("--fmw-processes", bodies) and _spells_a_run_option("--repeat", bodies)
    assert not _spells_a_run_option("--gates-file", bodies)


def test_bench_and_the_plugin_take_the_declared_types():
    import argparse

    from harness.cli_parser import build_parser
    from harness.contract.options import command_line_fields
    from harness.pytest_plugin import run_option_arguments

    declared = {f.name: f.metadata["flag"] for f in command_line_fields()}
    plugin = run_option_arguments()
    assert {name for name, _, _ in plugin} == {"target", "processes", "model_size", "models"}
    for name, flag, keywords in plugin:
        assert flag == "--fmw-" + declared[name].flag[2:]
        assert keywords.get("type") is declared[name].type
    commands = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)).choices
    bench = {a.dest: a for a in commands["bench"]._actions if a.dest in declared}
    assert set(bench) == {"model_size", "processes", "repeat", "intra_op_threads", "out", "replace", "cache_dir"} | {
        "workload",
        "prompt_tokens",
        "new_tokens",
    }
    for name, action in bench.items():
        assert action.option_strings == [declared[name].flag] and action.type is declared[name].type


def test_the_plugin_lists_the_registrys_targets(monkeypatch):
    """A target added to the registry is offered by ``--fmw-target`` (its help and its check)
    with nothing else changed; no text of the plugin names the targets itself."""
    import harness.targets as registry
    from harness.pytest_plugin import _parse, run_option_arguments

    monkeypatch.setattr(registry, "NAMES", (*registry.NAMES, "npu-x"))
    ((flag, keywords),) = [(f, k) for name, f, k in run_option_arguments() if name == "target"]
    assert "cpu, ort-native, qnn, genai or npu-x (default: cpu)" in keywords["help"]
    assert _parse(flag, "npu-x", keywords) == "npu-x"
    monkeypatch.undo()
    names = __import__("harness.targets", fromlist=["NAMES"]).NAMES
    for path in (ROOT / "qnn_fmw_harness_plugin.py", ROOT / "harness" / "pytest_plugin.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                named = [n for n in names if n in node.value.replace(",", " ").split()]
                assert len(named) < 2, f"{path.name}:{node.lineno} lists targets itself: {node.value!r}"


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
    vocab.Start,
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
    ("harness/targets/cpu.py", "mapped", "compared"): "mapper_impl's StageError.attempt (mapped/direct), not a mode",
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
    if not isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return [], []
    if not all(isinstance(e, ast.Constant) and (e.value is None or isinstance(e.value, str)) for e in node.elts):
        return [], []
    named = [e for e in node.elts if e.value]  # ("active", "n/a", "", None): empty cells beside two states
    if len(named) < 2:
        return [], []
    values = {e.value for e in named}
    copied = [v.__name__ for v in CHECKED_VOCABULARIES if values <= set(v.values())]
    return (named, copied) if copied else ([], [])


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
    if isinstance(node, ast.Return) and isinstance(node.value, ast.Tuple) and node.value.elts:
        return [("returned", c) for c in _strings(node.value.elts[0])]  # ``return "ep-error", why``: a decision
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
CLAIMS = ("active", "n/a", "", None)
def decide():
    return "option-ignored", "why"
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
    assert "x.py:15: 'n/a' spelled out again: use EpState.NA" in shown, shown  # empty cells beside states
    assert "x.py:17: 'option-ignored' returned as a literal" in shown, shown
    assert "'load'" not in shown and "'other'" not in shown and "n/a_column" not in shown, shown
    assert len([line for line in lines if "'mapped'" in line]) == 1, shown  # ("mapped", "other") is no vocabulary


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


# ------------------------------------------------------------------ decisions from data, not prose

#: Fields and names that hold words for people: a decision never reads them (issue 41: the
#: verdict once asked ``why.startswith("implausible")``, the notes ``"system delta" in s.note``).
PROSE = {"note", "memory_note", "reason", "why", "error", "sentence", "ep_reason", "hint", "label", "title"}
#: Where verdicts, notes, summaries and row states are decided.
DECIDERS = (
    "harness/core",
    "harness/runner/rowrules.py",
    "harness/targets/qnn/eplog.py",
    "harness/console.py",
    "reports",
)


def _prose(node: ast.AST) -> str | None:
    name = node.attr if isinstance(node, ast.Attribute) else getattr(node, "id", None)
    return name if name in PROSE else None


def prose_decisions(source: str, where: str) -> list[str]:
    """``where:line`` for each test of a prose field's words: ``x.startswith("...")``,
    ``x.endswith("...")``, ``"..." in x``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if node.func.attr in ("startswith", "endswith") and _prose(node.func.value):
                found.append(f"{where}:{node.lineno}: {_prose(node.func.value)}.{node.func.attr}(...)")
        elif isinstance(node, ast.Compare) and isinstance(node.left, ast.Constant) and isinstance(node.left.value, str):
            for op, right in zip(node.ops, node.comparators, strict=True):
                if isinstance(op, (ast.In, ast.NotIn)) and _prose(right):
                    found.append(f"{where}:{node.lineno}: {node.left.value!r} in {_prose(right)}")
    return found


def test_decisions_read_fields_not_sentences():
    """A verdict, note or summary decided by searching a sentence breaks when the sentence is
    reworded: decisions read a field or an enum (physics' `Refusal.doubt`, the system delta's
    figures), never the words written for people."""
    found = []
    for entry in DECIDERS:
        path = ROOT / entry
        for module in modules_under(entry) if path.is_dir() else [path]:
            found += prose_decisions(module.read_text(encoding="utf-8"), module.relative_to(ROOT).as_posix())
    assert not found, "decisions read from prose:\n" + "\n".join(found)


def test_the_prose_check_finds_the_old_decisions():
    source = """
reasons.extend(why for why in missing.values() if why.startswith("implausible"))
noisy = [s for s in summary if s.note and "system delta unreliable" in s.note]
fine = [s for s in summary if s.complete and "x" in s.modes]
"""
    assert prose_decisions(source, "x.py") == [
        "x.py:2: why.startswith(...)",
        "x.py:3: 'system delta unreliable' in note",
    ]


def _constants(path: Path) -> dict[str, str]:
    """A module's UPPER_CASE constants set to a literal or arithmetic on literals, with their source."""
    found = {}
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        target = node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else None
        literal = isinstance(getattr(node, "value", None), (ast.Constant, ast.BinOp))
        if isinstance(target, ast.Name) and target.id.isupper() and literal:
            found[target.id] = ast.unparse(node.value)
    return found


def test_no_constant_is_declared_twice():
    """A constant given the same name and value in two modules drifts apart (``rowrules.py``
    re-declared ``slack.SLACK_BYTES``): one declares it, the other imports it."""
    seen: dict[tuple[str, str], list[str]] = {}
    for path in modules_under("harness"):
        for name, value in _constants(path).items():
            seen.setdefault((name, value), []).append(path.relative_to(ROOT).as_posix())
    twice = {f"{name} = {value}": where for (name, value), where in seen.items() if len(where) > 1}
    assert not twice, twice


def test_the_command_line_reads_only_declared_target_attributes():
    """``cli.py`` once read ``getattr(target, "probe_summary", "")``, an attribute only the qnn
    target had: what a command reads of a target is declared on `Target`."""
    from harness.targets.base import Target

    found = []
    for node in ast.walk(ast.parse((ROOT / "harness" / "cli.py").read_text(encoding="utf-8"))):
        if isinstance(node, ast.Call) and getattr(node.func, "id", "") in ("getattr", "hasattr") and node.args:
            if getattr(node.args[0], "id", "") == "target" and not hasattr(Target, node.args[1].value):
                found.append(f"cli.py:{node.lineno}: {node.args[1].value}")
    assert not found, found
