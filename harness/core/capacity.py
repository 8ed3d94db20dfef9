"""Measured capacity (``python -m harness capacity``): per mode, the largest N whose workers all
start, answer correctly and stay alive under a memory limit, beside what the start-up peak
projects. Here: a probe's outcome, the search (doubling, then bisection), the projection, the
sentence and ``capacity.json``. A boundary probe that failed for another reason than the
limit leaves the answer inconclusive, said so."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .fits import workers_fitting
from .units import fmt_bytes
from .vocab import Mode

CAPACITY_JSON = "capacity.json"
CAPACITY_FORMAT_VERSION = 1
#: A probe's outcome: every worker fit; the limit ended one (kernel's count); one failed otherwise.
OUTCOMES = ("fit", "oom", "failed")


@dataclass
class Probe:
    """One group run of the search."""

    processes: int
    outcome: str  # one of OUTCOMES
    ok_workers: int
    oom_workers: int
    failed_workers: int
    seconds: float  # wall time of the probe (eviction, start-up, barrier, release)
    container_peak_bytes: int | None = None
    peak_private_bytes: int | None = None  # the group's highest worker start-up peak
    page_cache: str = ""
    error: str = ""  # the first error that was not the limit's


def probe_outcome(rows: list[Any]) -> tuple[str, str]:
    """(outcome, the first error not caused by the limit) of a probe's rows."""
    from .summary import row_ok

    others = [r for r in rows if not row_ok(r) and not r.oom_killed]
    if others:
        return "failed", others[0].error or "wrong output or not sampled"
    if any(r.oom_killed for r in rows):
        return "oom", ""
    return "fit", ""


def agrees_with_rows(measured: Any, rows: list[Any], top: int) -> bool:
    """Each mode's answer n is what the run's probes show: n fit (unless 0) and, below the cap,
    n + 1 did not; nothing above the cap ``top``."""
    probes: dict[tuple, list[Any]] = {}
    for row in rows:
        probes.setdefault((row.mode, row.processes), []).append(row)

    def fit(mode: str, n: int) -> bool | None:
        found = probes.get((mode, n))
        return None if not found else probe_outcome(found)[0] == "fit"

    for m in measured.modes.values():
        n = m.max_processes
        if n is not None and (n > top or (n and not fit(m.mode, n)) or (n < top and fit(m.mode, n + 1) is not False)):
            return False
    return True


def search(probe: Callable[[int], bool], cap: int) -> int:
    """The largest N in 1..cap for which ``probe(N)`` holds (0: not even 1), it holding below any
    N that holds: N = 1, 2, 4, ... until one fails or the cap, then bisection."""
    good, bad, n = 0, None, 1
    while n <= cap:
        if not probe(n):
            bad = n
            break
        good = n
        if n == cap:
            return good
        n = min(2 * n, cap)
    while bad is not None and bad - good > 1:
        mid = (good + bad) // 2
        if probe(mid):
            good = mid
        else:
            bad = mid
    return good


@dataclass
class ModeCapacity:
    mode: str
    max_processes: int | None  # None: inconclusive (see note)
    projected_processes: int | None  # what the start-up peak projects for the same limit
    capped: bool = False  # the cap held: the answer is "at least"
    peak_private_bytes: int | None = None  # the start-up peak the projection divides (N=1 probe)
    sessions_per_process: int = 1
    probes: list[Probe] = field(default_factory=list)
    note: str = ""

    def boundary(self) -> Probe | None:
        """The smallest probe that did not fit (what ended the search)."""
        misses = [p for p in self.probes if p.outcome != "fit"]
        return min(misses, key=lambda p: p.processes) if misses else None


def conclude(mode: str, probes: list[Probe], answer: int, cap: int, projected: int | None, spp: int) -> ModeCapacity:
    """The answer of one mode's search, inconclusive when what bounded it was not the limit."""
    first = next((p for p in probes if p.processes == 1), None)
    found = ModeCapacity(
        mode, answer, projected, answer == cap, first.peak_private_bytes if first else None, spp, probes
    )
    edge = found.boundary()
    if edge is not None and edge.outcome == "failed":
        found.max_processes = None
        found.note = f"N={edge.processes} failed for another reason than the limit: {edge.error}"
    return found


def projected_processes(mode: str, limit: int, peak: int | None, weights: int, counts_file_pages: bool) -> int | None:
    """Workers the start-up peak projects under ``limit`` (`harness.core.fits`' arithmetic)."""
    return workers_fitting(mode, limit, peak, weights, counts_file_pages) if peak else None


def _answer(found: ModeCapacity) -> str:
    projected = "not projected" if found.projected_processes is None else f"projected {found.projected_processes}"
    if found.max_processes is None:
        return f"{found.mode} unknown ({found.note}; {projected})"
    sessions = found.max_processes * found.sessions_per_process
    word = "session" if sessions == 1 else "sessions"
    more = " or more (the cap" if found.capped else " ("
    return f"{found.mode} {sessions} {word}{more}{'; ' if found.capped else ''}{projected})"


