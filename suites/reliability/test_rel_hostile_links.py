"""Links planted where the harness writes (issue 28, class 1): a run folder, a cache or a report
folder made by someone else may hold a symlink at the very name the harness is about to write
(``report.html``, ``results_long.csv``, a QNN log, a history). The harness never writes through
one: a link is refused in one line (exit 2) or its NAME is replaced; the file it points to, in
a sentinel folder outside, never changes.

Before: `report RUN` followed a ``report.html -> ~/victim`` link planted in the run folder and
overwrote the victim with the report, and every atomic write deliberately followed a symlink to
a regular file (``--history``, ``--json``, ``results_long.csv``...).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from rel_support import copy_run, one_line_error, run_args, run_quick, shared_run, tree_state

from harness.core.errors import InputError

#: One xdist worker runs this module: its module fixtures (a run, a cache, an install) are made
#: once, not once on each worker (docs/testing.md).
pytestmark = pytest.mark.xdist_group("rel_hostile_links")

# Not `memory`: these tests judge refusals and files left unchanged, never a memory figure.

VICTIM_TEXT = "the victim's own line\n"


@pytest.fixture(scope="module")
def a_run(tmp_path_factory, model_cache) -> Path:
    return shared_run(tmp_path_factory, model_cache)


@pytest.fixture
def sentinel(tmp_path) -> Path:
    """A folder outside every folder the harness may write, holding the victim file."""
    folder = tmp_path / "sentinel"
    folder.mkdir()
    (folder / "victim").write_text(VICTIM_TEXT)
    return folder


def _link(path: Path, sentinel: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.unlink(missing_ok=True)
    path.symlink_to(sentinel / "victim")
    return path


def _untouched(sentinel: Path, before: dict) -> None:
    assert tree_state(sentinel) == before, "a file outside the harness's folders changed"
    assert (sentinel / "victim").read_text() == VICTIM_TEXT


def test_report_refuses_a_report_html_link_planted_in_the_run_folder(a_run, tmp_path, sentinel, model_cache):
    run = copy_run(a_run, tmp_path / "run")
    _link(run / "report.html", sentinel)
    before = tree_state(sentinel)
    proc = run_quick(["report", str(run)], model_cache)
    one_line_error(proc, 2, "report.html", "symbolic link")
    _untouched(sentinel, before)
    assert (run / "report.html").is_symlink()


def test_report_replaces_a_results_long_link_by_name_or_leaves_it(a_run, tmp_path, sentinel, model_cache):
    """results_long.csv is rewritten by `report` when it is older than results.csv: a link
    there is never written through (left as it is; the report is still written)."""
    run = copy_run(a_run, tmp_path / "run")
    link = _link(run / "results_long.csv", sentinel)
    os.utime(link, (1, 1), follow_symlinks=False)  # older than results.csv: report would rewrite it
    os.utime(sentinel / "victim", (1, 1))
    before = tree_state(sentinel)
    proc = run_quick(["report", str(run), "--out", str(tmp_path / "r.html")], model_cache)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    _untouched(sentinel, before)


@pytest.mark.parametrize("option", ["--history", "--json", "--out"])
def test_report_refuses_a_link_as_the_file_it_writes(a_run, tmp_path, sentinel, model_cache, option):
    """A link the user named (a history kept elsewhere, a --json, a --out) is refused too: the
    harness never writes through a link, whatever it points to; name the file itself."""
    baseline = copy_run(a_run, tmp_path / "baseline")
    meta = baseline / "metadata.json"
    meta.write_text(meta.read_text().replace('"started": "', '"started": "1999', 1))  # another run
    (baseline / "headline.json").unlink()
    (sentinel / "victim").write_text("")  # an empty history is a valid one to append to
    link = _link(tmp_path / "target", sentinel)
    before = tree_state(sentinel)
    args = ["report", str(a_run), "--baseline", str(baseline), option, str(link)]
    if option != "--out":
        args += ["--out", str(tmp_path / "r.html")]
    proc = run_quick(args, model_cache)
    one_line_error(proc, 2, option, "symbolic link")
    assert tree_state(sentinel) == before
    assert not (tmp_path / "r.html").exists()


def test_run_refuses_a_history_link_before_any_work(tmp_path, sentinel, model_cache):
    (sentinel / "victim").write_text("")
    link = _link(tmp_path / "history.csv", sentinel)
    before = tree_state(sentinel)
    cache, out = tmp_path / "cache", tmp_path / "run"
    proc = run_quick(run_args("--history", str(link), report=True, cache=cache, out=out), model_cache, timeout=120)
    one_line_error(proc, 2, "--history", "symbolic link")
    assert tree_state(sentinel) == before and not cache.exists() and not out.exists()


# ----------------------------------------------------------------------------- the writers themselves


def test_create_file_replaces_a_planted_link_by_name(tmp_path, sentinel):
    from harness.core.files import create_file

    before = tree_state(sentinel)
    path = _link(tmp_path / "w0.log", sentinel)
    with create_file(path) as handle:
        handle.write(b"mine\n")
    assert not path.is_symlink() and path.read_bytes() == b"mine\n"
    _untouched(sentinel, before)


def test_open_append_and_atomic_writes_refuse_a_link(tmp_path, sentinel):
    from harness.core.files import open_append, write_json_atomic, write_text_atomic

    before = tree_state(sentinel)
    path = _link(tmp_path / "history.csv", sentinel)
    for write in (
        lambda: open_append(path, "--history").write("x"),
        lambda: write_text_atomic(path, "x"),
        lambda: write_json_atomic(path, {}),
    ):
        with pytest.raises(InputError, match="symbolic link"):
            write()
    _untouched(sentinel, before)


def test_metadata_status_written_in_place_never_through_a_link(tmp_path, sentinel, monkeypatch):
    """The disk-full fallback of metadata.json (rewritten in place when no temp file fits)
    opens the name without following a link."""
    from harness.runner import sweep

    def disk_full(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(sweep, "write_json_atomic", disk_full)  # no temp file fits: the in-place path
    before = tree_state(sentinel)
    _link(tmp_path / "metadata.json", sentinel)
    assert sweep.record_status(tmp_path, {"status": "failed: x"}) is False
    _untouched(sentinel, before)


def test_a_workers_link_planted_in_the_run_folder_is_refused(tmp_path, sentinel):
    from harness.core.files import make_folder

    out = tmp_path / "run"
    out.mkdir()
    (out / "workers").symlink_to(sentinel)
    before = tree_state(sentinel)
    with pytest.raises(InputError, match="not a folder of ours"):
        make_folder(out / "workers" / "cpu-mapped-n1-r0", "workers folder", within=out)
    assert tree_state(sentinel) == before


def test_a_qnn_log_link_planted_in_the_cache_is_replaced_not_followed(tmp_path, sentinel):
    """The QNN child's log lives in the cache's logs/ folder (the cache may be someone else's):
    a link at its name is replaced, the file it names is never written."""
    from harness.targets.qnn.child import run_child

    before = tree_state(sentinel)
    log = _link(tmp_path / "cache" / "logs" / "m-htp-0123456789abcdef-compile.log", sentinel)
    result = run_child({"kind": "no-such-job"}, log, timeout_s=120)
    assert result["ok"] is False
    assert not log.is_symlink() and log.is_file()
    _untouched(sentinel, before)


def test_the_plugin_copy_of_a_run_leaves_links_out(tmp_path, sentinel):
    from harness.pytest_recorder import _not_copied

    folder = tmp_path / "run"
    folder.mkdir()
    (folder / "results.csv").write_text("x\n")
    (folder / "link.csv").symlink_to(sentinel / "victim")
    (folder / "workers").mkdir()
    os.mkfifo(folder / "fifo")
    assert sorted(_not_copied(str(folder), ["results.csv", "link.csv", "workers", "fifo"])) == [
        "fifo",
        "link.csv",
        "workers",
    ]


def test_plugin_report_dir_with_a_planted_report_link(tmp_path, sentinel):
    """pytest --fmw-report-dir DIR whose report.html is a link: the session's outcome stands,
    the report is not rendered (one line saying why) and the link's target is untouched."""
    project = tmp_path / "project"
    project.mkdir()
    (project / "test_x.py").write_text("def test_x():\n    assert True\n")
    report_dir = tmp_path / "reports"
    report_dir.mkdir()
    _link(report_dir / "report.html", sentinel)
    before = tree_state(sentinel)
    env = dict(os.environ)
    env.pop("PYTEST_XDIST_WORKER", None)
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "--fmw-report-dir", str(report_dir)],
        cwd=project,
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "no report rendered" in proc.stdout and "symbolic link" in proc.stdout, proc.stdout
    _untouched(sentinel, before)
