"""Issue 42: a folder is a run folder only when it is provably the harness's (the marker only
the harness writes); `--replace` removes only what the harness wrote and recorded; every output
path (`capacity --json`, `doctor --json`, `report --out`, `--history`) goes through one check
before any work; a capacity.json is believed only in the capacity run that wrote it.

Before: a metadata.json with format_version, status and a dict run (or a results.csv with the
harness's header) made a run folder, and `--replace` removed it and the folder's logs/;
`capacity --json` overwrote another run's metadata.json; a planted capacity.json survived
`--replace` and a run read as "fits, measured".
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from rel_support import one_line_error, record_as_written, run_args, run_quick

from harness.core.errors import InputError
from harness.core.runfiles import MARKER_NAME, check_output, is_run_folder
from harness.runner.outdir import check_out

pytestmark = pytest.mark.xdist_group("rel_ours")

LOOK_ALIKE = {"format_version": 3, "status": "complete", "run": {"run_id": "mine"}}


@pytest.fixture(scope="module")
def a_run(tmp_path_factory, model_cache):
    out = tmp_path_factory.mktemp("ours") / "run"
    proc = run_quick(run_args(modes="mapped", out=out), model_cache)
    assert proc.returncode == 0, proc.stderr
    return out


def _copy(run: Path, to: Path) -> Path:
    shutil.copytree(run, to, ignore=shutil.ignore_patterns(".harness.lock"))
    return to


def _header(run: Path) -> str:
    return (run / "results.csv").read_text().splitlines()[0] + "\n"


@pytest.mark.parametrize("kind", ["metadata", "results-header", "both"])
def test_a_look_alike_folder_is_refused_and_kept_by_replace(a_run, model_cache, tmp_path, kind):
    """Someone's folder with the harness's file names and keys (no marker): --replace refuses it
    in one line before work, and every file stays."""
    out = tmp_path / "theirs"
    (out / "logs").mkdir(parents=True)
    (out / "logs" / "mine.log").write_text("keep\n")
    if kind in ("metadata", "both"):
        (out / "metadata.json").write_text(json.dumps(LOOK_ALIKE))
    if kind in ("results-header", "both"):
        (out / "results.csv").write_text(_header(a_run))
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    proc = run_quick(run_args("--replace", modes="mapped", out=out), model_cache, timeout=120)
    one_line_error(proc, 2, f"--out {out}", "neither empty nor a run folder")
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before


@pytest.mark.parametrize("where", ["logs/notes.txt", "workers/mine/data.bin", "workers/extra.txt"])
def test_replace_refuses_a_run_folder_holding_files_the_harness_did_not_write(a_run, tmp_path, where):
    """A real run folder with someone's file added under its folders: refused whole, nothing removed."""
    out = _copy(a_run, tmp_path / "run")
    planted = out / where
    planted.parent.mkdir(parents=True, exist_ok=True)
    planted.write_text("someone's\n")
    with pytest.raises(InputError, match="holds files the harness did not write"):
        check_out(out, tmp_path / "cache", replace=True)
    assert planted.read_text() == "someone's\n" and (out / "results.csv").is_file()


