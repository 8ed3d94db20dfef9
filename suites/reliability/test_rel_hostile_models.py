"""Hostile models and input files: refused in one line, exit 2, and nothing outside our folders changes.

Each model here is built with ``onnx`` in a tmp folder laid out as::

    tmp/models/m.onnx        the hostile model (and the files it may legitimately name)
    tmp/sentinel/victim      a file the model aims at with ``../sentinel/victim``

The model's external data, EPContext context binary or genai_config entry names a path out
of its folder (``../``, absolute, a symlink out), or a byte range that is not one (offset
``-4096``, ``abc``, past the end). Before containment (issue 16) the cpu target's Constant-node
lifting and the qnn target's static-shape copy hard-linked or copied model-chosen bytes to a
path of the model's choosing; each test snapshots the sentinel folder (names, sizes, bytes,
inode link counts) and the model folder before and after, and the run must change neither.

Input files given on the command line that are not regular files (``/dev/zero``, a FIFO, a
folder) or not what they claim (a ``.npz`` as ``--input``, an empty or lying ``.npy``, a JSON
nested 100 000 deep) are refused too, fast: a FIFO must not hang the harness (the timeout of
`run_quick` would fail the test).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
from rel_support import one_line_error, run_args, run_quick

#: Quick: the harness refuses these before any worker starts.
TIMEOUT_S = 60


def _snapshot(*folders: Path) -> dict[str, tuple]:
    """Every entry under ``folders``: kind, size, link count, bytes (the victim is small)."""
    found = {}
    for folder in folders:
        for path in sorted(folder.rglob("*")):
            st = os.lstat(path)
            data = path.read_bytes() if path.is_file() and not path.is_symlink() else b""
            found[str(path)] = (st.st_mode, st.st_size, st.st_nlink, data)
    return found


def _weight_model(tmp: Path, location: str, *, offset: str = "0", constant: bool = True, batch: int | str = 1) -> Path:
    """y = (x @ W) @ C: W (16x32 fp32, 2 KiB) external at ``location``/``offset``; C a 4 KiB
    Constant node (the cpu target lifts it, which used to link W's file into its scratch
    under the model's relative name); ``batch`` a name makes x dynamic (the qnn target then
    writes a static-shape copy beside linked weights)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    models, sentinel = tmp / "models", tmp / "sentinel"
    models.mkdir(parents=True, exist_ok=True)
    sentinel.mkdir(exist_ok=True)
    (sentinel / "victim").write_bytes(b"victim bytes" * 1024)
    (models / "w.bin").write_bytes(np.ones(16 * 32, np.float32).tobytes())
    nodes = [helper.make_node("MatMul", ["x", "W"], ["h"] if constant else ["y"])]
    if constant:
        value = numpy_helper.from_array(np.eye(32, dtype=np.float32), "Cv")
        nodes = [
            helper.make_node("Constant", [], ["C"], value=value),
            *nodes,
            helper.make_node("MatMul", ["h", "C"], ["y"]),
        ]
    weight = TensorProto(name="W", data_type=TensorProto.FLOAT, dims=[16, 32], data_location=TensorProto.EXTERNAL)
    for key, value in (("location", location), ("offset", offset), ("length", "2048")):
        entry = weight.external_data.add()
        entry.key, entry.value = key, value
    graph = helper.make_graph(
        nodes,
        "hostile",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 32])],
        [weight],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    path = models / "m.onnx"
    onnx.save(model, str(path))
    return path


def _run(model_cache: Path, tmp: Path, model: str, *extra: str, target: str = "cpu"):
    """``run --model MODEL`` (``model`` may be "--model-size=1MiB") on ``target``."""
    spec = ("--model", model) if not model.startswith("--") else tuple(model.split("=", 1))
    args = run_args(*extra, "--target", target, modes="mapped", cache=tmp / "cache", out=tmp / "out", model=spec)
    return run_quick(args, model_cache, timeout=TIMEOUT_S)


def _refused_untouched(model_cache: Path, tmp: Path, model: Path, *expected: str, target: str = "cpu", extra=()):
    """Run ``model``: exit 2, one line holding ``expected``, the sentinel and model folders
    unchanged, no run folder, nothing in the cache but (empty) folders of its own."""
    before = _snapshot(tmp / "sentinel", model.parent)
    proc = _run(model_cache, tmp, str(model), *extra, target=target)
    assert _snapshot(tmp / "sentinel", model.parent) == before, "a hostile model changed files outside our folders"
    line = one_line_error(proc, 2, *expected)
    assert not (tmp / "out").exists()
    cached = [p for p in (tmp / "cache").rglob("*") if p.is_file()] if (tmp / "cache").exists() else []
    assert not cached, cached
    return line


