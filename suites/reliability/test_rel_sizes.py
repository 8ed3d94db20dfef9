"""Issue 42: every size option and size threshold goes through one parser (`parse_size`), which
computes exactly (no float) and refuses a value past a signed 64-bit byte count in one line,
exit 2, before any work. Before: a size of more than 308 digits became ``float('inf')`` and an
``OverflowError`` traceback (an INTERNALERROR in the pytest plugin)."""

from __future__ import annotations

import pytest
from rel_support import one_line_error, run_quick

from harness.core.errors import InputError
from harness.core.units import MAX_SIZE_BYTES, parse_projection, parse_size

BIG = "9" * 400
CASES = {
    "run --model-size": ["run", "--model-size", f"{BIG}MiB"],
    "run --memory-limit": ["run", "--memory-limit", f"{BIG}KiB"],
    "bench --model-size": ["bench", "--model-size", f"{BIG}B"],
    "capacity --memory-limit": ["capacity", "--memory-limit", f"{BIG}.5GiB"],
    "run --gate": ["run", "--gate", f"weights_bytes < {BIG}MiB"],
    "report --project-to": ["report", "nowhere", "--project-to", f"8x{BIG}MiB"],
    "report --project-to sessions": ["report", "nowhere", "--project-to", f"{BIG}x1MiB"],
    "report --min-effect": ["report", "nowhere", "--baseline", "base", "--min-effect", f"memory={BIG}MiB"],
}


@pytest.mark.parametrize("args", list(CASES.values()), ids=list(CASES))
def test_a_400_digit_size_is_refused_in_one_line(model_cache, tmp_path, args):
    proc = run_quick(args, model_cache, cwd=tmp_path, timeout=120)
    line = one_line_error(proc, 2)
    assert "absurd" in line or "at most 1000000" in line, line
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("text", [f"{MAX_SIZE_BYTES + 1}", "8192PiB", "16777216TiB", f"{BIG}", "1" + "0" * 308 + "B"])
def test_parse_size_refuses_what_no_byte_count_holds(text):
    with pytest.raises(InputError):
        parse_size(text)


def test_parse_size_is_exact():
    assert parse_size(f"{MAX_SIZE_BYTES}") == MAX_SIZE_BYTES
    assert parse_size("1.5GiB") == 3 * 2**29
    assert parse_size("0.1KB") == 100
    assert parse_projection("1000000x1TiB") == (1_000_000, 2**40)
    with pytest.raises(InputError):
        parse_projection("9" * 401 + "x1MiB")


@pytest.fixture(scope="module")
def dynamic_model(tmp_path_factory):
    import numpy as np
    from rel_support import matmul_model

    return matmul_model(tmp_path_factory.mktemp("dyn") / "m.onnx", np.ones((64, 64), np.float32), batch="b")


@pytest.mark.parametrize(
    "extra, expected",
    [
        (["--free-dim", f"b={BIG}"], "VALUE 0 to 2^48"),
        (["--shape", f"x={BIG}x64"], "1 to 2^48 each"),
        (["--shape", "x=" + "x".join(["281474976710656"] * 30)], "elements needs"),
    ],
    ids=["free-dim", "shape-dim", "shape-product"],
)
def test_a_400_digit_input_dimension_is_refused_in_one_line(model_cache, tmp_path, dynamic_model, extra, expected):
    """Before: an OverflowError traceback (a float of the element count) or numpy's
    "Maximum allowed dimension exceeded" after the model was prepared."""
    args = ["run", "--model", str(dynamic_model), "--processes", "1", "--no-report", "--cache-dir", str(tmp_path / "c")]
    proc = run_quick([*args, *extra], model_cache, cwd=tmp_path, timeout=120)
    one_line_error(proc, 2, expected)
    assert not (tmp_path / "c").exists()
