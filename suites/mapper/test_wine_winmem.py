"""The parent's memory reads of `harness.runner.winmem` (the peak watch's
``ProcessCounters(pid).read_split()``, and ``performance_info()``), checked against a real
kernel32 and psapi (Wine's). A C probe (`_wine_memprobe.c`, compiled with mingw at test time)
starts a child that commits and touches 64 MiB, commits and releases 32 MiB more, maps a 32 MiB
file read-only and reads every page; then opens it with winmem's own rights and inherit flag
and calls psapi's GetProcessMemoryInfo on the very buffers winmem prepares (`winmem.blank`: EX2
first, then EX, cb from the buffer as winmem passes it). The bytes each call leaves are read
back with winmem's ctypes structures and winmem's own `choose_counters` and `split` run over
them: a drift in winmem.py (rights, sizes, layout, the fallback rule) is what fails here.

What Wine 8 showed: OpenProcess with PROCESS_QUERY_LIMITED_INFORMATION | PROCESS_VM_READ works;
the EX2 call succeeds, but whatever cb is Wine writes only PROCESS_MEMORY_COUNTERS (and sets cb
to 72): neither PrivateUsage nor the private working set. So under Wine winmem's fallback is what
runs: `choose_counters` sees the private working set unwritten and picks EX (winmem used to trust
the return value alone, and would have counted the whole working set as shared). Where Wine
differs from Microsoft's documentation is `KNOWN_WINE_DEVIATIONS`; a test fails once Wine stops
showing one. Skips, with the reason, where Wine or mingw is not installed (`_wine_fixtures.py`)."""

from __future__ import annotations

import ctypes
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import _wine_fixtures
import pytest
from _wine_exec import wine_path

from harness.runner import winmem

mingw, wine_memory = _wine_fixtures.mingw, _wine_fixtures.wine_memory  # the session fixtures, for pytest
pytestmark = [
    pytest.mark.xdist_group("wine"),
    pytest.mark.skipif(
        sys.platform == "win32",
        reason="Linux's stand-in: on Windows winmem runs for real (suites/harness/test_peak*.py)",
    ),
    pytest.mark.skipif(ctypes.sizeof(ctypes.c_size_t) != 8, reason="the probe is x86_64: 64-bit layouts"),
]
MIB = 1024 * 1024
KEPT_MIB, FREED_MIB, FILE_MIB = 64, 32, 32  # what the child keeps, releases again, maps
EX2, EX, PERF = winmem.PROCESS_MEMORY_COUNTERS_EX2, winmem.PROCESS_MEMORY_COUNTERS_EX, winmem.PERFORMANCE_INFORMATION
PROCESS_MEMORY_COUNTERS_SIZE = 72  # psapi.h's base structure, all Wine writes
FILL = 0xA5A5A5A5A5A5A5A5  # a field the call did not write still holds the fill
ERROR_ACCESS_DENIED, ERROR_INVALID_PARAMETER = 5, 87
SYNCHRONIZE = 0x00100000  # a right that opens a process but reads none of its counters
NO_SUCH_PID = 0xFFFFFFFC  # a multiple of 4 (as Windows pids are) that no process gets
MOST = 0.9  # of the mapped file's touched bytes, the part the working set must show


def _filled() -> bytes:
    """An EX2 buffer whose every byte after cb is 0xA5: what shows which fields a call wrote."""
    return ctypes.sizeof(EX2).to_bytes(4, "little") + b"\xa5" * (ctypes.sizeof(EX2) - 4)


@dataclass
class Reads:
    """One probe run: the child's report, OpenProcess, each buffer's answer, GetPerformanceInfo."""

    child: dict
    opened: dict
    answers: dict[bytes, dict]  # the buffer before the call -> the call's line (ok, err, bytes)
    performance: dict

    def after(self, before: bytes) -> ctypes.Structure:
        kind = EX2 if len(before) == ctypes.sizeof(EX2) else EX
        return kind.from_buffer_copy(bytes.fromhex(self.answers[before]["bytes"]))

    @property
    def filled(self) -> ctypes.Structure:
        return self.after(_filled())

    def choice(self) -> ctypes.Structure:
        """`winmem.choose_counters` over Wine's answers, then the first read into a structure it
        chose afresh (the fallback): each buffer winmem hands to GetProcessMemoryInfo gets the
        bytes Wine wrote into the same buffer (one the test did not pass, because winmem now
        prepares another, is a KeyError)."""

        def fill(counters: ctypes.Structure) -> bool:
            answer = self.answers[bytes(counters)]
            ctypes.memmove(ctypes.addressof(counters), bytes.fromhex(answer["bytes"]), ctypes.sizeof(counters))
            return answer["ok"]

        chosen = winmem.choose_counters(fill)
        if bytes(chosen) == bytes(winmem.blank(type(chosen))):
            fill(chosen)
        return chosen


