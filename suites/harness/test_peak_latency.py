"""The parts of issue 20 on their own: the peak sampler against a real allocation in this
process, the system watch against the real /proc/meminfo, the Windows structures' layout, the
latency statistics against numpy and statistics, the fits and peak projection arithmetic."""

from __future__ import annotations

import ctypes
import statistics
import sys

import numpy as np
import pytest

from harness.contract import phases
from harness.core import fits, latency
from harness.core.schema import SummaryRow
from harness.core.summary import RATIO_COLUMNS
from harness.runner import peak, winmem
from harness.runner.syswatch import SystemWatch

MIB = 1024**2
linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")


@linux_only
def test_the_worker_s_phase_change_samples_see_an_allocation_and_its_phase():
    """64 MiB written in the "create" phase and still held when the worker enters first_run:
    the sample that closes "create" saw it, tagged create; the kernel's RSS peak covers it."""
    sampler = peak.PeakSampler().start()
    before = sampler.peak
    sampler.mark("create")
    block = np.ones(64 * MIB, dtype=np.uint8)  # every page written: private, resident
    sampler.mark("first_run")
    del block
    found = sampler.stop()
    assert found.peak_private_bytes >= before + 60 * MIB
    assert found.peak_phase == "create"
    assert found.peak_rss_bytes >= found.peak_private_bytes * 0.98
    assert found.samples >= 4 and found.peak_shared_bytes > 0


def test_mark_without_a_sampler_is_a_no_op_and_phases_are_checked():
    phases.mark("load")  # no sampler in this process: nothing happens
    assert peak.stop().peak_private_bytes is None
    with pytest.raises(ValueError, match="unknown phase"):
        phases.mark("warm-up")
    with pytest.raises(ValueError, match="unknown phase"):
        peak.PeakSampler().mark("warm-up")


def test_the_sampler_hears_the_phase_hook_while_it_runs():
    """A target announces phases through `harness.contract.phases`; the worker's sampler is
    the hook from `peak.start` to `peak.stop`, and nobody listens afterwards."""
    sampler = peak.start()
    try:
        phases.mark("create")
        assert sampler.phase == "create"
    finally:
        peak.stop()
    phases.mark("first_run")
    assert sampler.phase == "create"


@linux_only
def test_system_watch_reads_meminfo():
    with SystemWatch() as watch:
        watch.sample()
    found = watch.stop()
    assert found.samples >= 2
    assert 0 < found.min_available_bytes <= found.start_available_bytes
    assert found.max_committed_bytes >= found.start_committed_bytes > 0
    assert found.commit_limit_bytes > 0 and found.overcommit_mode in (0, 1, 2)


@pytest.mark.skipif(ctypes.sizeof(ctypes.c_size_t) != 8, reason="the 64-bit layout (Windows on ARM64 and x64)")
def test_windows_structures_have_the_sdk_layout():
    """sizeof as the 64-bit Windows SDK has it (80 and 104 bytes): the fields are fixed-width,
    so Linux's 64-bit ctypes lays them out the same."""
    assert ctypes.sizeof(winmem.PROCESS_MEMORY_COUNTERS_EX) == 80
    assert ctypes.sizeof(winmem.PERFORMANCE_INFORMATION) == 104
    assert winmem.PROCESS_MEMORY_COUNTERS_EX.PrivateUsage.offset == 72
    assert winmem.PERFORMANCE_INFORMATION.PageSize.offset == 80


@pytest.mark.skipif(sys.platform == "win32", reason="off Windows only")
def test_windows_calls_refuse_cleanly_elsewhere():
    assert winmem.performance_info() is None
    with pytest.raises(OSError, match="Windows only"):
        winmem.ProcessCounters()


def test_statistics_match_numpy_and_statistics():
    rng = np.random.default_rng(7)
    samples = list(rng.gamma(2.0, 0.01, size=57))
    found = latency.stats(samples, wall_s=2.0)
    expected = np.percentile(samples, [50, 90, 95, 99])
    assert [found.p50, found.p90, found.p95, found.p99] == pytest.approx(list(expected))
    assert found.mean == pytest.approx(statistics.fmean(samples))
    assert found.stdev == pytest.approx(statistics.stdev(samples))
    assert (found.min, found.max, found.runs) == (min(samples), max(samples), 57)
    assert found.inferences_per_s == pytest.approx(57 / 2.0)


def test_pooled_stdev_equals_the_stdev_of_every_sample():
    class Row:
        def __init__(self, values):
            s = latency.stats(values)
            self.runs, self.latency_mean_s, self.latency_stdev_s = s.runs, s.mean, s.stdev

    a, b = [0.01, 0.02, 0.03, 0.05], [0.1, 0.12, 0.11, 0.13]
    assert latency.pooled_stdev([Row(a), Row(b)]) == pytest.approx(statistics.stdev(a + b))


