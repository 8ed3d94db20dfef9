"""A cache that trusts nothing: no pickle anywhere, every byte of an entry checked, its record doubted.

- The product never unpickles: no ``pickle`` import, every ``np.load`` with
  ``allow_pickle=False`` (read from the sources, so a new call cannot slip in).
- A ``reference.npz`` replaced by one holding a pickled object (by someone who can write to a
  shared cache, who also rewrites the entry's record to match) is never unpickled: the entry is
  rebuilt and the run is correct (before: the payload ran in every later run).
- A same-size overwrite of ``weights.bin`` between the blocks the old sampled hash read, its
  mtime put back, is caught by the full content hash: the entry is rebuilt with a note (before:
  every later run failed with "wrong output").
- An entry record naming files outside the entry (``../``, a device) is a corrupt entry: it
  is rebuilt, and nothing it names is opened.
"""

from __future__ import annotations

import ast
import json
import os
from pathlib import Path

import numpy as np
import pytest
from rel_support import run_args, run_quick

from harness.cache import ENTRY_RECORD, record_entry

PRODUCT = ("harness", "reports", "mapper_impl")
ROOT = Path(__file__).resolve().parents[2]


def _product_sources() -> list[Path]:
    return sorted(p for folder in PRODUCT for p in (ROOT / folder).rglob("*.py"))


def test_the_product_never_unpickles():
    bad = []
    for path in _product_sources():
        text = path.read_text(encoding="utf-8")
        where = path.relative_to(ROOT)
        if "allow_pickle=True" in text:
            bad.append(f"{where}: allow_pickle=True")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.Import | ast.ImportFrom):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
                bad += [
                    f"{where}:{node.lineno}: imports {n}"
                    for n in names
                    if n.split(".")[0] in ("pickle", "dill", "shelve", "cloudpickle")
                ]
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "load":
                owner = node.func.value
                if isinstance(owner, ast.Name) and owner.id in ("np", "numpy"):
                    keywords = {k.arg: k.value for k in node.keywords}
                    flag = keywords.get("allow_pickle")
                    if not (isinstance(flag, ast.Constant) and flag.value is False):
                        bad.append(f"{where}:{node.lineno}: np.load without allow_pickle=False")
    assert len(_product_sources()) > 50, "the product sources were not found"
    assert not bad, bad


def _run(model_cache: Path, tmp: Path, name: str, size: str = "8MiB"):
    args = run_args(modes="mapped", cache=tmp / "cache", out=tmp / name, model=("--model-size", size))
    return run_quick(args, model_cache)


def _rows_ok(out: Path) -> bool:
    from harness.core.schema import ResultRow
    from harness.core.tables import read_rows

    rows = read_rows(out / "results.csv", ResultRow)
    return bool(rows) and all(r.output_ok and not r.error for r in rows)


def _entry(tmp: Path) -> Path:
    (entry,) = [p for p in (tmp / "cache").iterdir() if not p.name.startswith(".") and p.name != "logs"]
    return entry


class _Payload:
    """Unpickling this makes a folder: the proof that something was unpickled."""

    def __init__(self, marker: Path) -> None:
        self.marker = str(marker)

    def __reduce__(self):
        return (os.mkdir, (self.marker,))


def test_a_pickled_reference_is_never_loaded_and_the_entry_is_rebuilt(model_cache, tmp_path):
    assert _run(model_cache, tmp_path, "a").returncode == 0
    entry = _entry(tmp_path)
    marker = tmp_path / "payload-ran"
    with np.load(entry / "reference.npz") as data:
        arrays = {k: data[k] for k in data.files}
    arrays["out:y"] = np.array([_Payload(marker)], dtype=object)
    np.savez(entry / "reference.npz", **arrays)
    (entry / ENTRY_RECORD).unlink()
    record_entry(entry)  # the hostile writer makes the record match
    second = _run(model_cache, tmp_path, "b")
    assert not marker.exists(), "a pickled object in the cache was unpickled"
    assert second.returncode == 0, second.stderr
    assert "reference.npz is not a plain array archive (ValueError); rebuilding it" in second.stderr
    assert _rows_ok(tmp_path / "b")


def test_a_same_size_overwrite_with_its_mtime_kept_is_rebuilt(model_cache, tmp_path):
    """24 MiB: above the 16 MiB up to which the old record hashed whole; 64 bytes at offset
    40 000 lie between its first and second sampled 4 KiB blocks."""
    assert _run(model_cache, tmp_path, "a", "24MiB").returncode == 0
    weights = _entry(tmp_path) / "weights.bin"
    st = weights.stat()
    with open(weights, "r+b") as handle:
        handle.seek(40_000)
        handle.write(np.full(16, 1e30, np.float32).tobytes())
    os.utime(weights, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert weights.stat().st_size == st.st_size
    second = _run(model_cache, tmp_path, "b", "24MiB")
    assert second.returncode == 0, second.stdout + second.stderr
    assert "weights.bin changed since the entry was built (content); rebuilding it" in second.stderr
    assert _rows_ok(tmp_path / "b"), "workers ran on the overwritten weights"


@pytest.mark.parametrize(
    "name",
    [
        "../../sentinel/victim",
        pytest.param("/dev/zero", marks=pytest.mark.slow),
        pytest.param("fifo", marks=pytest.mark.slow),
    ],
)
def test_a_record_naming_files_outside_the_entry_is_a_corrupt_entry(model_cache, tmp_path, name):
    sentinel = tmp_path / "sentinel"
    sentinel.mkdir()
    (sentinel / "victim").write_bytes(b"victim")
    assert _run(model_cache, tmp_path, "a").returncode == 0
    entry = _entry(tmp_path)
    if name == "fifo":
        os.mkfifo(entry / "fifo")
    record = json.loads((entry / ENTRY_RECORD).read_text())
    record["files"][name] = {"size": 6, "blake2b": "0" * 32}
    (entry / ENTRY_RECORD).write_text(json.dumps(record))
    second = _run(model_cache, tmp_path, "b")
    assert second.returncode == 0, second.stderr
    assert f"model cache entry {entry.name}:" in second.stderr and "rebuilding it" in second.stderr
    assert (sentinel / "victim").read_bytes() == b"victim"
    assert _rows_ok(tmp_path / "b")
