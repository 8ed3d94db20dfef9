"""Notes on what the memory figures are made of and the conditions timings were taken in."""

from __future__ import annotations

from .composition import MIN_CPU_SHARE
from .passes import SEQUENTIAL, memory_view, timing_start, timing_view
from .rundata import RunData
from .summary import row_ok
from .units import fmt_bytes, fmt_percent
from .vocab import PathTaken

#: Mapped workers' copied_bytes above this share of the weights (plus 1 MiB) are named.
COPY_SHARE = 0.05
#: The start-up peak's promised sampling rate (`harness.runner.peakwatch.WANTED_HZ`).
WANTED_PEAK_HZ = 1000.0


def figure_notes(run: RunData) -> list[tuple[str, str, str]]:
    """(kind, title, text) of each note that applies (`harness.core.notes` makes them Notes)."""
    notes = []
    weights = run.weights_bytes or 0
    cap = COPY_SHARE * weights + 1024**2  # a fallback's copy is in its own note: not "despite the mapping"
    copying = [r for r in run.results if r.path_taken == PathTaken.MAPPED and row_ok(r) and (r.copied_bytes or 0) > cap]
    if copying and weights:
        worst = max(r.copied_bytes or 0 for r in copying)
        notes.append(
            (
                "warn",
                "Mapped workers still copied weights",
                f"{len(copying)} mapped-mode worker(s) held up to {fmt_bytes(worst)} of private memory beyond "
                f"the control worker's runtime ({fmt_percent(worst / weights)} of the {fmt_bytes(weights)} of "
                "weights): something copied them despite the mapping (weight prepacking left on, a layout "
                "transform, an element type ORT converts, a Constant that could not be lifted). The saving is "
                "smaller by that much; see copied_bytes in the worker table.",
            )
        )
    busy = [s for s in timing_view(run.summary) if s.contended]
    queued = [s for s in memory_view(run.summary) if s.contended]
    if queued and timing_start(run.summary) == SEQUENTIAL:
        notes.append(
            (
                "info",
                "Concurrent start-up contended; timings judged on the timing pass",
                f"{len(queued)} group(s) of the concurrent pass ran contended (their workers started together and "
                f"waited for {run.cpu_count or '?'} CPU(s)): their times are shown, labelled, but timing gates "
                "are judged on the timing pass, where the workers started one at a time.",
            )
        )
    if busy:
        loads = [s.load_avg for s in busy if s.load_avg is not None]
        shares = [s.cpu_share_min for s in busy if s.cpu_share_min is not None]
        detail = []
        foreign = [s.foreign_cpus_max for s in busy if s.foreign_cpus_max is not None]
        if foreign:
            detail.append(f"other processes used up to {max(foreign):.2f} CPUs while a timed worker ran")
        elif loads:
            detail.append(f"load average up to {max(loads):.1f} on {run.cpu_count or '?'} CPU(s)")
        if shares:
            detail.append(f"a worker got as little as {fmt_percent(min(shares))} of a CPU")
        notes.append(
            (
                "warn",
                "Timings taken on a contended machine",
                f"{len(busy)} of {len(timing_view(run.summary))} group(s) ran while the machine was contended "
                f"({'; '.join(detail)}): a load above the CPU count, or a worker below {MIN_CPU_SHARE:g} of a "
                "CPU, makes times measure the queue as much as the work. Timing gates read 'contended' "
                "instead of pass or fail; memory figures are not affected and keep their verdicts.",
            )
        )
    return notes + peak_sampling_notes(run)


def peak_sampling_notes(run: RunData) -> list[tuple[str, str, str]]:
    """What the start-up peaks can have missed: workers the harness sampled below 1 kHz, and
    workers it could not watch at all (their peak is the worker's own phase-change samples)."""
    peaked = [r for r in run.results if row_ok(r) and r.peak_private_bytes is not None]
    slow = [r for r in peaked if r.peak_sample_hz is not None and r.peak_sample_hz < WANTED_PEAK_HZ]
    unwatched = [r for r in peaked if r.peak_sample_hz is None]
    notes = []
    if slow:
        gaps = [r.peak_sample_max_gap_s for r in slow if r.peak_sample_max_gap_s is not None]
        gap = f", longest gap {max(gaps) * 1000:.1f} ms" if gaps else ""
        notes.append(
            (
                "warn",
                "Start-up peak sampled below 1 kHz",
                f"{len(slow)} of {len(peaked)} worker(s) were sampled at {int(min(r.peak_sample_hz for r in slow))}"
                f"-{int(max(r.peak_sample_hz for r in slow))} Hz{gap} (a busy machine delays the harness's "
                "sampling thread): a transient shorter than the gap can be missed, so their peaks are lower "
                "bounds (see peak_sample_hz in the worker table).",
            )
        )
    if unwatched:
        notes.append(
            (
                "warn",
                "Start-up peak not watched",
                f"{len(unwatched)} of {len(peaked)} worker(s) were not sampled by the harness during start-up "
                "(the phase board could not be made, or a worker named a process that is not the one started): "
                "their peak is what they sampled themselves at each phase change, a lower bound, so their "
                "groups' start-up peaks, the peak ratio and the fits figure are left empty.",
            )
        )
    return notes
