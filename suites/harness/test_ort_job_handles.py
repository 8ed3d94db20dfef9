"""The model cache on a fresh Windows machine (issue 44 item 2): nothing the preparation's ORT
child is handed may outlive it open. Under Wine, ORT's DXGI probe in that child started
explorer.exe, which inherited the child's stdout (a log file in the job's temporary folder) and
lived on: deleting the folder failed with a sharing violation (cpu-run on an empty cache failed
3 of 5 times, "cannot write the model (Sharing violation); free space ..."). The child's
standard handles are now the null device, and the message names a sharing violation."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import psutil
import pytest

from harness.cache import write_problem
from harness.core.errors import InputError
from harness.prep.ortjob import SLOW_ENV, run_ort_job


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/PID/fd")
def test_the_ort_child_holds_no_file_of_the_job_folder_as_a_standard_handle(monkeypatch):
    monkeypatch.setenv(SLOW_ENV, "0.5")  # the child waits in the test hook: time to look at it
    seen: dict[str, str] = {}

    def look(status: str) -> None:
        if "test hook" not in status or seen:
            return
        (child,) = [p for p in psutil.Process().children() if "harness.prep.ortchild" in p.cmdline()]
        seen.update({fd: os.readlink(f"/proc/{child.pid}/fd/{fd}") for fd in ("0", "1", "2")})

    with pytest.raises(InputError, match="unknown job kind"):
        run_ort_job({"kind": "none", "label": "probe"}, "probe", look)
    assert seen == {"0": os.devnull, "1": os.devnull, "2": os.devnull}, seen


def test_a_sharing_violation_is_named_not_taken_for_a_full_disk(tmp_path):
    locked = OSError(13, "Sharing violation", str(tmp_path / "ort.log"))
    locked.winerror = 32  # what Windows (and Wine) give for a file another process holds open
    text = write_problem(locked)
    assert text.startswith(f"sharing violation: {tmp_path / 'ort.log'} is open in another process"), text
    assert "free space" not in text
    full = OSError(28, "No space left on device")
    assert write_problem(full) == "No space left on device; free space or choose another --cache-dir"


def test_a_build_failing_on_a_sharing_violation_says_so(tmp_path):
    """Through `cached_build` itself: the one-line error the user sees."""
    from harness.cache import cached_build

    def build(scratch: Path) -> None:
        err = OSError(13, "Sharing violation", str(scratch / "x"))
        err.winerror = 32
        raise err

    with pytest.raises(InputError, match=r"cannot write the model \(sharing violation: .*x is open in another"):
        cached_build(tmp_path / "entry", build, lambda path: path)
    assert [p.name for p in tmp_path.iterdir()] == [], "the scratch folder is removed"
