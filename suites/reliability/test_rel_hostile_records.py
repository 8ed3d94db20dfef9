"""A cache entry's record and manifest made by someone else (issue 28, classes 3 and 8): whoever
can write to a shared cache can rewrite an entry AND its record to match, so the record must
cover every file a worker loads, and the manifest must be bounded and shaped before it is used.

- a record that names no file verifies nothing: corrupt (before: a damaged weights.bin under an
  empty record was used, and every worker computed the wrong output);
- a file in the entry the record does not name (one planted beside the real ones): corrupt;
- a manifest whose ``onnx_file`` points outside the entry: corrupt (before: the workers loaded
  whatever ONNX file it named);
- a manifest nested 100 000 deep (before: a traceback) or listing a million outputs (before: a
  hang): corrupt.

Each is rebuilt once, with a note on stderr that says what is wrong without quoting the file,
and the run is then correct.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from rel_support import run_args, run_quick

from harness.cache import ENTRY_RECORD, record_entry

#: One xdist worker runs this module: its module fixtures (a run, a cache, an install) are made
#: once, not once on each worker (docs/testing.md).
pytestmark = pytest.mark.xdist_group("rel_hostile_records")

# Not `memory`: these tests judge corrupt cache entries, never a memory figure.


@pytest.fixture(scope="module")
def built_cache(tmp_path_factory, model_cache) -> Path:
    """A cache holding the small generated model (built once; each test forges a copy)."""
    folder = tmp_path_factory.mktemp("records")
    proc = run_quick(run_args(modes="mapped", cache=folder / "cache", out=folder / "run"), model_cache)
    assert proc.returncode == 0, proc.stderr
    return folder / "cache"


@pytest.fixture
def entry(built_cache, tmp_path) -> Path:
    cache = shutil.copytree(built_cache, tmp_path / "cache")
    (found,) = [p for p in cache.iterdir() if not p.name.startswith(".") and p.name != "logs"]
    return found


def _rerecord(entry: Path) -> None:
    """What the hostile writer does last: a record that matches the forged files."""
    (entry / ENTRY_RECORD).unlink()
    record_entry(entry)


def _run_on(entry: Path, model_cache: Path, tmp_path: Path):
    args = run_args(modes="mapped", cache=entry.parent, out=tmp_path / "run")
    return run_quick(args, model_cache)


def _rebuilt(proc, tmp_path: Path, why: str) -> None:
    from harness.core.schema import ResultRow
    from harness.core.tables import read_rows

    assert proc.returncode == 0, proc.stdout + proc.stderr
    notes = [line for line in proc.stderr.splitlines() if "rebuilding it" in line]
    assert len(notes) == 1 and why in notes[0], proc.stderr
    rows = read_rows(tmp_path / "run" / "results.csv", ResultRow)
    assert rows and all(r.output_ok and not r.error for r in rows)


def _edit_manifest(entry: Path, change) -> None:
    data = json.loads((entry / "manifest.json").read_text())
    change(data)
    (entry / "manifest.json").write_text(json.dumps(data))


def test_a_record_naming_no_file_verifies_nothing(entry, model_cache, tmp_path):
    weights = entry / "weights.bin"
    data = bytearray(weights.read_bytes())
    data[4096:8192] = bytes(4096)  # damaged weights...
    weights.write_bytes(bytes(data))
    (entry / ENTRY_RECORD).write_text(json.dumps({"files": {}}))  # ...under a record that checks nothing
    _rebuilt(_run_on(entry, model_cache, tmp_path), tmp_path, "names no file: it verifies nothing")


def test_a_file_the_record_does_not_name_is_a_corrupt_entry(entry, model_cache, tmp_path):
    (entry / "extra.onnx").write_bytes((entry / "model.onnx").read_bytes())
    _rebuilt(_run_on(entry, model_cache, tmp_path), tmp_path, "holds 1 file(s) its .entry.json does not name")


def test_a_manifest_naming_an_onnx_file_outside_the_entry_is_corrupt(entry, model_cache, tmp_path):
    outside = tmp_path / "elsewhere" / "secret-model.onnx"
    outside.parent.mkdir()
    outside.write_bytes((entry / "model.onnx").read_bytes())
    _edit_manifest(entry, lambda m: m.update(onnx_file=str(outside)))
    _rerecord(entry)
    proc = _run_on(entry, model_cache, tmp_path)
    _rebuilt(proc, tmp_path, "manifest.json names an ONNX file outside the entry")
    assert "secret-model" not in proc.stderr


def _deep(entry: Path) -> None:
    text = (entry / "manifest.json").read_text()
    (entry / "manifest.json").write_text(text[:-2] + ', "deep": ' + "[" * 100_000 + "]" * 100_000 + "}\n")


@pytest.mark.parametrize(
    "change, why",
    [
        (_deep, "nested more than 16 levels deep"),
        (lambda e: _edit_manifest(e, lambda m: m.update(outputs=list(map(str, range(10**6))))), "more than the 4096"),
        (lambda e: _edit_manifest(e, lambda m: m.update(tensors="W")), "tensors is a string, expected a list"),
        (lambda e: _edit_manifest(e, lambda m: m["tensors"][0].update(offset=-4096)), "a negative offset"),
        (lambda e: _edit_manifest(e, lambda m: m.update(onnx_file="../../x/m.onnx")), "an ONNX file outside the entry"),
        (lambda e: _edit_manifest(e, lambda m: m["tensors"][0].update(onnx_type=999)), "an element type ONNX does not"),
    ],
    ids=["nested 100 000 deep", "a million outputs", "tensors a string", "negative offset", "climbing", "bad type"],
)
def test_a_manifest_out_of_bounds_or_shape_is_a_corrupt_entry(entry, change, why):
    """What the cache's load says of each (the runs above show a corrupt entry is rebuilt and the
    run correct): a CorruptEntry naming what is wrong (before: a RecursionError, a hang, a
    TypeError, an entry used as it was)."""
    from harness.core.errors import CorruptEntry
    from harness.prep.folder import PreparedModel

    change(entry)
    with pytest.raises(CorruptEntry, match=why):
        PreparedModel.load(entry)


def test_an_entry_that_is_a_symlink_is_rebuilt_and_its_target_left_alone(entry, model_cache, tmp_path):
    """An entry of the cache must be a folder of the cache: one replaced by a link to a folder
    elsewhere (someone's model folder, with a matching record) is not used; the link is removed,
    never what it points to."""
    import os

    elsewhere = tmp_path / "elsewhere"
    shutil.move(entry, elsewhere)
    os.symlink(elsewhere, entry)
    before = sorted(p.name for p in elsewhere.iterdir())
    _rebuilt(_run_on(entry, model_cache, tmp_path), tmp_path, "not a folder of the cache")
    assert sorted(p.name for p in elsewhere.iterdir()) == before
    assert entry.is_dir() and not entry.is_symlink()