def _read(run: Callable[..., list[dict]], folder: Path, access: int) -> Reads:
    weights = folder / "winmem_weights.bin"
    if not weights.exists():
        weights.write_bytes(bytes(range(256)) * (FILE_MIB * MIB // 256))
    buffers = [bytes(winmem.blank(EX2)), bytes(winmem.blank(EX)), _filled()]  # winmem's order, then the fill
    perf_cb = str(ctypes.sizeof(PERF))  # performance_info's cb
    args = [hex(access), str(winmem.OPEN_INHERIT), perf_cb, wine_path(str(weights)), str(KEPT_MIB), str(FREED_MIB)]
    lines = run("counters", *args, *(b.hex() for b in buffers))
    calls = [line for line in lines if line.get("call") == "GetProcessMemoryInfo"]
    assert len(calls) == len(buffers), lines
    return Reads(
        child=next(line for line in lines if "child" in line),
        opened=next(line for line in lines if line.get("call") == "OpenProcess"),
        answers=dict(zip(buffers, calls, strict=True)),
        performance=next(line for line in lines if line.get("call") == "GetPerformanceInfo"),
    )


@pytest.fixture(scope="module")
def reads(wine_memory) -> Reads:
    run, folder = wine_memory
    return _read(run, folder, winmem.OPEN_ACCESS)


@dataclass(frozen=True)
class Deviation:
    """Where Wine's psapi differs from Microsoft's documentation, and what it means for winmem."""

    name: str
    windows: str
    wine: str
    source: str
    shows: Callable[[Reads], bool]


def _ex_fields_unwritten(r: Reads) -> bool:
    c = r.filled
    return (
        r.answers[_filled()]["ok"]
        and c.cb == PROCESS_MEMORY_COUNTERS_SIZE
        and c.PrivateUsage == FILL == c.PrivateWorkingSetSize
    )


def _peak_is_current(r: Reads) -> bool:
    c = r.filled
    return c.PeakPagefileUsage == c.PagefileUsage < (KEPT_MIB + FREED_MIB) * MIB


KNOWN_WINE_DEVIATIONS: tuple[Deviation, ...] = (
    Deviation(
        "counters_beyond_the_base_structure_unwritten",
        "GetProcessMemoryInfo fills the structure cb names: PROCESS_MEMORY_COUNTERS_EX's PrivateUsage,"
        " EX2's PrivateWorkingSetSize and SharedCommitUsage",
        "it succeeds whatever cb is (>= 72) but writes only PROCESS_MEMORY_COUNTERS and sets cb to 72"
        " (kernelbase GetProcessMemoryInfo); under Wine winmem's private figure would be 0 and it falls"
        " back to EX (no shared figure); PagefileUsage, which Microsoft calls the same value, is written",
        "https://learn.microsoft.com/windows/win32/api/psapi/nf-psapi-getprocessmemoryinfo;"
        " https://learn.microsoft.com/windows/win32/api/psapi/ns-psapi-process_memory_counters_ex"
        " ('PrivateUsage: Same as PagefileUsage')",
        _ex_fields_unwritten,
    ),
    Deviation(
        "peak_commit_is_the_current_commit",
        "PeakPagefileUsage is 'the peak value in bytes of the Commit Charge during the lifetime of this"
        " process': a commit released before the read still counts",
        "PeakPagefileUsage equals PagefileUsage (the current figure): the released 32 MiB are not in it;"
        " under Wine the worker's own peak (`kernel_peaks`) can raise nothing",
        "https://learn.microsoft.com/windows/win32/api/psapi/ns-psapi-process_memory_counters_ex",
        _peak_is_current,
    ),
)
UNWRITTEN, PEAK_IS_CURRENT = KNOWN_WINE_DEVIATIONS


def test_the_c_side_sees_winmem_s_structure_sizes(wine_memory):
    """sizeof and offsets as the probe compiles them: EX and PERFORMANCE_INFORMATION from mingw's
    psapi.h; EX2, which mingw's psapi.h does not declare yet, as Microsoft documents it."""
    run, _ = wine_memory
    sizes = run("sizes")[0]["sizes"]
    assert sizes == {
        "ex": ctypes.sizeof(EX),
        "ex2": ctypes.sizeof(EX2),
        "perf": ctypes.sizeof(PERF),
        "private_usage_at": EX2.PrivateUsage.offset,
        "private_ws_at": EX2.PrivateWorkingSetSize.offset,
        "shared_commit_at": EX2.SharedCommitUsage.offset,
        "page_size_at": PERF.PageSize.offset,
        "ex_private_usage_at": EX.PrivateUsage.offset,
    }


def test_winmem_s_rights_open_the_worker_and_the_fallback_is_chosen_as_wine_answers(reads):
    """The open succeeds with winmem's rights; the EX call at least succeeds; winmem keeps EX2
    exactly when the EX2 call wrote the private working set (under Wine: it did not, so EX)."""
    assert reads.child["kept"] and reads.child["released"] and reads.child["view"], reads.child
    assert reads.opened["ok"] is True and reads.opened["access"] == winmem.OPEN_ACCESS, reads.opened
    assert reads.answers[bytes(winmem.blank(EX))]["ok"] is True, reads.answers
    before = winmem.blank(EX2)
    after = reads.after(bytes(before))
    written = reads.answers[bytes(before)]["ok"] and after.PrivateWorkingSetSize != before.PrivateWorkingSetSize
    assert type(reads.choice()) is (EX2 if written else EX)
    assert written or UNWRITTEN.shows(reads), "EX2 failed or was not written, and not as Wine is known to do"


def test_the_private_figure_holds_the_touched_commit_and_not_the_released(reads):
    """PrivateUsage (what `split` returns as private) is at least the 64 MiB the child touched and
    below 64 + 32 MiB: the released commit is gone. Where Wine leaves PrivateUsage unwritten,
    `split` gives PagefileUsage (Microsoft: 'Same as PagefileUsage'), never the unwritten field."""
    chosen = reads.choice()
    private, _ = winmem.split(chosen)
    if UNWRITTEN.shows(reads):
        assert private == chosen.PagefileUsage, (private, chosen.PagefileUsage)
    assert KEPT_MIB * MIB <= private < (KEPT_MIB + FREED_MIB) * MIB, (private, chosen.PagefileUsage)


def test_the_shared_part_holds_the_mapped_file(reads):
    """With EX2, working set - private working set holds most of the file's touched pages.
    Without it (Wine), `split` gives no shared figure rather than a wrong one, and the working
    set still holds the touched pages beside the private ones."""
    touched = reads.child["mapped_touched"]
    assert touched == FILE_MIB * MIB, reads.child
    chosen = reads.choice()
    _, shared = winmem.split(chosen)
    if isinstance(chosen, EX2):
        assert shared is not None and shared >= MOST * touched, (shared, touched)
    else:
        assert shared is None
        assert chosen.WorkingSetSize >= chosen.PagefileUsage + MOST * touched, (chosen.WorkingSetSize, touched)


def test_the_commit_peak_holds_the_released_commit(reads):
    """PeakPagefileUsage (`kernel_peaks`' private peak) holds the 64 + 32 MiB committed at once,
    unless Wine shows its known deviation (the peak is the current figure)."""
    peak = int(reads.choice().PeakPagefileUsage)
    assert peak >= (KEPT_MIB + FREED_MIB) * MIB or PEAK_IS_CURRENT.shows(reads), peak


def test_performance_info_gives_the_commit_charge_and_limit(reads):
    """GetPerformanceInfo with winmem's cb succeeds; `commit_figures` of its bytes is plausible."""
    assert reads.performance["ok"] is True and reads.performance["cb"] == ctypes.sizeof(PERF), reads.performance
    info = PERF.from_buffer_copy(bytes.fromhex(reads.performance["bytes"]))
    figures = winmem.commit_figures(info)
    assert info.cb == ctypes.sizeof(PERF) and info.PageSize == 4096
    assert figures.commit_limit >= figures.commit_total > KEPT_MIB * MIB
    assert figures.physical_available > 0


def test_every_known_deviation_still_occurs(reads):
    """A listed deviation Wine no longer shows is stale: the list must say what is true."""
    for known in KNOWN_WINE_DEVIATIONS:
        assert known.shows(reads), f"{known.name}: Wine now matches Windows; drop it from the list"
        assert known.source.startswith("https://learn.microsoft.com/"), known


def test_without_the_query_right_no_counters_are_read(wine_memory):
    """The negative control: the same sequence with SYNCHRONIZE alone opens the child, and every
    GetProcessMemoryInfo fails with ERROR_ACCESS_DENIED (the handle needs
    PROCESS_QUERY_LIMITED_INFORMATION, Microsoft documents): so the rights test above can fail."""
    run, folder = wine_memory
    refused = _read(run, folder, SYNCHRONIZE)
    assert refused.opened["ok"] is True, refused.opened
    assert [(a["ok"], a["err"]) for a in refused.answers.values()] == [(False, ERROR_ACCESS_DENIED)] * 3
    assert type(refused.choice()) is EX  # winmem falls back, and its first read() then raises


@pytest.mark.parametrize("pid", [0, NO_SUCH_PID])
def test_open_refuses_the_idle_process_and_a_pid_no_process_has(wine_memory, pid):
    """OpenProcess of pid 0 fails with ERROR_INVALID_PARAMETER (Microsoft documents it), and so
    does a pid no process has (psutil reads that error as NoSuchProcess)."""
    run, _ = wine_memory
    (opened,) = run("open", hex(winmem.OPEN_ACCESS), str(winmem.OPEN_INHERIT), str(pid))
    assert (opened["ok"], opened["err"]) == (False, ERROR_INVALID_PARAMETER), opened
