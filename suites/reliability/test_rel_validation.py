"""Everything is validated before any work: a typo in a gate, a bad gates file (a byte-order
mark and CRLF are fine, a binary file is not), a corrupt, foreign or unwritable --history, a
read-only, foreign or misplaced --out, a timeout that is not a finite positive number, a
--shape no machine could allocate, a gate a one-mode run can never judge. Each is exit 2 with
one stderr line, in seconds, with no model built (the private model cache is never created)
and nothing written to --out.

Before, several of these were found only after every group had run, some with a traceback.
"""

from __future__ import annotations

import contextlib
import time

import pytest
from rel_support import assert_usage_error, matmul_model, run_args, unwritable

#: A usage error must cost seconds (a harness start-up), not a model build or a sweep.
MAX_SECONDS = 30


def _tiny_model(path):
    """y = x @ W, W 32x32 fp32, x with a dynamic batch dimension."""
    import numpy as np

    return matmul_model(path, np.ones((32, 32), np.float32), batch="batch")


def _refused_before_work(run_harness, tmp_path, *args, expected=()):
    cache = tmp_path / "cache"
    t0 = time.monotonic()
    outcome = run_harness(*run_args(*args, report=True, cache=cache))
    line = assert_usage_error(outcome, *expected)
    assert time.monotonic() - t0 < MAX_SECONDS
    assert not cache.exists(), "a model was built before the input was refused"
    return line


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--gate", "mapped_pss_ratoi<=0.5"], ["bad gate", "unknown metric 'mapped_pss_ratoi'"]),
        (["--gate", "mapped_pss_ratio<=half"], ["bad gate", "'half' is not a number"]),
        (["--worker-timeout", "nan"], ["--worker-timeout", "finite number of seconds > 0"]),
        (["--worker-timeout", "inf"], ["--worker-timeout", "finite number of seconds > 0"]),
        (["--worker-timeout", "0"], ["--worker-timeout", "finite number of seconds > 0"]),
        (["--worker-timeout", "-5"], ["--worker-timeout", "finite number of seconds > 0"]),
        (
            ["--modes", "mapped", "--gate", "mapped_pss_ratio<=0.5"],
            ["gate 'mapped_pss_ratio<=0.5' compares mapped with heap", "--modes is mapped only"],
        ),
        (["--modes", "heap", "--gate", "init_ratio<=0.5 if processes>=2"], ["compares mapped with heap"]),
    ],
    ids=[
        "gate-typo",
        "gate-not-a-number",
        "timeout-nan",
        "timeout-inf",
        "timeout-zero",
        "timeout-negative",
        "pair-gate-on-mapped-only",
        "pair-gate-on-heap-only",
    ],
)
def test_bad_option_is_refused_before_work(run_harness, tmp_path, args, expected):
    _refused_before_work(run_harness, tmp_path, *args, expected=expected)


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (
            "\ufefffailed_workers==0\r\n# a comment\r\nfallback_workers==0\r\nmapped_pss_ratio<=\r\n",
            ["expression 3", "expected METRIC OP NUMBER"],
        ),
        ("failed_workers==0\nmapped_pss_ratio<=0.5 if procesess>=2\n", ["expression 2", "unknown metric 'procesess'"]),
        (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", ["not a text file (it holds NUL bytes)"]),
        (b"\x89PNG\r\n\x1a\n\x01\x02\x03\rIHDR", ["not a UTF-8 text file"]),
        (b"failed_workers==0\n\x00\x00\x00", ["not a text file (it holds NUL bytes)"]),
    ],
    ids=["bom-crlf-then-a-bad-line", "typo-on-line-2", "binary", "binary-without-nul", "nul-bytes"],
)
def test_bad_gates_file_is_refused_before_work(run_harness, tmp_path, content, expected):
    """A byte-order mark and CRLF line ends (what Windows editors write) parse: the error is
    the real mistake on a later line, named by its number."""
    path = tmp_path / "gates.txt"
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_bytes(content.encode("utf-8"))
    line = _refused_before_work(run_harness, tmp_path, "--gates-file", str(path), expected=expected)
    assert str(path) in line


def test_gates_file_with_bom_and_crlf_is_accepted(run_harness, tmp_path):
    """The same file without the mistake is used as it is: the run records its gates."""
    import json

    path = tmp_path / "gates.txt"
    path.write_bytes("\ufefffailed_workers==0\r\n# comment\r\nfallback_workers==0 # trailing\r\n".encode())
    outcome = run_harness(*run_args("--gates-file", str(path), modes="mapped"), check_exit=0)
    meta = json.loads((outcome.out / "metadata.json").read_text())
    assert meta["gates"] == ["failed_workers==0", "fallback_workers==0"]


