"""Reading GitHub workflow files for the suites/ci tests: their run: scripts (a small
block-scalar reader that needs no YAML library), the ``python -m MODULE ...`` commands in
them, and, with PyYAML, their parsed structure (triggers, runners, matrices, steps, env, paths)
and what their ``if:`` conditions evaluate to in a given situation (a failed step, a
cancelled run)."""

from __future__ import annotations

import itertools
import re
import shlex
import shutil
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
WORKFLOWS_DIR = ROOT / ".github" / "workflows"
ACTIONLINT_CONFIG = Path(__file__).with_name("actionlint.yaml")
NIGHTLY, WINDOWS_MAPPER, WINDOWS_ARM64, LINUX = (
    "nightly-device.yml",
    "windows-mapper.yml",
    "windows-arm64.yml",
    "linux.yml",
)
EXPECTED = (NIGHTLY, WINDOWS_MAPPER, WINDOWS_ARM64, LINUX)
#: Labels every self-hosted runner may carry without being declared (actionlint's own list).
STANDARD_SELF_HOSTED_LABELS = frozenset({"self-hosted", "x64", "arm", "arm64", "linux", "macos", "windows"})


def workflow_files() -> list[Path]:
    return sorted([*WORKFLOWS_DIR.glob("*.yml"), *WORKFLOWS_DIR.glob("*.yaml")])


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


_STEPS_SCRIPT = re.compile(
    r"(?:^|[\s&;|(])(?:[\w.\\/:-]*[\\/])?python(?:3(?:\.\d+)?)?(?:\.exe)?\s+\.ci[\\/]windows_steps\.py\s+(.*)$"
)