def sentence(limit_bytes: int, modes: list[ModeCapacity]) -> str:
    """ "under 1.5 GiB: heap 2 sessions (projected 2), mapped 12 sessions or more (the cap;
    projected 44)"."""
    return f"under {fmt_bytes(limit_bytes)}: " + ", ".join(_answer(m) for m in modes)


def kv_clause(kv_bytes: int | None, tokens: int | None) -> str:
    """What a generate run's sessions hold beside the weights, in every probe and every peak."""
    return f", each session with its KV cache at {tokens} tokens ({fmt_bytes(kv_bytes)})" if kv_bytes else ""


def probe_line(mode: str, probe: Probe) -> str:
    """The progress line of one probe, with its time."""
    what = {
        "fit": f"all {probe.processes} ok",
        "oom": f"{probe.oom_workers} of {probe.processes} ended by the limit",
        "failed": f"failed ({probe.error})",
    }[probe.outcome]
    peak = f", container peak {fmt_bytes(probe.container_peak_bytes)}" if probe.container_peak_bytes else ""
    return f"capacity: {mode} N={probe.processes}: {what}{peak}, {probe.seconds:.1f} s"


def document(limit_bytes: int, cap: int, modes: list[ModeCapacity], facts: dict[str, Any]) -> dict[str, Any]:
    """capacity.json: the limit, the cap, each mode's answer, projection and probes."""
    return {
        "format_version": CAPACITY_FORMAT_VERSION,
        "memory_limit_bytes": limit_bytes,
        "max_processes_cap": cap,
        **facts,
        "sentence": sentence(limit_bytes, modes)
        + kv_clause(facts.get("kv_cache_bytes_per_session"), facts.get("tokens")),
        "modes": {m.mode: {k: v for k, v in asdict(m).items() if k != "mode"} for m in modes},
    }


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _probe(data: Any) -> Probe | None:
    if not isinstance(data, dict) or data.get("outcome") not in OUTCOMES or not _int(data.get("processes")):
        return None
    seconds = data.get("seconds")
    return Probe(
        processes=data["processes"],
        outcome=data["outcome"],
        ok_workers=_int(data.get("ok_workers")) or 0,
        oom_workers=_int(data.get("oom_workers")) or 0,
        failed_workers=_int(data.get("failed_workers")) or 0,
        seconds=float(seconds) if isinstance(seconds, (int, float)) and not isinstance(seconds, bool) else 0.0,
        container_peak_bytes=_int(data.get("container_peak_bytes")),
        peak_private_bytes=_int(data.get("peak_private_bytes")),
        page_cache=str(data.get("page_cache") or "")[:40],
        error=str(data.get("error") or "")[:2000],
    )


@dataclass
class Measured:
    """A capacity.json read back: the limit and each mode's answer."""

    limit_bytes: int
    modes: dict[str, ModeCapacity]
    counts_file_pages: bool = True  # the container charged the page cache (a cgroup; not a job)

    def sentence(self) -> str:
        return sentence(self.limit_bytes, list(self.modes.values()))


def from_document(data: Any) -> Measured | None:
    """The measured capacity a capacity.json states, or None when it is not one of ours (a
    hostile or damaged file is never believed: every field is checked)."""
    if not isinstance(data, dict) or data.get("format_version") != CAPACITY_FORMAT_VERSION:
        return None
    limit, modes = _int(data.get("memory_limit_bytes")), data.get("modes")
    if not limit or not isinstance(modes, dict):
        return None
    out = {}
    for mode in (Mode.HEAP, Mode.MAPPED):
        entry = modes.get(mode)
        if not isinstance(entry, dict):
            continue
        probes = [p for p in (_probe(x) for x in (entry.get("probes") or [])[:64]) if p is not None]
        out[mode] = ModeCapacity(
            mode,
            _int(entry.get("max_processes")),
            _int(entry.get("projected_processes")),
            entry.get("capped") is True,
            _int(entry.get("peak_private_bytes")),
            _int(entry.get("sessions_per_process")) or 1,
            probes,
            str(entry.get("note") or "")[:2000],
        )
    return Measured(limit, out, data.get("counts_file_pages") is not False) if out else None


def load(folder: Path, read: Callable[[Path], Any]) -> Measured | None:
    """The run folder's capacity.json, read with ``read`` (`harness.core.rundata`'s bounded
    reader) and checked; None when it has none (or not one of ours)."""
    path = Path(folder) / CAPACITY_JSON
    if not path.is_file():
        return None
    return from_document(read(path))


def sentence_of(document: dict[str, Any]) -> str:
    """The sentence of a capacity.json this run wrote (``document``'s own)."""
    return str(document.get("sentence") or "")


def is_capacity(run: Any) -> bool:
    """A run folder written by ``capacity``: its workers ended by the limit are its answer."""
    return run.meta.get("kind") == "capacity"