@pytest.mark.parametrize("case", ["binary", "foreign-csv", "immutable-file", "immutable-folder"])
def test_unusable_history_is_refused_before_work(run_harness, tmp_path, case):
    folder = tmp_path / "hist"
    folder.mkdir()
    history = folder / "history.csv"
    expected = {
        "binary": "not a text file (it holds NUL bytes)",
        "foreign-csv": "not a history CSV of this harness",
        "immutable-file": "cannot write to it",
        "immutable-folder": "cannot write in",
    }[case]
    if case == "binary":
        history.write_bytes(b"\xff\xfe\x00garbage\x00" * 10)
    elif case == "foreign-csv":
        history.write_text("date,revenue\n2026-01-01,12\n")
    elif case == "immutable-file":
        history.write_text("")
    with (
        unwritable(history if case == "immutable-file" else folder)
        if case.startswith("immutable")
        else contextlib.nullcontext()
    ):
        _refused_before_work(run_harness, tmp_path, "--history", str(history), expected=["--history", expected])


def test_history_that_is_one_of_the_runs_own_files_is_refused(run_harness, tmp_path):
    out = tmp_path / "run"
    _refused_before_work(
        run_harness,
        tmp_path,
        "--history",
        str(out / "results.csv"),
        expected=["--history", "is one of the run's own files"],
    )


def test_read_only_out_is_refused_before_work(run_harness, tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    with unwritable(out):
        _refused_before_work(run_harness, tmp_path, expected=["--out", "cannot write in"])
    assert list(out.iterdir()) == []


def test_out_that_is_not_a_run_folder_is_refused_and_left_alone(run_harness, tmp_path):
    """A mistyped --out pointing at someone's folder: refused, nothing in it touched."""
    out = tmp_path / "run"
    out.mkdir()
    (out / "thesis.tex").write_text("years of work")
    (out / "report.html").write_text("my own report")
    cache = tmp_path / "cache"
    outcome = run_harness(*run_args(report=True, cache=cache))
    assert outcome.returncode == 2, outcome.stderr
    assert "neither empty nor a run folder of this harness" in outcome.stderr
    assert len(outcome.stderr.strip().splitlines()) == 1
    assert (out / "thesis.tex").read_text() == "years of work"
    assert (out / "report.html").read_text() == "my own report"
    assert not cache.exists()


def test_out_inside_the_model_cache_is_refused(run_harness, tmp_path):
    cache = tmp_path / "cache"
    outcome = run_harness(*run_args(report=True, cache=cache), out=cache / "my-run")
    assert outcome.returncode == 2, outcome.stderr
    assert "overlap" in outcome.stderr and len(outcome.stderr.strip().splitlines()) == 1
    assert not cache.exists()


def test_shape_no_machine_could_allocate_is_refused_before_work(run_harness, tmp_path):
    model = _tiny_model(tmp_path / "tiny.onnx")
    cache = tmp_path / "cache"
    t0 = time.monotonic()
    outcome = run_harness(
        *run_args("--shape", "x=100000000x100000000", model=("--model", str(model)), report=True, cache=cache)
    )
    assert_usage_error(outcome, "--shape x=100000000x100000000", "1e+16 elements", "is available")
    assert time.monotonic() - t0 < MAX_SECONDS
    assert not cache.exists()


def test_report_gate_typo_is_refused(run_harness, tmp_path):
    outcome = run_harness("report", str(tmp_path), "--gate", "init_ratoi<0.1")
    assert outcome.returncode == 2
    assert "unknown metric 'init_ratoi'" in outcome.stderr and len(outcome.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("kind", ["fifo", "folder", "dangling-symlink", "file-in-read-only-folder"])
def test_doctor_json_it_cannot_write_is_refused_before_the_probe(run_harness, tmp_path, kind):
    """`harness doctor --json PATH` where PATH is a FIFO (a /dev/null twin), a folder, a dangling
    symlink, or an existing file in a folder that takes no new file (the JSON is written
    atomically, through a temp file beside it): one line, exit 2, before the ~2 s probe, the path
    left as it was. Before, the probe ran and printed its report first, then the write failed
    (exit 1, "in the harness failed ... .d.json.xyz.tmp" for the read-only folder)."""
    import os
    import stat

    folder = tmp_path / "out"
    folder.mkdir()
    path = folder / "doctor.json"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "folder":
        path.mkdir()
    elif kind == "dangling-symlink":
        path.symlink_to(tmp_path / "nowhere")
    else:
        path.write_text("{}\n")
    mode = os.lstat(path).st_mode
    with unwritable(folder) if kind == "file-in-read-only-folder" else contextlib.nullcontext():
        t0 = time.monotonic()
        outcome = run_harness("doctor", "--json", str(path))
        assert_usage_error(outcome, "--json")
        assert outcome.stdout == "", "the probe ran before --json was checked"
        assert time.monotonic() - t0 < MAX_SECONDS
    assert stat.S_IFMT(os.lstat(path).st_mode) == stat.S_IFMT(mode)
