"""Cold start: --page-cache cold evicts the weights' pages before each group, verifies it with
mincore, records it, and the report shows init + first inference per mode side by side."""

from __future__ import annotations

import json
import mmap
import sys

import pytest
from models_support import ONE, assert_all_ok

from harness.core.errors import InputError
from harness.runner import pagecache

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="posix_fadvise + mincore: Linux")


@pytest.fixture
def weights_file(tmp_path):
    path = tmp_path / "weights.bin"
    path.write_bytes(bytes(range(256)) * (8 * 1024))  # 2 MiB
    return path


@linux_only
def test_evict_then_warm_is_measured(weights_file):
    cold = pagecache.make_cold([weights_file])
    assert (cold.state, cold.resident_bytes) == ("cold", 0), cold
    pagecache.warm(weights_file)
    assert pagecache.measure([weights_file], "warm").resident_bytes == weights_file.stat().st_size


@linux_only
def test_pages_another_mapping_holds_make_it_unverified(weights_file):
    """Pages mapped (and touched) by a process are not dropped: the group is not called cold."""
    with open(weights_file, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as view:
        assert sum(view[i] for i in range(0, len(view), mmap.PAGESIZE)) >= 0  # touch every page
        state = pagecache.make_cold([weights_file])
    assert state.state == "cold-unverified" and "stayed in the page cache" in state.note


def test_windows_cannot_evict_without_admin(monkeypatch):
    monkeypatch.setattr(pagecache.sys, "platform", "win32")
    with pytest.raises(InputError, match="administrator rights"):
        pagecache.check_cold_supported()


@linux_only
def test_cold_run_records_and_reports_start_up_per_mode(run_harness, tmp_path):
    # a private cache: a weights file of the shared cache can be mapped by a test running beside
    # this one (xdist), and pages a process maps are not evicted (the run would be cold-unverified)
    cache = str(tmp_path / "cache")
    outcome = run_harness(
        "run", "--model-size", "16MiB", "--page-cache", "cold", "--processes", "1", "--cache-dir", cache, "--quiet"
    )
    rows = assert_all_ok(outcome, workers=2)
    assert {r.page_cache for r in rows} == {"cold"}
    assert all(
        r.weights_resident_bytes is not None and r.weights_resident_bytes <= 0.01 * r.weights_bytes for r in rows
    )
    assert json.loads((outcome.out / "metadata.json").read_text())["run"]["page_cache"] == "cold"
    assert {s.page_cache for s in outcome.summary()} == {"cold"}
    html = (outcome.out / "report.html").read_text(encoding="utf-8")
    section = html[html.index("Start-up and latency") :]
    assert "Init + first inference" in section and "cold: the weights&#39; pages were evicted" in section


def test_warm_run_says_the_weights_were_resident(run_harness):
    rows = assert_all_ok(run_harness("run", "--model-size", "4MiB", *ONE), workers=2)
    assert {r.page_cache for r in rows} == {"warm"}
    if sys.platform.startswith("linux"):  # just read; most of it still cached on a busy machine too
        assert all(r.weights_resident_bytes > 0.5 * r.weights_bytes for r in rows)
