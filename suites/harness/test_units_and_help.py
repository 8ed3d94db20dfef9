"""Sizes people type, and what --help tells them: every default and unit, one program name,
the gate metrics."""

from __future__ import annotations

import re

import pytest

from harness.core.errors import InputError
from harness.core.units import fmt_bytes, fmt_size_arg, parse_projection, parse_size

KIB, MIB, GIB, TIB = 1024, 1024**2, 1024**3, 1024**4


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("4096", 4096),
        ("4096B", 4096),
        ("1KiB", KIB),
        ("256MiB", 256 * MIB),
        ("256mib", 256 * MIB),
        ("1.5GiB", int(1.5 * GIB)),
        ("2TiB", 2 * TIB),
        ("1KB", 1000),
        ("256MB", 256 * 1000**2),
        ("1GB", 1000**3),
        ("2TB", 2 * 1000**4),
        (" 64 MiB ", 64 * MIB),
    ],
)
def test_binary_and_decimal_units(text, value):
    assert parse_size(text) == value


@pytest.mark.parametrize(("text", "hint"), [("256M", "256MiB"), ("1G", "1GiB"), ("4k", "4KiB"), ("1T", "1TiB")])
def test_one_letter_units_are_ambiguous_and_refused(text, hint):
    with pytest.raises(InputError) as info:
        parse_size(text)
    message = str(info.value)
    assert "ambiguous" in message and hint in message and "1024" in message and "1000" in message


@pytest.mark.parametrize("text", ["lots", "MiB", "-1MiB", "0", "1PiB", "1.2.3MiB"])
def test_bad_sizes(text):
    with pytest.raises(InputError):
        parse_size(text)


def test_formatting_round_trips():
    assert fmt_bytes(3 * TIB) == "3.0 TiB" and fmt_bytes(-2 * MIB) == "-2.0 MiB"
    for value in (256 * MIB, 4 * GIB, 2 * TIB, 3 * KIB, 1234):
        assert parse_size(fmt_size_arg(value)) == value
    assert parse_projection("8x4GiB") == (8, 4 * GIB)
    for bad in ("8x", "x4GiB", "0x1GiB", "8*4GiB", "8x4G"):
        with pytest.raises(InputError):
            parse_projection(bad)


def test_ambiguous_size_is_a_one_line_usage_error(run_harness):
    outcome = run_harness("run", "--model-size", "256M", "--quiet")
    assert outcome.returncode == 2
    (line,) = outcome.stderr.strip().splitlines()
    assert "ambiguous" in line and "256MiB" in line and "256MB" in line


def _option_help(text: str) -> dict[str, str]:
    """{--flag: its help text} from argparse's --help output."""
    helps: dict[str, str] = {}
    current = None
    for line in text.splitlines():
        match = re.match(r"^  (-\w, )?(--[\w-]+)(.*)$", line)
        if match:
            current = match.group(2)
            helps[current] = match.group(3)
        elif current and line.startswith("      "):
            helps[current] += " " + line.strip()
        elif not line.strip():
            current = None
    return {k: " ".join(v.split()) for k, v in helps.items()}


@pytest.mark.parametrize("command", ["run", "bench", "report", "cache", "doctor"])
def test_help_documents_every_option_with_its_default(run_harness, command):
    outcome = run_harness(command, "--help")
    assert outcome.returncode == 0, outcome.stderr
    assert f"usage: python -m harness {command}" in outcome.stdout
    helps = _option_help(outcome.stdout)
    assert helps, outcome.stdout
    for flag, text in helps.items():
        if flag == "--help":
            continue
        assert len(text) > 3, f"{flag} has no help text"
    # options with a value show their default (or say there is none)
    valued = {
        "run": [
            "--target",
            "--model-size",
            "--processes",
            "--sessions-per-process",
            "--modes",
            "--repeat",
            "--worker-timeout",
            "--out",
            "--cache-dir",
            "--project-to",
            "--max-attempts",
            "--embed-mode",
            "--backend-type",
            "--peer",
            "--model",
            "--intra-op-threads",
            "--runs",  # default 0: argparse's 0 == False once hid it
            "--page-cache",
            "--gates-file",
            "--history",
            "--fault",
            "--map-failures",
            "--share-ep-contexts",
        ],
        "bench": ["--model-size", "--processes", "--repeat", "--intra-op-threads", "--out", "--cache-dir"],
        "report": ["--out", "--baseline", "--history", "--project-to", "--gates-file"],
        "cache": ["--cache-dir"],
        "doctor": ["--target", "--json", "--timeout"],
    }[command]
    for flag in valued:
        assert "default" in helps[flag], f"{flag}: {helps[flag]}"
    for flag, text in helps.items():
        assert text.count("(default") <= 1, f"{flag}: {text}"
        assert not re.search(r"\(default: (None|\{\}|\[\]|\(\))\)", text), f"{flag}: {text}"


@pytest.mark.parametrize("command", ["run", "report"])
def test_help_lists_gate_metrics_units_and_exit_codes(run_harness, command):
    from harness.core.gates import known_metrics

    text = run_harness(command, "--help").stdout
    for metric in known_metrics():
        assert re.search(rf"^  {metric}\s", text, re.M), metric
    assert "KiB MiB GiB TiB = powers of 1024" in text and "KB MB GB TB = powers of 1000" in text
    assert "Exit codes: 0" in text
    if command == "run":
        assert "(default: 256MiB)" in text and "seconds" in text


def test_top_level_help_has_one_program_name_and_no_markup(run_harness):
    text = run_harness("--help").stdout
    assert text.startswith("usage: python -m harness ")
    assert "``" not in text and "`" not in text
    assert "qnn-fmw-harness" in text  # the console script is named
    for command in ("run", "bench", "report", "cache"):
        assert re.search(rf"^    {command}\s", text, re.M), command