def test_replace_removes_the_previous_run_and_its_capacity_json(a_run, model_cache, tmp_path):
    """A run folder of ours: --replace takes every file it wrote and recorded, a capacity run's
    capacity.json too (a kept one would be read as this run's)."""
    out = _copy(a_run, tmp_path / "run")
    (out / "capacity.json").write_text("{}\n")
    record_as_written(out, "capacity.json")
    proc = run_quick(run_args("--replace", modes="mapped", out=out), model_cache, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert not (out / "capacity.json").exists()
    assert is_run_folder(out)
    recorded = json.loads((out / MARKER_NAME).read_text())["files"]
    assert {"results.csv", "metadata.json"} <= set(recorded) and any(n.startswith("workers/") for n in recorded)


@pytest.mark.parametrize("name", ["capacity.json", "bench.json", "results_long.csv"])
def test_replace_refuses_a_run_file_the_run_did_not_record(a_run, tmp_path, name):
    """A run file the marker does not list (someone's bench.json beside a run's tables) is not
    the harness's to remove: refused, kept."""
    out = _copy(a_run, tmp_path / "run")
    if name == "results_long.csv" and (out / name).exists():
        marker = json.loads((out / MARKER_NAME).read_text())
        marker["files"].remove(name)
        (out / MARKER_NAME).write_text(json.dumps(marker))
    else:
        (out / name).write_text("someone's\n")
    before = (out / name).read_bytes()
    with pytest.raises(InputError, match=f"holds files the harness did not write \\({name}"):
        check_out(out, tmp_path / "cache", replace=True)
    assert (out / name).read_bytes() == before


def test_a_forged_marker_is_not_a_run_folder(tmp_path):
    for text in ("{}", '{"harness": "qnn-fmw-harness run folder", "files": ["../x"]}', "[]", "\0"):
        (tmp_path / MARKER_NAME).write_text(text)
        assert not is_run_folder(tmp_path), text


@pytest.mark.parametrize("name", ["metadata.json", "results.csv", "summary.csv", "workers/x.json", MARKER_NAME])
def test_capacity_json_onto_another_runs_file_is_refused_before_work(a_run, model_cache, tmp_path, name):
    """`capacity --json` onto another run's files: one line, exit 2, before any probe (no
    --memory-limit controller needed: the check comes first), the file unchanged."""
    target = a_run / name
    before = target.read_bytes() if target.is_file() else None
    out = tmp_path / "cap"
    args = ["capacity", "--model-size", "8MiB", "--memory-limit", "1GiB", "--out", str(out), "--json", str(target)]
    proc = run_quick(args, model_cache, timeout=120)
    one_line_error(proc, 2, "--json", "own files")
    assert (target.read_bytes() if target.is_file() else None) == before
    assert not out.exists()


def test_capacity_json_onto_its_own_out_is_refused_before_work(model_cache, tmp_path):
    out = tmp_path / "cap"
    args = ["capacity", "--model-size", "8MiB", "--memory-limit", "1GiB", "--out", str(out)]
    proc = run_quick([*args, "--json", str(out / "results.csv")], model_cache, timeout=120)
    one_line_error(proc, 2, "--json", "own files")
    assert not out.exists()


def test_doctor_json_onto_a_runs_file_is_refused(a_run, model_cache):
    before = (a_run / "summary.csv").read_bytes()
    proc = run_quick(["doctor", "--target", "qnn", "--json", str(a_run / "summary.csv")], model_cache, timeout=120)
    one_line_error(proc, 2, "--json", "own files")
    assert (a_run / "summary.csv").read_bytes() == before


def test_every_output_check_protects_run_folders(a_run, tmp_path):
    for path in (a_run / "headline.json", a_run / "workers" / "new.txt"):
        with pytest.raises(InputError, match="own files"):
            check_output(path, "--x")
    assert check_output(a_run / "report.html", "--out", may_be="report.html")
    assert check_output(tmp_path / "free.json", "--x")


def test_a_planted_capacity_json_is_not_believed(a_run, tmp_path):
    """A capacity.json in a run that is not a capacity run (or one of another limit) is not read."""
    from harness.core.rundata import load_run

    out = _copy(a_run, tmp_path / "run")
    mode = {"max_processes": 4, "projected_processes": 4, "capped": False, "probes": []}
    doc = {"format_version": 1, "memory_limit_bytes": 256 << 20, "modes": {"mapped": mode, "heap": mode}}
    (out / "capacity.json").write_text(json.dumps(doc))
    assert load_run(out).capacity is None


def _chattr(flag: str, path: Path) -> bool:
    import subprocess

    return shutil.which("chattr") is not None and subprocess.run(["chattr", flag, str(path)]).returncode == 0


@pytest.mark.parametrize("case", ["missing-folder", "append-only-file", "append-only-folder", "immutable-file"])
def test_capacity_json_that_cannot_be_written_is_refused_before_the_search(model_cache, tmp_path, case):
    """Before: a --json in a folder that does not exist (or an append-only file, which even root
    cannot replace) passed the check and failed after the whole search."""
    folder = tmp_path / "jsons"
    folder.mkdir()
    target = folder / ("missing" if case == "missing-folder" else "") / "cap.json"
    flagged = None
    if case.endswith("-file"):
        target.write_text("{}\n")
        flagged = target
    elif case == "append-only-folder":
        flagged = folder
    flag = "+i" if case == "immutable-file" else "+a"
    if flagged is not None and not _chattr(flag, flagged):
        pytest.skip("needs chattr and a file system with inode flags (root)")
    out = tmp_path / "cap"
    try:
        args = ["capacity", "--model-size", "8MiB", "--memory-limit", "1GiB", "--out", str(out), "--json", str(target)]
        proc = run_quick(args, model_cache, timeout=120)
        one_line_error(proc, 2, "--json")
        assert not out.exists()
    finally:
        if flagged is not None:
            _chattr(flag.replace("+", "-"), flagged)


@pytest.mark.parametrize(
    "cap, claimed, believed", [(1, 1, True), (1, 10**30, False), (1, 2, False), (8, 1, False), (1, 0, False)]
)
def test_a_capacity_its_run_does_not_show_is_not_believed(a_run, tmp_path, cap, claimed, believed):
    """In a capacity run (kind, limit and cap in metadata.json; its one probe: mapped N=1, fit),
    a capacity.json is believed only when the probes show it: N fit, N + 1 did not (or N is the
    cap). 10^30 sessions, more than the cap, 1 of 8 without a failed N=2 probe, 0 where N=1 fit:
    forged, not shown as measured."""
    from harness.core.rundata import load_run

    out = _copy(a_run, tmp_path / "run")
    meta = json.loads((out / "metadata.json").read_text())
    meta["kind"] = "capacity"
    meta["run"].update(memory_limit_bytes=256 << 20, max_processes=cap)
    (out / "metadata.json").write_text(json.dumps(meta))
    mode = {"max_processes": claimed, "projected_processes": 4, "capped": claimed == cap, "probes": []}
    doc = {"format_version": 1, "memory_limit_bytes": 256 << 20, "modes": {"mapped": mode}}
    (out / "capacity.json").write_text(json.dumps(doc))
    assert (load_run(out).capacity is not None) is believed
