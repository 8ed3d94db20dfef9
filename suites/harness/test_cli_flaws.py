"""Small command-line flaws, each pinned: the first line a user reads says what is wrong with
what they typed, in their own words."""

from __future__ import annotations

import pytest

from harness.cli import main
from harness.prep.generated import matmul_chain_dims, size_note


def _error_of(capsys, argv: list[str]) -> list[str]:
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    return captured.err.splitlines()


def test_a_missing_model_is_the_only_line(capsys, tmp_path):
    """No "preparing the cpu model" and no "stopped" before the error."""
    lines = _error_of(capsys, ["run", "--model", str(tmp_path / "nope.onnx"), "--out", str(tmp_path / "out")])
    assert lines == [f"error: --model {tmp_path / 'nope.onnx'}: no such file"]


@pytest.mark.parametrize("text", ["-5MiB", "-1"])
def test_a_negative_size_says_it_must_be_positive(capsys, text):
    (line,) = _error_of(capsys, ["run", "--model-size", text])
    assert f"size {text!r} must be positive" in line and "expected one argument" not in line


def test_a_size_below_the_minimum_echoes_what_was_typed(capsys):
    (line,) = _error_of(capsys, ["run", "--model-size", "10KiB"])
    assert "'10KiB'" in line and "10240" not in line and "at least 64 KiB" in line


def test_a_misspelt_flag_gets_a_suggestion(capsys):
    (line,) = _error_of(capsys, ["run", "--proceses", "2"])
    assert "unrecognized arguments: --proceses 2" in line and "did you mean --processes?" in line


def test_an_unknown_flag_far_from_any_gets_no_guess(capsys):
    (line,) = _error_of(capsys, ["run", "--zzzzzz"])
    assert "did you mean" not in line


def test_cache_info_counts_in_the_singular_and_plural(capsys, tmp_path):
    from harness.cache import record_entry

    assert main(["cache", "info", "--cache-dir", str(tmp_path)]) == 0
    assert "(0 entries, " in capsys.readouterr().out
    entry = tmp_path / "matmul-chain-a"
    entry.mkdir()
    (entry / "weights.bin").write_bytes(b"\0" * 1024)
    record_entry(entry)
    assert main(["cache", "info", "--cache-dir", str(tmp_path)]) == 0
    assert "(1 entry, " in capsys.readouterr().out


@pytest.mark.parametrize("mib", [600, 256, 64, 1, 100])
def test_a_size_in_whole_layers_is_built_exactly(mib):
    width, layers = matmul_chain_dims(mib * 1024**2)
    assert width * width * 4 * layers == mib * 1024**2 and layers >= 4
    assert size_note(mib * 1024**2, width * width * 4 * layers) is None


def test_a_size_that_is_not_whole_layers_is_said_in_the_notes():
    asked = 100 * 1000**2  # 100MB: not a whole number of fp32 layers of any width
    width, layers = matmul_chain_dims(asked)
    built = width * width * 4 * layers
    assert built != asked
    note = size_note(asked, built)
    assert note and f"{asked} bytes" in note and f"{built} bytes" in note
