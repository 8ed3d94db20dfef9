"""docs/results.md describes headline.json and the run folder's formats as the code writes them: the
keys of a real run's headline.json are exactly the documented ones (each nested key named in its row),
with every value of the vocabularies those keys carry, and every format version of the run folder.
(The CSV columns are checked against the schema by test_csvio.py.)"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest

from harness.core.schema import FORMAT_VERSION
from harness.core.vocab import FeatureStatus, GateStatus, RunStatus

pytestmark = pytest.mark.memory

ROOT = Path(__file__).resolve().parents[2]
RESULTS_MD = (ROOT / "docs" / "results.md").read_text(encoding="utf-8")


def section(title: str) -> str:
    start = RESULTS_MD.index(f"\n## {title}\n")
    end = RESULTS_MD.find("\n## ", start + 1)
    return RESULTS_MD[start : end if end > 0 else None]


def documented(title: str) -> dict[str, str]:
    """key -> its table row, for every backticked key in the first cell of the section's table."""
    rows = {}
    for line in section(title).splitlines():
        cells = line.split(" | ")
        if line.startswith("| `") and len(cells) >= 2:
            for key in re.findall(r"`([^`]+)`", cells[0]):
                rows[key] = line
    return rows


HEADLINE = documented("headline.json")


@pytest.fixture(scope="module")
def headline(harness_runner, request, tmp_path_factory) -> dict:
    """headline.json of a real run with every optional part: a peer, repeats, timed runs, a timing pass."""
    outcome = harness_runner.run(
        "run",
        *("--model-size", "4MiB", "--processes", "1", "--repeat", "2", "--runs", "2"),
        *("--peer", "ort-native", "--sequential-timing", "--quiet", "--no-report"),
        owner=request.node.nodeid,
        scratch=tmp_path_factory.mktemp("docs-run"),
    )
    assert outcome.returncode in (0, 1), outcome.stdout + outcome.stderr
    return json.loads((outcome.out / "headline.json").read_text(encoding="utf-8"))


def test_the_documented_keys_are_the_written_keys(headline):
    assert set(HEADLINE) == set(headline), set(HEADLINE) ^ set(headline)


def _nested(headline: dict) -> dict[str, list[dict]]:
    """Top-level key -> the objects whose own keys its row must name (maps keyed by data left out)."""
    per_n = headline["per_n"] + (headline["timing_pass"] or {}).get("per_n", [])
    latency, fits = headline["latency"], headline["fits"]
    return {
        "feature": [headline["feature"]],
        "contention": [headline["contention"]],
        "per_n": per_n + [entry["saving"] for entry in per_n],
        "timing_pass": [headline["timing_pass"]],
        "timing_spread": list(headline["timing_spread"].values()),
        "latency": [latency, latency["mapped"], latency["heap"]],
        "fits": [fits, *fits["modes"].values()],
        "gates": headline["gates"],
    }


def test_every_nested_key_is_named_in_its_row(headline):
    missing = {
        (top, key)
        for top, objects in _nested(headline).items()
        for obj in objects
        for key in obj
        if f"`{key}`" not in HEADLINE[top]
    }
    assert not missing, f"docs/results.md headline.json rows do not name: {sorted(missing)}"


def _kinds() -> set[str]:
    """Every ``kind`` the command line writes headline.json with (the ``kind=`` of its report_run calls)."""
    found = set()
    for name in ("harness/cli.py", "harness/publish.py"):
        for node in ast.walk(ast.parse((ROOT / name).read_text(encoding="utf-8"))):
            for value in [k.value for k in getattr(node, "keywords", []) if k.arg == "kind"] + [
                d for a, d in _defaults(node) if a == "kind"
            ]:
                if isinstance(value, ast.Constant) and isinstance(value.value, str):
                    found.add(value.value)
    return found


def _defaults(node: ast.AST) -> list[tuple[str, ast.AST]]:
    if not isinstance(node, ast.FunctionDef):
        return []
    args = node.args
    return list(zip([a.arg for a in args.kwonlyargs], args.kw_defaults, strict=True))


@pytest.mark.parametrize(
    ("key", "values"),
    [
        ("kind", sorted(_kinds())),
        ("status", [s.value for s in RunStatus]),
        ("feature", [s.value for s in FeatureStatus]),
        ("gates", [s.value for s in GateStatus]),
    ],
)
def test_every_value_of_a_vocabulary_is_documented(key, values):
    assert {"run", "bench", "capacity"} <= set(values) or key != "kind", values
    missing = [v for v in values if f"`{v}`" not in HEADLINE[key]]
    assert not missing, f"docs/results.md: the {key} row does not name {missing}"


def test_every_format_version_of_a_run_folder_is_documented():
    versions = re.findall(r"^\| (\d+) \|", section("Format versions"), re.M)
    assert versions == [str(v) for v in range(1, FORMAT_VERSION + 1)], versions