def test_timed_runs_spread_over_threads_count_every_run():
    calls = []
    samples, wall = latency.timed_runs(lambda: calls.append(1), runs=7, concurrency=3)
    assert len(samples) == len(calls) == 7 and wall >= 0
    with pytest.raises(ZeroDivisionError):
        latency.timed_runs(lambda: 1 / 0, runs=2, concurrency=2)


def test_latency_and_peak_ratios_are_gate_metrics():
    from harness.core.gates import known_metrics

    for name in ("latency_p50_ratio", "first_run_ratio", "startup_ratio", "throughput_ratio", "peak_private_ratio"):
        assert name in RATIO_COLUMNS and name in known_metrics()


def _row(mode, peak_bytes, **system):
    base = {"system_start_available_bytes": 10_000 * MIB, "system_commit_limit_bytes": 4_000 * MIB}
    base.update(system)
    return SummaryRow(
        mode=mode,
        processes=2,
        sessions_per_process=1,
        max_peak_private_bytes=peak_bytes,
        weights_bytes=256 * MIB,
        **base,
    )


def test_fits_divide_the_headroom_by_the_peak():
    # heuristic overcommit: the commit limit is not enforced, available memory is the bound
    found = fits.fits(_row("mapped", 30 * MIB, overcommit_mode=0), _row("heap", 290 * MIB, overcommit_mode=0))
    assert found["heap"].bound == "available memory" and found["heap"].sessions == 10_000 // 290
    assert found["mapped"].sessions == (10_000 - 256) // 30  # the shared file pages once
    # strict overcommit (and Windows): commit limit minus the commit charge at start
    strict = {"overcommit_mode": 2, "system_start_committed_bytes": 1_000 * MIB}
    found = fits.fits(_row("mapped", 30 * MIB, **strict), _row("heap", 290 * MIB, **strict))
    assert found["heap"].bound == "commit limit" and found["heap"].sessions == 3_000 // 290
    assert found["mapped"].sessions == 3_000 // 30
    sentence = fits.fits_sentence(found)
    assert sentence.startswith(f"with heap, {3_000 // 290} sessions of this model fit this machine's commit limit")
    assert f"mapped, {3_000 // 30} fit" in sentence


def test_peak_projection_scales_the_heap_copies_only():
    lines = fits.peak_projection(_row("mapped", 30 * MIB), _row("heap", 286 * MIB), 4 * 1024 * MIB, 8)
    assert "1.00 weight copies per session" in lines[0]
    assert "mapped 240.0 MiB private" in lines[0]


def test_preflight_plans_for_the_start_up_peak_not_the_steady_state():
    """A heap session peaks at two copies (docs/running.md: 538.9 MiB private for 256 MiB of
    weights), the workers start together, and the control worker runs beside them."""
    from harness.contract.options import RunOptions
    from harness.runner.preflight import WORKER_OVERHEAD_BYTES, copies_per_worker, estimated_peak_bytes

    w = 256 * MIB
    both = RunOptions(target="cpu", processes=[2], modes=["mapped", "heap"])
    assert estimated_peak_bytes(both, w) == 2 * 2 * w + 3 * WORKER_OVERHEAD_BYTES
    mapped = RunOptions(target="cpu", processes=[2], modes=["mapped"])
    assert estimated_peak_bytes(mapped, w) == w + 3 * WORKER_OVERHEAD_BYTES  # the mapping, once
    assert (copies_per_worker(both), copies_per_worker(mapped)) == (2, 1)
    faulted = RunOptions(target="cpu", processes=[2], modes=["mapped"], target_options={"fault": {"create": 1}})
    assert copies_per_worker(faulted) == 3  # the fallback's two copies beside the mapping it keeps


@pytest.mark.skipif(sys.platform != "win32", reason="real psapi: Windows (and the Wine lane)")
def test_windows_calls_read_real_figures_on_windows():
    """On Windows CPython over the real psapi (the Wine lane, the hosted lanes): this process's
    counters give a private figure that holds a 64 MiB block it touched (PrivateUsage, or under
    Wine PagefileUsage, Microsoft's 'same value'), and GetPerformanceInfo a commit charge within
    its limit."""
    counters = winmem.ProcessCounters()
    try:
        before, _ = counters.read_split()
        block = bytearray(64 * 1024 * 1024)  # zero-filled: every page touched
        after, _ = counters.read_split()
        del block
    finally:
        counters.close()
    assert 0 < before and after - before >= 60 * 1024 * 1024, (before, after)
    figures = winmem.performance_info()
    assert figures is not None
    assert figures.commit_limit >= figures.commit_total > 0 and figures.physical_available > 0, figures
