"""The README's and docs' promises that code can check: every Python block runs as written, the
set-up is exactly two commands that make and use a virtual environment (PEP 668 systems refuse
a bare ``pip install``), in a POSIX and a PowerShell form; the README stays short, every former
README section is in `docs/`, and every relative link resolves."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from harness.pytest_plugin import harness_env

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
README_TEXT = README.read_text(encoding="utf-8")
DOCS = sorted((ROOT / "docs").glob("*.md"))
TEXT = "\n".join([README_TEXT, *(p.read_text(encoding="utf-8") for p in DOCS)])
PYTHON_BLOCKS = re.findall(r"^```python\n(.*?)^```", TEXT, re.S | re.M)
README_MAX_LINES = 250

# Every section of the README before it was split (issue 17): each must still have a heading in docs/.
FORMER_SECTIONS = (
    "Targets",
    "How a run works",
    "Your own models",
    "Multi-partition EPContext models",
    "Start-up, latency and the page cache",
    "Gates and the verdict",
    "The model cache",
    "Real models from PyPI packages (`suites/models/`)",
    "The headline benchmark",
    "Reports: `python -m harness report`",
    "Is this machine a QNN device? `python -m harness doctor`",
    "headline.json",
    "From Python",
    "Columns",
    "`mapper_impl` in brief",
    "Upstream behaviour vs this project",
    "What is in here",
    "Adding a target",
    "The pytest plugin (for this and any other project)",
    "What happens when",
    "CI workflows",
    "The Windows ARM64 lane",
    "The nightly device fleet",
)


def section(title: str) -> str:
    start = README_TEXT.index(f"## {title}\n")
    end = README_TEXT.find("\n## ", start + 1)
    return README_TEXT[start : end if end > 0 else None]


def headings(text: str) -> list[tuple[int, str]]:
    """(level, title) of every Markdown heading outside code blocks."""
    found, fenced = [], False
    for line in text.splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and (match := re.match(r"^(#{1,6}) (.+)$", line)):
            found.append((len(match.group(1)), match.group(2).strip()))
    return found


def anchor(title: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", title.lower()).replace(" ", "-")


def test_the_readme_has_python_blocks():
    assert len(PYTHON_BLOCKS) >= 3


# not `memory`: one block runs a real (small) harness run, but no block asserts a figure
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


def test_setup_has_the_same_two_commands_for_powershell():
    """Windows-on-ARM users get the same two commands; each step runs only if the previous one
    succeeded (`if ($?)`, since Windows PowerShell 5.1 has no `&&`)."""
    blocks = re.findall(r"^```powershell\n(.*?)^```", section("Set-up: the two commands"), re.S | re.M)
    commands = [block.strip() for block in blocks]
    assert len(commands) == 2 and all("\n" not in c for c in commands), commands
    prefix = "py -3 -m venv .venv; if ($?) { .venv\\Scripts\\python -m pip install -e '.[test]' }; if ($?) { "
    assert all(c.startswith(prefix) for c in commands), commands
    assert commands[0].endswith(".venv\\Scripts\\python -m harness run }")
    assert commands[1].endswith(".venv\\Scripts\\python -m pytest -n auto }")


def test_readme_is_short_and_every_former_section_is_in_docs():
    assert len(README_TEXT.splitlines()) <= README_MAX_LINES
    in_docs = {title for path in DOCS for _, title in headings(path.read_text(encoding="utf-8"))}
    missing = [title for title in FORMER_SECTIONS if title not in in_docs]
    assert not missing, f"former README sections not found in docs/: {missing}"


def test_every_docs_page_has_contents_and_is_in_the_index():
    index = (ROOT / "docs" / "README.md").read_text(encoding="utf-8")
    for path in DOCS:
        if path.name == "README.md":
            continue
        assert f"]({path.name})" in index, f"docs/README.md does not link {path.name}"
        sections = [title for level, title in headings(path.read_text(encoding="utf-8")) if level == 2]
        sections = [title for title in sections if title != "Contents"]
        if len(sections) > 1:
            text = path.read_text(encoding="utf-8")
            missing = [title for title in sections if f"](#{anchor(title)})" not in text]
            assert not missing, f"{path.name}: contents miss {missing}"


def test_every_relative_link_resolves():
    """Links between the README and docs/ point at a file that exists and, with `#`, a heading in it."""
    broken = []
    for page in [README, *DOCS]:
        for target in re.findall(r"\]\(([^)\s]+)\)", page.read_text(encoding="utf-8")):
            if re.match(r"^[a-z]+:", target):
                continue
            file_part, _, fragment = target.partition("#")
            path = (page.parent / file_part).resolve() if file_part else page
            if not path.exists():
                broken.append(f"{page.name}: {target}")
            elif fragment and path.suffix == ".md":
                anchors = {anchor(title) for _, title in headings(path.read_text(encoding="utf-8"))}
                if fragment not in anchors:
                    broken.append(f"{page.name}: {target}")
    assert not broken, broken


def test_readme_names_the_console_script_the_cache_and_how_to_read_the_report():
    pyproject = (README.parent / "pyproject.toml").read_text(encoding="utf-8")
    scripts = re.search(r"^\[project\.scripts\]\n(.*?)\n\n", pyproject, re.S | re.M).group(1)
    assert scripts.split(" = ")[0] == "qnn-fmw-harness" and "`qnn-fmw-harness`" in README_TEXT
    for needle in (
        "HARNESS_CACHE_DIR",
        "~/.cache/qnn-fmw-harness",
        "python -m harness cache clear",
        "python -m harness cache info",
        "### Reading the report",
        "headline.json",
        "The change rule",
    ):
        assert needle in TEXT, needle