@pytest.mark.parametrize("target", ["cpu", "ort-native", "qnn"])
@pytest.mark.parametrize(
    ("how", "expected"),
    [
        ("climbs-out", ["external data file '../sentinel/victim'", "points outside the model's folder"]),
        ("absolute", ["is an absolute path"]),
        ("symlink-out", ["external data file 'link.bin'", "points outside the model's folder"]),
    ],
)
def test_external_data_outside_the_model_folder_is_refused_before_it_is_touched(
    model_cache, tmp_path, target, how, expected
):
    """The Constant to lift (cpu) and the dynamic input (qnn: a static copy would be written
    beside linked weights) are there: the paths that used to write where the model said."""
    location = {"climbs-out": "../sentinel/victim", "absolute": str(tmp_path / "sentinel" / "victim")}
    model = _weight_model(tmp_path, location.get(how, "link.bin"), batch="batch")
    if how == "symlink-out":
        (model.parent / "link.bin").symlink_to(tmp_path / "sentinel" / "victim")
    _refused_untouched(model_cache, tmp_path, model, *expected, target=target, extra=("--shape", "x=1x16"))


@pytest.mark.parametrize(
    ("offset", "expected"),
    [
        ("-4096", ["offset '-4096' is not a non-negative integer"]),
        ("abc", ["offset 'abc' is not a non-negative integer"]),
        ("1e3", ["offset '1e3' is not a non-negative integer"]),
        ("4096", ["the tensor ends at byte 6144, the file has 2048 bytes"]),
    ],
    ids=["negative", "not-a-number", "float", "past-the-end"],
)
def test_a_bad_external_data_range_is_one_line(model_cache, tmp_path, offset, expected):
    model = _weight_model(tmp_path, "w.bin", offset=offset)
    _refused_untouched(model_cache, tmp_path, model, "external data file 'w.bin' (of tensor 'W')", *expected)


def _epcontext_model(tmp: Path, context: str) -> Path:
    """An EPContext node (embed_mode 0) whose ep_cache_context names ``context``."""
    import onnx
    from onnx import TensorProto, helper

    models = tmp / "models"
    models.mkdir(parents=True, exist_ok=True)
    (tmp / "sentinel").mkdir(exist_ok=True)
    (tmp / "sentinel" / "victim").write_bytes(b"not a context binary" * 100)
    node = helper.make_node(
        "EPContext", ["x"], ["y"], domain="com.microsoft", embed_mode=0, ep_cache_context=context, main_context=1
    )
    node.name = "ctx"
    graph = helper.make_graph(
        [node],
        "ctx",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16])],
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]
    )
    model.ir_version = 9
    path = models / "m_ctx.onnx"
    onnx.save(model, str(path))
    return path


@pytest.mark.parametrize("context", ["../sentinel/victim", "/etc/passwd"])
def test_an_epcontext_binary_outside_the_model_folder_is_refused(model_cache, tmp_path, context):
    model = _epcontext_model(tmp_path, context)
    _refused_untouched(model_cache, tmp_path, model, "context binary", "EPContext node 'ctx'", target="qnn")


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        ({"model": {"decoder": {"filename": "../sentinel/victim.onnx"}}}, ["points outside the model's folder"]),
        ({"model": {"decoder": {"filename": "/etc/x.onnx"}}}, ["is an absolute path"]),
        ("[" * 100_000 + "]" * 100_000, ["genai_config.json", "nested more than"]),
    ],
    ids=["climbs-out", "absolute", "nested-100000-deep"],
)
def test_a_hostile_genai_config_is_one_line(model_cache, tmp_path, config, expected):
    folder = tmp_path / "models"
    model = _weight_model(tmp_path, "w.bin")
    (tmp_path / "sentinel" / "victim.onnx").write_bytes(model.read_bytes())
    (folder / "genai_config.json").write_text(config if isinstance(config, str) else json.dumps(config))
    before = _snapshot(tmp_path / "sentinel", folder)
    proc = _run(model_cache, tmp_path, str(folder))
    one_line_error(proc, 2, *expected)
    assert _snapshot(tmp_path / "sentinel", folder) == before


