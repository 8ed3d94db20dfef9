"""The README's promises that code can check: every Python block runs as written, and the
set-up is exactly two commands that make and use a virtual environment (PEP 668 systems refuse
a bare ``pip install``)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from harness.pytest_plugin import harness_env

README = Path(__file__).resolve().parents[2] / "README.md"
TEXT = README.read_text(encoding="utf-8")
PYTHON_BLOCKS = re.findall(r"^```python\n(.*?)^```", TEXT, re.S | re.M)


def section(title: str) -> str:
    start = TEXT.index(f"## {title}\n")
    end = TEXT.find("\n## ", start + 1)
    return TEXT[start : end if end > 0 else None]


def test_the_readme_has_python_blocks():
    assert len(PYTHON_BLOCKS) >= 3


@pytest.mark.memory  # one block runs a real (small) harness run
@pytest.mark.parametrize("index", range(len(PYTHON_BLOCKS)))
def test_python_block_runs_as_written(index, tmp_path, model_cache):
    """Each block in a fresh interpreter, in an empty folder, with nothing prepared."""
    code = PYTHON_BLOCKS[index]
    proc = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env=harness_env(model_cache),
        stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 0, f"README python block {index + 1} failed:\n{code}\n{proc.stderr[-3000:]}"


def test_setup_is_exactly_two_commands_in_a_venv():
    blocks = re.findall(r"^```sh\n(.*?)^```", section("Set-up: the two commands"), re.S | re.M)
    commands = [line for block in blocks for line in block.strip().splitlines()]
    assert len(blocks) == 2 and len(commands) == 2, commands
    main_job, tests = commands
    for command in commands:
        assert command.startswith("python3 -m venv .venv && .venv/bin/python -m pip install -e '.[test]' && ")
        assert " pip install" not in command.replace(".venv/bin/python -m pip install", "")  # never the system pip
    assert main_job.endswith(".venv/bin/python -m harness run")
    assert tests.endswith(".venv/bin/python -m pytest -n auto")


def test_readme_names_the_console_script_the_cache_and_how_to_read_the_report():
    pyproject = (README.parent / "pyproject.toml").read_text(encoding="utf-8")
    scripts = re.search(r"^\[project\.scripts\]\n(.*?)\n\n", pyproject, re.S | re.M).group(1)
    assert scripts.split(" = ")[0] == "qnn-fmw-harness" and "`qnn-fmw-harness`" in TEXT
    for needle in (
        "HARNESS_CACHE_DIR",
        "~/.cache/qnn-fmw-harness",
        "python -m harness cache clear",
        "python -m harness cache info",
        "### Reading the report",
        "headline.json",
        "The spread rule",
    ):
        assert needle in TEXT, needle