def capacity_reasons(run: Any) -> list[str]:
    """Why a capacity run is not a pass: no capacity.json, or a mode left inconclusive."""
    if not is_capacity(run):
        return []
    measured = run.capacity
    if measured is None:
        return ["no capacity.json: the search did not finish"]
    return [f"capacity {m.mode}: {m.note}" for m in measured.modes.values() if m.max_processes is None]


def limit_room(mode: str, limit: int, weights: int, counts_file_pages: bool) -> int:
    """What a limit leaves the workers: the mapped weights' pages once, where they count."""
    return max(0, limit - (weights if mode == Mode.MAPPED and counts_file_pages else 0))


def cost_range(found: ModeCapacity, room: int) -> tuple[float | None, float | None]:
    """(more than, at most) bytes one worker cost: n fit in ``room`` and n + 1 did not, so
    room / (n + 1) < cost <= room / n (capped: the upper bound only; 0 workers: the lower only)."""
    n = found.max_processes
    if n is None:
        return None, None
    below = None if found.capped else room / (n + 1)
    return below, (room / n if n else None)


def workers_at(found: ModeCapacity, room: int, headroom: int) -> tuple[int | None, int | None]:
    """(at least, at most) workers another headroom holds, at the measured cost per worker."""
    below, above = cost_range(found, room)
    least = int(headroom // above) if above else None
    most = int(headroom // below) if below else None
    return least, most


def bounds_text(
    low: float | None, high: float | None, show: Callable[[Any], str] = str, *, strict: bool = False
) -> str:
    """ "44-58", "208 or more", "at most 5" (``strict``: the low bound is not reached, "more than X")."""
    if low is None and high is None:
        return "unknown"
    if high is None:
        return f"more than {show(low)}" if strict else f"{show(low)} or more"
    if low is None:
        return f"at most {show(high)}"
    return show(low) if low == high else f"{show(low)}-{show(high)}"


@dataclass
class MeasuredFit:
    """A measured capacity scaled to this run's machine headroom (the "fits" figure's)."""

    mode: str
    least: int | None
    most: int | None


def measured_fits(measured: Measured, found: dict[str, Any], weights: int) -> dict[str, MeasuredFit]:
    """Per mode, the sessions this run's headroom holds at the cost per worker the capacity run
    measured (``found``: `harness.core.fits.fits`' figures, whose headroom is scaled)."""
    out = {}
    for mode, answer in measured.modes.items():
        fit = found.get(mode)
        if fit is None:
            continue
        room = limit_room(mode, measured.limit_bytes, weights, measured.counts_file_pages)
        headroom = limit_room(mode, fit.headroom_bytes, weights, fit.bound == "available memory")
        least, most = workers_at(answer, room, headroom)
        spw = fit.sessions_per_worker
        out[mode] = MeasuredFit(mode, None if least is None else least * spw, None if most is None else most * spw)
    return out


def measured_sentence(measured: Measured, scaled: dict[str, MeasuredFit], headroom: str) -> str:
    """ "measured under 384.0 MiB: heap 2 sessions (projected 2), ...; at this machine's 22.4
    GiB, that cost per worker gives heap 119-178 sessions, mapped 420 or more"."""
    text = f"measured {measured.sentence()}"
    if scaled:
        each = ", ".join(f"{m.mode} {bounds_text(m.least, m.most)}" for m in scaled.values())
        text += f"; at the measured cost per worker, this machine's {headroom} holds {each}"
    return text


def measured_document(measured: Measured, scaled: dict[str, MeasuredFit]) -> dict[str, Any]:
    """headline.json's ``fits.measured``."""
    return {
        "memory_limit_bytes": measured.limit_bytes,
        "sentence": measured.sentence(),
        "modes": {
            mode: {
                "max_processes": m.max_processes,
                "projected_processes": m.projected_processes,
                "capped": m.capped,
                "sessions_fit_here": [scaled[mode].least, scaled[mode].most] if mode in scaled else None,
            }
            for mode, m in measured.modes.items()
        },
    }


def _largest_complete_fits(run: Any) -> dict[str, Any]:
    """The fits figures of the largest N both modes completed (a capacity run's largest probes
    are the ones the limit ended: its headline pair is incomplete)."""
    from .fits import fits
    from .summary import complete_pair, paired, sessions_of

    pairs = [p for p in paired(s for s in run.summary if s.target == run.target) if complete_pair(*p)]
    return fits(*max(pairs, key=lambda p: sessions_of(p[0]))) if pairs else {}


def measured_for(run: Any, found: dict[str, Any]) -> tuple[str, dict[str, Any]] | None:
    """(the line, headline.json's ``fits.measured``) when the run has a measured capacity,
    scaled to the headroom of ``found`` (this run's fits figures); None without one."""
    measured = getattr(run, "capacity", None)
    if measured is None:
        return None
    found = found or _largest_complete_fits(run)
    scaled = measured_fits(measured, found, int(run.weights_bytes or 0))
    rooms = sorted({f.headroom_bytes for f in found.values()})
    headroom = fmt_bytes(rooms[0]) if rooms else "headroom"
    return measured_sentence(measured, scaled, headroom), measured_document(measured, scaled)