def windows_steps():
    """`.ci/windows_steps.py`, the Windows lanes' one set of steps, as a module."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("windows_steps", ROOT / ".ci" / "windows_steps.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def steps_script_commands(line: str, workflow: str) -> list[Command] | None:
    """The ``python -m MODULE ...`` commands a ``python .ci/windows_steps.py STEP ...`` line runs
    (replayed through the script's own `planned`), or None for any other line."""
    match = _STEPS_SCRIPT.search(line)
    if not match:
        return None
    args = []
    for token in shlex.split(match.group(1), posix=True):
        if token in _SHELL_STOP:
            break
        args.append(token)
    steps = windows_steps()
    planned = steps.planned(steps.parse_args(args))
    return [Command(workflow, cmd[1], cmd[2:], line) for cmd in planned if cmd[:1] == ["-m"]]


def script_commands(script: str, workflow: str, module: str | None = None) -> list[Command]:
    """``python -m MODULE ...`` commands in one run: script, tokenised like a shell; a line that
    runs `.ci/windows_steps.py` gives the commands its step runs."""
    found = []
    for line in logical_lines(script):
        replayed = steps_script_commands(line, workflow)
        if replayed is not None:
            found += [c for c in replayed if not module or c.module == module]
            continue
        match = _PY_MODULE.search(line)
        if not match or (module and match.group(1) != module):
            continue
        args = []
        for token in shlex.split(match.group(2), posix=True):
            if token in _SHELL_STOP:
                break
            args.append(token)
        found.append(Command(workflow, match.group(1), args, line))
    return found


def commands(path: Path, module: str | None = None) -> list[Command]:
    """``python -m MODULE ...`` commands in a workflow's run: scripts, tokenised like a shell."""
    return [
        c
        for script in run_scripts(path.read_text(encoding="utf-8"))
        for c in script_commands(script, path.name, module)
    ]


def step_commands(step: dict, module: str | None = None, workflow: str = "") -> list[Command]:
    """The commands of one parsed step (none for a `uses:` step)."""
    return script_commands(str(step.get("run", "")), workflow, module)


def all_commands(module: str) -> list[Command]:
    return [c for p in workflow_files() for c in commands(p, module)]


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
    yaml = pytest.importorskip(
        "yaml",
        reason="PyYAML not installed: workflow structure checks skipped "
        "(actionlint and the CLI drift checks still ran)",
    )
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


def expand(value: str, env: dict[str, str], keep_expressions: bool = False) -> str:
    """Resolve `$env:NAME`, `$NAME`, `${NAME}` and `${{ env.NAME }}` from the workflow's env;
    other `${{ ... }}` expressions (run numbers and the like) become the text EXPR, or stay as
    written with ``keep_expressions`` (to see e.g. that a value comes from ``matrix.kind``)."""

    def sub(match: re.Match) -> str:
        name = next(g for g in match.groups() if g)
        return str(env.get(name, match.group(0)))

    for _ in range(3):  # env values may refer to other expressions
        value = re.sub(r"\$\{\{\s*env\.(\w+)\s*\}\}|\$env:(\w+)|\$\{(\w+)\}|\$(\w+)", sub, value)
    return value if keep_expressions else re.sub(r"\$\{\{.*?\}\}", "EXPR", value)


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


def with_input(step: dict, name: str) -> str:
    return str(step.get("with", {}).get(name, "")).strip()


def custom_labels() -> set[str]:
    """The self-hosted runner labels declared in suites/ci/actionlint.yaml."""
    yaml = pytest.importorskip("yaml", reason="PyYAML not installed")
    config = yaml.safe_load(ACTIONLINT_CONFIG.read_text(encoding="utf-8")) or {}
    return {str(x).lower() for x in (config.get("self-hosted-runner") or {}).get("labels") or []}


def matrix_entries(job: dict) -> list[dict]:
    """The matrix combinations of a job: the product of its keys, then its `include` entries
    (added as extra combinations: enough for the matrices this repository writes)."""
    matrix = (job.get("strategy") or {}).get("matrix") or {}
    keys = {k: v for k, v in matrix.items() if k not in ("include", "exclude")}
    combos = [dict(zip(keys, values, strict=True)) for values in itertools.product(*keys.values())] if keys else []
    return combos + [dict(e) for e in matrix.get("include") or []]


def runner_label_sets(job: dict) -> list[list[str]]:
    """One label list per job instance: `runs-on` as written, or resolved through the matrix
    when it is ``${{ matrix.NAME }}``."""
    runs_on = job["runs-on"]
    match = re.fullmatch(r"\$\{\{\s*matrix\.([\w-]+)\s*\}\}", runs_on.strip()) if isinstance(runs_on, str) else None
    if not match:
        return [labels(job)]
    values = [entry.get(match.group(1)) for entry in matrix_entries(job)]
    return [[str(x).lower() for x in ([v] if isinstance(v, str) else v or [])] for v in values]


# --------------------------------------------------------------------------- if: conditions

_STATUS_FUNCTIONS = ("always", "success", "failure", "cancelled")
_TOKEN = re.compile(
    r"\s*(?:(?P<str>'(?:[^']|'')*')|(?P<num>\d+(?:\.\d+)?)|(?P<call>[A-Za-z_]\w*)\s*\((?P<args>[^()]*)\)"
    r"|(?P<ref>[A-Za-z_][\w.-]*)|(?P<op>&&|\|\||==|!=|!|\(|\)))"
)


@dataclass(frozen=True)
class Situation:
    """What has happened when a step's (or job's) `if:` is evaluated."""

    failed: bool = False  # an earlier step of the job (for a job: a job it needs) failed
    cancelled: bool = False  # the workflow run was cancelled
    outcomes: Mapping[str, str] = field(default_factory=dict)  # steps.ID.outcome; default "success"
    files_exist: bool = True  # what hashFiles(...) finds


def condition_holds(node: dict, situation: Situation) -> bool:
    """Evaluate a step's or job's `if:` as GitHub does in ``situation``: no `if:` means
    ``success()``, and an expression with no status function gets ``success() &&`` in front.
    Only the syntax these workflows use is understood; anything else raises ValueError."""
    expr = str(node.get("if", "")).strip() or "success()"
    expr = re.sub(r"^\$\{\{(.*)\}\}$", r"\1", expr, flags=re.S).strip()
    if not re.search(rf"\b({'|'.join(_STATUS_FUNCTIONS)})\s*\(", expr):
        expr = f"success() && ({expr})"
    tokens: list[re.Match] = []
    pos = 0
    while expr[pos:].strip():
        match = _TOKEN.match(expr, pos)
        if not match or match.end() == pos:
            raise ValueError(f"cannot read if: {expr!r} at {expr[pos:]!r}")
        tokens.append(match)
        pos = match.end()
    python: list[str] = []
    for match in tokens:
        text = _python_token(match, situation)
        if python and python[-1] == "not" and match.group("op") is None:
            python[-1] = f"(not {text})"  # `!` binds to its operand, as in GitHub's grammar
        else:
            python.append(text)
    return bool(eval(" ".join(python), {"__builtins__": {}}, {}))  # our own tokens only


def _python_token(match: re.Match, situation: Situation) -> str:
    if match.group("str") is not None:
        return repr(match.group("str")[1:-1].replace("''", "'"))
    if match.group("num") is not None:
        return match.group("num")
    if match.group("call") is not None:
        name = match.group("call")
        value = {
            "always": True,
            "success": not situation.failed and not situation.cancelled,
            "failure": situation.failed,
            "cancelled": situation.cancelled,
            "hashFiles": "some-hash" if situation.files_exist else "",
        }
        if name not in value:
            raise ValueError(f"if: uses {name}(), which this reader does not evaluate")
        return repr(value[name])
    if match.group("ref") is not None:
        ref = match.group("ref")
        literals = {"true": "True", "false": "False", "null": "None"}
        if ref in literals:
            return literals[ref]
        step = re.fullmatch(r"steps\.([\w-]+)\.(outcome|conclusion)", ref)
        if not step:
            raise ValueError(f"if: refers to {ref}, which this reader does not evaluate")
        return repr(situation.outcomes.get(step.group(1), "success"))
    return {"&&": "and", "||": "or", "!": "not", "==": "==", "!=": "!=", "(": "(", ")": ")"}[match.group("op")]
