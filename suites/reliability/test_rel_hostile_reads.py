"""Reading a run folder made by someone else (issue 28, classes 3, 4 and 5): every file is bounded
in size and shape before it is parsed, no message quotes what a file holds, and no value of
the wrong type anywhere becomes a traceback.

- Unbounded reads: a results.csv of 200 MiB is refused from its size, before a byte is parsed
  (before: a 2 GiB one took 2.1 GB of memory); past the row cap a table is refused (before: 100k
  rows took 107 s, a per-cell rebuild of the schema's field map).
- Echoed contents: results.csv linked to ``/proc/self/environ`` is refused as not text; a foreign
  header or a bad cell is named by its place and kind (before: the error printed the environment).
- Tracebacks: a ``workers/`` symlink loop, a gate that is a number, a ``project_to`` that is a
  string, an initializer name that is not UTF-8 (before: each was a traceback).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from rel_support import copy_run, harness_env, one_line_error, run_args, run_quick, shared_run, tree_state

#: One xdist worker runs this module: its module fixtures (a run, a cache, an install) are made
#: once, not once on each worker (docs/testing.md).
pytestmark = pytest.mark.xdist_group("rel_hostile_reads")

# Not `memory`: these tests read forged copies of a real run, never a memory figure.

#: A value the test puts in the harness's environment: no message may print it.
SECRET = "s3cr3t-token-4f9c"


@pytest.fixture(scope="module")
def a_run(tmp_path_factory, model_cache) -> Path:
    return shared_run(tmp_path_factory, model_cache)


def _report(folder: Path, model_cache: Path, tmp_path: Path, *extra: str, preexec=None):
    import subprocess
    import sys

    from rel_support import ROOT

    env = harness_env(model_cache) | {"HARNESS_TEST_SECRET": SECRET}
    return subprocess.run(
        [sys.executable, "-m", "harness", "report", str(folder), "--out", str(tmp_path / "r.html"), *extra],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        stdin=subprocess.DEVNULL,
        timeout=300,
        preexec_fn=preexec,
    )


def _report_here(folder: Path, tmp_path: Path, *extra: str):
    """`harness report` called in this process (as `python -m harness` calls it, without the
    interpreter's start: most cases here only read a folder). An exception that escapes it is
    what a traceback would have been, and fails the test."""
    import contextlib
    import io
    import subprocess

    from harness.cli import main

    args = ["report", str(folder), "--out", str(tmp_path / "r.html"), *extra]
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(args)
    return subprocess.CompletedProcess(args, code, out.getvalue(), err.getvalue())


def _refused(folder: Path, model_cache: Path, tmp_path: Path, *expected: str, here: bool = True) -> str:
    before = tree_state(folder)
    proc = _report_here(folder, tmp_path) if here else _report(folder, model_cache, tmp_path)
    line = one_line_error(proc, 2, *expected)
    assert SECRET not in proc.stdout + proc.stderr
    assert tree_state(folder) == before and not (tmp_path / "r.html").exists()
    return line


# ----------------------------------------------------------------------------- unbounded reads


def test_a_huge_results_csv_is_refused_from_its_size(a_run, tmp_path, model_cache):
    run = copy_run(a_run, tmp_path / "run")
    with open(run / "results.csv", "r+b") as handle:
        handle.truncate(200 * 1024**2)  # sparse: no disk, 200 MiB by its size
    _refused(run, model_cache, tmp_path, "results.csv", "bytes, more than the 134217728 bytes allowed")


def test_a_table_past_its_row_cap_is_refused(a_run, tmp_path):
    from harness.core.errors import InputError
    from harness.core.schema import ResultRow
    from harness.core.tables import TABLE_MAX_ROWS, read_rows

    assert 10_000 <= TABLE_MAX_ROWS <= 100_000
    rows = len(read_rows(a_run / "results.csv", ResultRow))
    with pytest.raises(InputError, match=f"more than {rows - 1} rows"):
        read_rows(a_run / "results.csv", ResultRow, max_rows=rows - 1)


def test_reading_a_table_builds_its_column_map_once(a_run):
    """The column metadata is built once per row type, not once per cell: rebuilding it for
    every cell (60 per row) made 100 000 rows take 107 s."""
    from harness.core.cells import _column_meta
    from harness.core.schema import ResultRow
    from harness.core.tables import read_rows

    _column_meta.cache_clear()
    rows = read_rows(a_run / "results.csv", ResultRow)
    assert rows and _column_meta.cache_info().misses == 1


# ----------------------------------------------------------------------------- echoed contents


def test_results_linked_to_the_environment_is_refused_without_printing_it(a_run, tmp_path, model_cache):
    run = copy_run(a_run, tmp_path / "run")
    (run / "results.csv").unlink()
    (run / "results.csv").symlink_to("/proc/self/environ")
    _refused(run, model_cache, tmp_path, "results.csv", "not a text file (it holds NUL bytes)", here=False)


@pytest.mark.parametrize("where", ["header", "cell", "mode", "headline status"])
def test_what_a_file_holds_is_never_quoted(a_run, tmp_path, model_cache, where):
    run = copy_run(a_run, tmp_path / "run")
    results = run / "results.csv"
    lines = results.read_text().splitlines()
    if where == "header":
        lines[0] = f"{SECRET},{SECRET}2"
    elif where == "cell":
        lines[1] = f"cpu,mapped,{SECRET}," + lines[1].split(",", 3)[3]
    elif where == "mode":
        lines[1] = f"cpu,{SECRET}," + lines[1].split(",", 2)[2]
    results.write_text("\n".join(lines) + "\n")
    if where == "headline status":
        data = json.loads((run / "headline.json").read_text())
        data["status"] = SECRET
        (run / "headline.json").write_text(json.dumps(data))
    _refused(run, model_cache, tmp_path, "error: ")


# ----------------------------------------------------------------------------- tracebacks


def test_a_workers_symlink_loop_is_no_traceback(a_run, tmp_path, model_cache):
    import shutil

    run = copy_run(a_run, tmp_path / "run")
    shutil.rmtree(run / "workers")
    (run / "workers").symlink_to(run / "workers")
    proc = _report(run, model_cache, tmp_path)
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode in (0, 1) and (tmp_path / "r.html").is_file(), proc.stdout + proc.stderr


@pytest.mark.parametrize(
    "change, expected",
    [
        (lambda m: m.update(gates=[0.5]), "gates[0] is a number, expected a string"),
        (lambda m: m["run"].update(project_to="8x4GiB"), "run.project_to is a string, expected an object"),
        (lambda m: m["run"].update(project_to={"sessions": "8"}), "run.project_to.sessions is a string"),
        (lambda m: m.update(default_gates=[{"expr": ["a"]}]), "default_gates[0].expr is a list"),
        (lambda m: m["run"].update(processes=[[2]]), "run.processes[0] is a list, expected an integer"),
        (lambda m: m["run"].update(labels={"k": {"v": 1}}), "run.labels.<entry> is an object"),
        (lambda m: m.update(env={"hostname": [[1]]}), "env.hostname is a list, expected a string"),
        (lambda m: m["env"].update(ram_bytes="8GiB"), "env.ram_bytes is a string, expected an integer"),
        (lambda m: m.update(default_gates=[{"why": "x"}]), "default_gates[0].expr is missing or null"),
        (lambda m: m.update(gates=[None]), "gates[0] is missing or null"),
    ],
)
def test_a_metadata_entry_of_the_wrong_type_is_one_line(a_run, tmp_path, model_cache, change, expected):
    run = copy_run(a_run, tmp_path / "run")
    data = json.loads((run / "metadata.json").read_text())
    change(data)
    (run / "metadata.json").write_text(json.dumps(data))
    (run / "headline.json").unlink()
    _refused(run, model_cache, tmp_path, "metadata.json: ", expected)


def test_a_huge_repeat_in_metadata_is_no_memory_bomb(a_run, tmp_path, model_cache):
    """``run.repeat`` of 10**30 (found by a fuzzer: the rows were checked against a set of every
    repeat, which ran out of memory): the report judges the rows without building it."""
    run = copy_run(a_run, tmp_path / "run")
    data = json.loads((run / "metadata.json").read_text())
    data["run"]["repeat"] = 10**30
    (run / "metadata.json").write_text(json.dumps(data))
    (run / "headline.json").unlink()
    import resource

    def two_gib() -> None:  # a memory bomb ends in a MemoryError here, not in the machine's swap
        resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))

    proc = _report(run, model_cache, tmp_path, preexec=two_gib)
    assert proc.returncode in (0, 1) and "Traceback" not in proc.stderr, proc.stdout + proc.stderr
    assert "out of memory" not in proc.stderr


def test_an_initializer_name_that_is_not_utf8_is_one_line(tmp_path, model_cache):
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    weight = numpy_helper.from_array(np.ones((64, 64), np.float32), "WWWW")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "WWWW"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64])],
        [weight],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    path = tmp_path / "m.onnx"
    path.write_bytes(model.SerializeToString().replace(b"WWWW", b"W\xff\xfeW"))
    cache, out = tmp_path / "cache", tmp_path / "run"
    proc = run_quick(run_args(model=("--model", str(path)), cache=cache, out=out), model_cache, timeout=120)
    one_line_error(proc, 2, str(path), "is not UTF-8 text")
    assert not out.exists()


@pytest.mark.parametrize("case", ["headline value a string", "metadata a FIFO", "duplicate secret columns"])
def test_more_hostile_folders_are_one_line(a_run, tmp_path, model_cache, case):
    """Found by probing after the fixes above: a headline.json figure that is a string (before: a
    TypeError in the comparison), a metadata.json that is a FIFO (before: read as missing), a
    header naming one column twice (before: the names were echoed)."""
    run = copy_run(a_run, tmp_path / "run")
    if case == "headline value a string":
        data = json.loads((run / "headline.json").read_text())
        data["headline"]["mapped_pss_ratio"] = SECRET
        (run / "headline.json").write_text(json.dumps(data))
        expected = "headline.mapped_pss_ratio is a string, expected a number"
    elif case == "metadata a FIFO":
        (run / "metadata.json").unlink()
        os.mkfifo(run / "metadata.json")
        expected = "metadata.json: not a regular file"
    else:
        lines = (run / "results.csv").read_text().splitlines()
        lines[0] = lines[0].replace("target,mode", f"{SECRET},{SECRET}", 1)
        (run / "results.csv").write_text("\n".join(lines) + "\n")
        expected = "1 column name(s) appear twice"
    _refused(run, model_cache, tmp_path, expected)


def test_a_gates_file_that_is_no_gates_file_is_not_quoted(a_run, tmp_path, model_cache):
    """`--gates-file` naming someone's secrets (a ``.netrc``): its lines are not gates, and are
    not echoed; a line that starts with a known metric is still quoted, to show the typo."""
    secret = tmp_path / "netrc"
    secret.write_text(f"machine example.com login me password {SECRET}\n")
    proc = _report(a_run, model_cache, tmp_path, "--gates-file", str(secret))
    one_line_error(proc, 2, "expression 1: not a gate expression", "not quoted")
    assert SECRET not in proc.stdout + proc.stderr
    typo = tmp_path / "gates.txt"
    typo.write_text("mapped_pss_ratio<=0.5 if procesess>=2\n")
    proc = _report(a_run, model_cache, tmp_path, "--gates-file", str(typo))
    one_line_error(proc, 2, "unknown metric 'procesess'")
