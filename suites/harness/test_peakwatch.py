"""The parent's watch of a worker's start-up peak (issue 20): a real child process announces
itself on a real phase board, and the parent's samples see what the child's own phase-change
samples cannot: a transient held between two phase changes. No timing is asserted: the child
holds its memory until the test has seen the watch sample it (a handshake, not a sleep)."""

from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys
import time

import pytest

from conftest import line_from
from harness.contract.phases import PHASES
from harness.contract.spawn import python_child
from harness.contract.spec import WorkerRecord
from harness.core.figurenotes import peak_sampling_notes
from harness.core.rundata import RunData
from harness.core.schema import ResultRow
from harness.runner import peakwatch, winmem
from harness.runner.phaseboard import DONE, PhaseBoard, PhaseSlot, state_phase

MIB = 1024**2
#: Where the parent can read another process's memory: /proc/<pid>/statm, GetProcessMemoryInfo.
watchable = pytest.mark.skipif(
    not (sys.platform.startswith("linux") or sys.platform == "win32"), reason="no per-process memory reader here"
)
#: A deadline for the handshake, not a timed assertion: a loaded machine only makes it slower.
HANDSHAKE_DEADLINE_S = 120.0

CHILD = """
import json, sys
from harness.contract import phases
from harness.runner import peak
peak.start(sys.argv[1], int(sys.argv[2]))
phases.mark("load")
phases.mark("create")
block = bytearray(96 * 1024 * 1024)  # zero-filled: every page written, private and resident
print("holding", flush=True)
sys.stdin.readline()
del block
phases.mark("first_run")
found = peak.stop()
print(json.dumps({"own_peak": found.peak_private_bytes, "own_phase": found.peak_phase}), flush=True)
"""


def _wait_for_samples(watch: peakwatch.PeakWatch, slot: int, more_than: int) -> None:
    deadline = time.monotonic() + HANDSHAKE_DEADLINE_S
    while watch.samples(slot) <= more_than + 2:
        assert time.monotonic() < deadline, "the watch took no sample of the child"
        time.sleep(0.01)