def test_two_initializers_with_one_name_are_refused_at_preparation(model_cache, tmp_path):
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    w = np.ones((16, 32), np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["y"])],
        "dup",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 32])],
        [numpy_helper.from_array(w, "W"), numpy_helper.from_array(w * 2, "W")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    (tmp_path / "sentinel").mkdir()
    (tmp_path / "models").mkdir()
    path = tmp_path / "models" / "dup.onnx"
    onnx.save(model, str(path))
    _refused_untouched(model_cache, tmp_path, path, "two initializers named 'W' in the main graph")


# -- input files that are not regular files, or not what they say -------------------------------


def _special(tmp: Path, kind: str) -> Path:
    if kind == "device":
        return Path("/dev/zero")
    if kind == "folder":
        return tmp
    fifo = tmp / "fifo.npy"
    os.mkfifo(fifo)
    return fifo


@pytest.mark.parametrize(
    ("kind", "expected"), [("device", "a device"), ("fifo", "a FIFO (named pipe)"), ("folder", "a folder")]
)
def test_a_gates_file_that_is_not_a_regular_file_is_refused_at_once(model_cache, tmp_path, kind, expected):
    """``--gates-file /dev/zero`` used to read 24 GiB; a FIFO blocked forever."""
    proc = _run(model_cache, tmp_path, "--model-size=1MiB", "--gates-file", str(_special(tmp_path, kind)))
    one_line_error(proc, 2, "gates file", expected, "not a regular file")
    assert not (tmp_path / "out").exists()


def test_a_gates_file_past_its_bound_is_refused(model_cache, tmp_path):
    from harness.core.inputfiles import GATES_FILE_MAX_BYTES

    big = tmp_path / "big.gates"
    big.write_text("# padding\n" * (GATES_FILE_MAX_BYTES // 10 + 1))
    proc = _run(model_cache, tmp_path, "--model-size=1MiB", "--gates-file", str(big))
    one_line_error(proc, 2, "gates file", f"more than the {GATES_FILE_MAX_BYTES} bytes allowed")


def _npy(tmp: Path, kind: str) -> Path:
    path = tmp / f"{kind}.npy"
    if kind == "npz":
        path = tmp / "a.npz"
        np.savez(path, x=np.ones((1, 16), np.float32))
    elif kind == "empty":
        path.write_bytes(b"")
    elif kind == "header-lies":  # declares 1.6e16 elements, holds 64 bytes
        from numpy.lib import format as npy

        with open(path, "wb") as handle:
            npy.write_array_header_1_0(handle, {"descr": "<f4", "fortran_order": False, "shape": (10**15, 16)})
            handle.write(np.ones(16, np.float32).tobytes())
    elif kind == "objects":
        np.save(path, np.array([{"a": 1}], dtype=object), allow_pickle=True)
    else:
        return _special(tmp, kind)
    return path


@pytest.mark.parametrize(
    ("kind", "expected"),
    [
        ("npz", "a .npz archive"),
        ("empty", "an empty file"),
        ("header-lies", "its header declares 16000000000000000 elements"),
        ("objects", "never unpickles"),
        ("fifo", "a FIFO (named pipe)"),
    ],
)
def test_a_bad_input_file_is_one_line(model_cache, tmp_path, kind, expected):
    model = _weight_model(tmp_path, "w.bin")
    proc = _run(model_cache, tmp_path, str(model), "--input", f"x={_npy(tmp_path, kind)}")
    one_line_error(proc, 2, "--input x", expected)
    assert not (tmp_path / "out").exists()


def test_a_model_file_that_is_a_fifo_does_not_hang(model_cache, tmp_path):
    fifo = tmp_path / "m.onnx"
    os.mkfifo(fifo)
    proc = _run(model_cache, tmp_path, str(fifo))
    one_line_error(proc, 2, "--model", "a FIFO (named pipe), not a regular file")


def test_the_lifted_constant_path_still_runs_a_contained_model(model_cache, tmp_path):
    """The refusals above are not a refusal of everything: the same model with its weights
    inside its folder is prepared (Constant lifted, weights linked) and every worker checks."""
    model = _weight_model(tmp_path, "w.bin")
    proc = _run(model_cache, tmp_path, str(model))
    assert proc.returncode == 0, proc.stderr
    from harness.core.schema import ResultRow
    from harness.core.tables import read_rows

    rows = read_rows(tmp_path / "out" / "results.csv", ResultRow)
    assert rows and all(r.output_ok and not r.error for r in rows), [r.error for r in rows]


@pytest.mark.parametrize(("target", "depth"), [("cpu", 3), ("ort-native", 3), ("qnn", 2)])
def test_a_model_cannot_overwrite_a_file_beside_the_cache(model_cache, tmp_path, target, depth):
    """The attack of issue 16, exactly: the model's folder and the cache's scratch lie at
    different depths, so one ``../`` chain reads the attacker's bytes beside the model and,
    taken relative to the scratch, lands on a file beside the cache. Before containment the
    cpu target's lifted-Constant link (scratch/lifted/, depth 3) and the qnn target's static
    copy (scratch/, depth 2) hard-linked, then copied, the attacker's file over the victim."""
    location = "../" * depth + "S/victim"
    home = tmp_path.joinpath(*["m"] * (depth - 1))  # the model at home/models/m.onnx
    model = _weight_model(home, location, batch="batch")
    attacker = tmp_path / "S"
    attacker.mkdir()
    (attacker / "victim").write_bytes(np.full(16 * 32, 7, np.float32).tobytes())
    victim_folder = tmp_path / "deep" / "S"  # beside the cache tmp/deep/cache
    victim_folder.mkdir(parents=True)
    (victim_folder / "victim").write_bytes(b"the user's own file")
    before = _snapshot(victim_folder, attacker, model.parent)
    args = run_args(
        "--target",
        target,
        "--shape",
        "x=1x16",
        modes="mapped",
        cache=tmp_path / "deep" / "cache",
        out=tmp_path / "out",
        model=("--model", str(model)),
    )
    proc = run_quick(args, model_cache, timeout=TIMEOUT_S)
    assert _snapshot(victim_folder, attacker, model.parent) == before, "the model overwrote a file beside the cache"
    one_line_error(proc, 2, f"external data file '{location}'", "points outside the model's folder")