@watchable
def test_the_parent_sees_a_transient_the_worker_s_own_samples_miss(tmp_path):
    board = PhaseBoard(tmp_path / "phases.bin", 1)
    command, env = python_child("harness.runner.worker")  # the environment a worker gets
    command = [command[0], "-c", CHILD, str(board.path), "0"]
    try:
        with peakwatch.PeakWatch(board, PHASES) as watch:
            child = subprocess.Popen(command, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
            watch.expect(0, child.pid)
            try:
                assert line_from(child, "holding line").strip() == "holding"
                _wait_for_samples(watch, 0, watch.samples(0))
                child.stdin.write("go\n")
                child.stdin.flush()
                own = json.loads(line_from(child, "own peak"))
                assert child.wait(timeout=60) == 0
            finally:
                child.kill()
                child.wait()
            assert state_phase(board.state(0)) == DONE and board.pid(0) == child.pid
        seen = watch.result(0)
    finally:
        board.close()
    assert seen.peak_private_bytes >= own["own_peak"] + 90 * MIB  # the block, which the child never sampled
    assert seen.peak_phase == "create"
    assert seen.samples >= 3 and seen.peak_sample_hz > 0 and seen.peak_sample_max_gap_s >= 0
    if sys.platform.startswith("linux") or seen.peak_shared_bytes is not None:  # Windows: EX2 only
        assert seen.peak_shared_bytes > 0  # the interpreter's own file pages at least
    columns = peakwatch.merged_peak(WorkerRecord(peak_private_bytes=own["own_peak"]), seen)
    assert columns["peak_private_bytes"] == seen.peak_private_bytes and columns["peak_phase"] == "create"


@watchable
def test_a_slot_naming_a_process_that_is_not_ours_is_not_watched(tmp_path):
    """A worker that writes someone else's pid (this test's) into its slot is never sampled."""
    board = PhaseBoard(tmp_path / "phases.bin", 1)
    slot = PhaseSlot(str(board.path), 0)  # announces THIS process's pid
    try:
        watch = peakwatch.PeakWatch(board, PHASES)
        child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
        try:
            watch.expect(0, child.pid)
            slot.set(PHASES.index("create"))
            for _ in range(peakwatch.PeakWatch.MAX_PID_CHECKS + 1):
                watch.sweep()
        finally:
            child.kill()
            child.wait()
        watch.stop()
        assert watch.result(0) == peakwatch.WatchedPeak()
    finally:
        slot.close()
        board.close()
    columns = peakwatch.merged_peak(WorkerRecord(peak_private_bytes=5 * MIB, peak_phase="load"), watch.result(0))
    assert columns["peak_private_bytes"] == 5 * MIB and columns["peak_sample_hz"] is None


def test_the_state_byte_changes_at_every_mark_and_is_never_zero(tmp_path):
    board = PhaseBoard(tmp_path / "phases.bin", 2)
    slot = PhaseSlot(str(board.path), 1)
    try:
        assert board.state(1) == 0 and board.state(0) == 0  # not started
        seen = []
        for i in range(70):  # past the counter's wrap (31)
            slot.set(i % 4)
            seen.append(board.state(1))
            assert seen[-1] != 0 and state_phase(seen[-1]) == i % 4
        assert all(a != b for a, b in zip(seen, seen[1:], strict=False))
        assert board.state(0) == 0  # the other slot untouched
    finally:
        slot.close()
        board.close()
    with pytest.raises(ValueError, match="outside the board"):
        PhaseSlot(str(board.path), 2)


def _row(worker: int, **peak) -> ResultRow:
    return ResultRow(
        target="cpu", mode="heap", processes=2, sessions_per_process=1, repeat=0, worker=worker, pid=worker + 1,
        path_taken="heap", output_ok=True, error="", peak_private_bytes=12 * MIB, **peak,
    )  # fmt: skip


def _run(folder, rows) -> RunData:
    return RunData(folder=folder, meta={"status": "complete"}, results=rows, summary=[])


def test_the_higher_peak_wins_and_slow_or_unwatched_peaks_are_noted(tmp_path):
    slow = peakwatch.WatchedPeak(
        peak_private_bytes=10 * MIB, peak_phase="create", samples=40, peak_sample_hz=400.0, peak_sample_max_gap_s=0.03
    )
    columns = peakwatch.merged_peak(WorkerRecord(peak_private_bytes=12 * MIB, peak_phase="load"), slow)
    assert columns["peak_private_bytes"] == 12 * MIB and columns["peak_phase"] == "load"  # the worker's was higher
    assert columns["peak_sample_hz"] == 400.0
    rows = [_row(0, peak_sample_hz=400.0, peak_sample_max_gap_s=0.03), _row(1, peak_sample_hz=1500.0)]
    notes = {title: text for _, title, text in peak_sampling_notes(_run(tmp_path, rows))}
    assert set(notes) == {"Start-up peak sampled below 1 kHz"}
    assert (
        "1 of 2 worker(s)" in notes["Start-up peak sampled below 1 kHz"]
        and "30.0 ms" in notes["Start-up peak sampled below 1 kHz"]
    )
    rows = [_row(0), _row(1, peak_sample_hz=1500.0)]
    notes = {title: text for _, title, text in peak_sampling_notes(_run(tmp_path, rows))}
    assert set(notes) == {"Start-up peak not watched"} and "1 of 2 worker(s)" in notes["Start-up peak not watched"]
    fast = [_row(0, peak_sample_hz=1400.0), _row(1, peak_sample_hz=1500.0)]
    assert peak_sampling_notes(_run(tmp_path, fast)) == []


@pytest.mark.skipif(ctypes.sizeof(ctypes.c_size_t) != 8, reason="the 64-bit layout (Windows on ARM64 and x64)")
def test_windows_ex2_structure_has_the_sdk_layout():
    """PROCESS_MEMORY_COUNTERS_EX2 (psapi.h, Windows 10 1809): the EX fields (80 bytes), then
    PrivateWorkingSetSize and SharedCommitUsage: 96 bytes on 64-bit."""
    assert winmem.PROCESS_MEMORY_COUNTERS_EX2.PrivateWorkingSetSize.offset == 80
    assert winmem.PROCESS_MEMORY_COUNTERS_EX2.SharedCommitUsage.offset == 88
    assert ctypes.sizeof(winmem.PROCESS_MEMORY_COUNTERS_EX2) == 96


@pytest.mark.skipif(sys.platform == "win32", reason="off Windows only")
def test_another_process_s_counters_refuse_cleanly_off_windows():
    with pytest.raises(OSError, match="Windows only"):
        winmem.ProcessCounters(1)


class _ReaderThatChangesPhase:
    """A reader during whose read the worker changes phase (what a real race looks like from
    the parent): its figure must count for the rate and never become the peak."""

    def __init__(self, slot: PhaseSlot, values: list[tuple[int, int]]) -> None:
        self.slot, self.values, self.calls = slot, values, 0

    def read_split(self) -> tuple[int, int]:
        self.calls += 1
        if self.calls == 2:
            self.slot.set(PHASES.index("load"))  # the phase changes mid-read
        return self.values[self.calls - 1]

    def close(self) -> None:
        pass


def test_a_sample_across_a_phase_change_is_never_the_peak(tmp_path):
    board = PhaseBoard(tmp_path / "phases.bin", 1)
    slot = PhaseSlot(str(board.path), 0)
    try:
        slot.set(PHASES.index("create"))
        watch = peakwatch.PeakWatch(board, PHASES)
        watch.expect(0, 0)
        watch._slots[0].reader = _ReaderThatChangesPhase(slot, [(10 * MIB, 1), (99 * MIB, 2), (20 * MIB, 3)])
        for _ in range(3):
            watch.sweep()
        found = watch.result(0)
        assert found.samples == 3
        assert (found.peak_private_bytes, found.peak_phase, found.peak_shared_bytes) == (20 * MIB, "load", 3)
    finally:
        slot.close()
        board.close()


def test_stop_after_an_enter_interrupted_inside_thread_start(tmp_path):
    """The state Ctrl-C leaves when it lands inside ``Thread.start`` in ``__enter__`` (seen in a
    bench interrupted as its first group started: the run's cleanup then raised "cannot join
    thread before it is started" and exited 1 with a traceback instead of 130): the thread
    object exists, never started. stop() must not join it, and must still close everything."""
    import threading

    from harness.runner import syswatch
    from harness.runner.syswatch import SystemWatch

    board = PhaseBoard(tmp_path / "phases.bin", 1)
    try:
        watch = peakwatch.PeakWatch(board, PHASES)
        watch._thread = threading.Thread(target=watch._run)  # as an interrupted __enter__ leaves it
        watch.stop()
        watch.stop()  # idempotent
    finally:
        board.close()
    system = SystemWatch()
    system._reader = syswatch._MeminfoReader() if sys.platform.startswith("linux") else syswatch._OtherReader()
    system._thread = threading.Thread(target=system._run)
    system.stop()
    assert system._reader is None and system.result.samples == 1  # the last sample, then closed


@pytest.mark.skipif(not hasattr(os, "symlink") or sys.platform == "win32", reason="POSIX symlinks")
def test_a_board_name_planted_as_a_link_out_of_the_folder_is_replaced_not_written_through(tmp_path):
    victim = tmp_path / "victim"
    victim.write_bytes(b"keep me")
    folder = tmp_path / "group"
    folder.mkdir()
    (folder / "phases.bin").symlink_to(victim)
    board = PhaseBoard(folder / "phases.bin", 2)
    try:
        assert victim.read_bytes() == b"keep me"
        assert not (folder / "phases.bin").is_symlink() and board.state(1) == 0
    finally:
        board.close()


def test_a_group_with_an_unwatched_worker_has_no_start_up_peak():
    """Its peak is a lower bound: the group's peak, its ratio gate and the fits figure must not
    be judged on it (they read not measured)."""
    from harness.core.fits import group_figures

    watched = [_row(0, peak_sample_hz=1400.0), _row(1, peak_sample_hz=1500.0)]
    assert group_figures(watched, None)["max_peak_private_bytes"] == 12 * MIB
    assert group_figures(watched, None)["sum_peak_private_bytes"] == 24 * MIB
    one_blind = [_row(0, peak_sample_hz=1400.0), _row(1)]
    found = group_figures(one_blind, None)
    assert found["max_peak_private_bytes"] is None and found["sum_peak_private_bytes"] is None
