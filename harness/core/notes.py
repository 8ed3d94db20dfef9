"""Plain-language notes that tell a reader what a run's numbers can and cannot show.

Numbers alone mislead here: RSS looks like "no saving", a platform without the EP feature
looks like "the feature does nothing", a single N looks like a trend. Each rule below looks
at the rows and metadata and, when it applies, says so in words a non-specialist can act on.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

from .faultnotes import fault_notes
from .figurenotes import figure_notes
from .passes import memory_view
from .rundata import RunData
from .schema import FORMAT_VERSION, SummaryRow
from .summary import SYSTEM_NOISE_FACTOR, delta_doubt, row_ok, system_delta_state
from .units import fmt_bytes
from .vocab import EpState, Mode, PathTaken, RunStatus

SMALL_WEIGHTS = 128 * 1024**2  # below this a worker's own overhead hides the saving
MAX_DETAILS = 12


@dataclass
class Note:
    kind: str  # "info" | "warn" | "error"
    title: str
    text: str
    details: list[str] = field(default_factory=list)
    #: Printed in full on the terminal too (errors and warnings always are; other notes by title).
    terminal: bool = False


#: Facts a target records about the models that change how to read the run, each its own note,
#: in full on the terminal too: (title, a phrase the target's note holds).
MODEL_FACTS = (
    ("Outputs checked by shape only (non-deterministic)", "differ between two runs of"),
    ("Weights larger after ORT's optimizer", "ORT's optimizer made the weights larger"),
)


def _target_notes(run: RunData) -> list[Note]:
    """The target's notes: each model fact (`MODEL_FACTS`) a note of its own, the rest in one
    "How the target measures" note."""
    notes, rest = [], []
    for text in map(str, run.target_notes):
        title = next((t for t, phrase in MODEL_FACTS if phrase in text), None)
        if title is None:
            rest.append(text)
        else:
            notes.append(Note("info", title, text, terminal=True))
    if rest:
        notes.append(Note("info", f"How the {run.target} target measures", rest[0], rest[1:]))
    return notes


def _counted(messages: Iterable[str]) -> list[str]:
    """Identical messages once each, with how many workers said it, most frequent first."""
    counts = Counter(m.strip() for m in messages if m and m.strip())
    lines = [f"{n} x {m}" if n > 1 else m for m, n in counts.most_common(MAX_DETAILS)]
    if len(counts) > MAX_DETAILS:
        lines.append(f"... and {len(counts) - MAX_DETAILS} other messages (see the worker table)")
    return lines


RSS_NOTE = Note(
    "info",
    "Why RSS cannot show the saving",
    "RSS on Linux and the working set on Windows count shared pages in full in every process "
    "that touches them. Weights mapped once and shared by N processes therefore add up to the "
    "same summed RSS as N private copies. Read USS (pages only that process has), PSS (each "
    "shared page split between the processes sharing it; Linux only) or Windows private bytes, "
    "and the drop in system available memory, instead.",
)


def _qnn_notes(run: RunData) -> list[Note]:
    """What the QNN EP did instead of mapping: the path it took, then whether it disabled it."""
    return [*_qnn_path_notes(run), *_qnn_disable_notes(run)]


def _qnn_path_notes(run: RunData) -> list[Note]:
    notes = []
    paths = Counter(r.ep_file_mapping for r in run.results if r.ep_file_mapping)
    if paths.get(EpState.UNAVAILABLE):
        notes.append(
            Note(
                "warn",
                "Feature unavailable on this platform",
                "The QNN EP's file mapping was inactive on this platform: the EP reported that file "
                "mapped weights exist only on Windows on ARM64 with QNN API 2.32 or newer, and "
                "turned them off. Both modes therefore loaded the weights into the heap, so "
                "'mapped' and 'heap' measure the same path here and any difference between them is "
                f"noise, not the feature ({paths[EpState.UNAVAILABLE]} worker(s) affected).",
                _counted(r.ep_log_tail for r in run.results if r.ep_file_mapping == EpState.UNAVAILABLE),
            )
        )
    if paths.get(EpState.RETRIED):
        notes.append(
            Note(
                "warn",
                "The EP retried without file mapping",
                f"In {paths[EpState.RETRIED]} worker(s) creating the QNN contexts with file mapping failed "
                "and the EP retried the whole creation reading the context binary into the heap. "
                "Those workers ran, but on the heap path.",
                _counted(r.ep_reason or r.ep_log_tail for r in run.results if r.ep_file_mapping == EpState.RETRIED),
            )
        )
    return notes


def _qnn_disable_notes(run: RunData) -> list[Note]:
    notes = []
    disabled = [r for r in run.results if r.ep_file_mapping == EpState.DISABLED and r.mode == Mode.MAPPED]
    if disabled:
        notes.append(
            Note(
                "warn",
                "File mapping was disabled in mapped mode",
                f"{len(disabled)} mapped-mode worker(s) saw the EP confirm the option as disabled.",
                _counted(r.ep_log_tail for r in disabled),
            )
        )
    ep_disabled = [r for r in run.results if r.ep_file_mapping == EpState.EP_DISABLED]
    if ep_disabled:
        notes.append(
            Note(
                "warn",
                "The EP turned file mapping off itself",
                f"In {len(ep_disabled)} worker(s) the EP disabled file mapping on its own (embedded context, "
                "a context binary older than 3.3.3, a read callback, or no RPCMem library), so those "
                "sessions read the weights into memory. Reasons:",
                _counted(r.ep_reason for r in ep_disabled),
            )
        )
    unknown = [r for r in run.results if r.ep_file_mapping == EpState.UNKNOWN]
    if unknown:
        notes.append(
            Note(
                "error",
                "No evidence of what the EP did",
                f"For {len(unknown)} worker(s) the EP's log holds no line that says whether the weights were "
                "mapped (or it contradicts itself). Such sessions are never counted as mapped; the "
                "unknown_sessions gate metric counts them.",
                _counted(r.ep_reason or r.ep_log_tail for r in unknown),
            )
        )
    if run.target_options.get("embed_mode") in (1, "1", True):
        notes.append(
            Note(
                "info",
                "Context embedded in the ONNX file",
                "The QNN context was embedded in the model (ep.context_embed_mode=1); the EP does "
                "not map an embedded context, so mapped mode is not expected to save memory.",
            )
        )
    return notes


def _worker_notes(run: RunData) -> list[Note]:
    """Workers and groups that do not count, then how the mapped path went."""
    return [*_failure_notes(run), *_path_notes(run)]


def _failure_notes(run: RunData) -> list[Note]:
    notes = []
    failed = [r for r in run.results if not row_ok(r)]
    if failed:
        notes.append(
            Note(
                "error",
                f"{len(failed)} worker(s) failed",
                "These workers crashed, hung, raised or produced a wrong output; their memory is "
                "left out of the sums. They are highlighted in the worker table.",
                _counted(r.error or (f"exit code {r.exit_code}" if r.exit_code else "wrong output") for r in failed),
            )
        )
    incomplete = [s for s in run.summary if s.complete is not True]
    if incomplete:
        notes.append(
            Note(
                "warn",
                f"{len(incomplete)} group(s) incomplete: left out of sums, ratios and gates",
                "A group counts only when all N workers reached the barrier and were sampled with "
                "figures physics allows: a partial sum is not the group's memory. These groups have "
                "no sums, and gates on their ratios fail saying so:",
                [
                    f"{s.target} {s.mode} N={s.processes} x M={s.sessions_per_process} repeat {s.repeat}: "
                    f"{_incompleteness(s)}"
                    for s in incomplete
                ][:MAX_DETAILS],
            )
        )
    implausible = [r for r in run.results if r.memory_ok is False and row_ok(r) and r.memory_note]
    if implausible:
        notes.append(
            Note(
                "warn",
                f"{len(implausible)} implausible memory sample(s)",
                "These workers' figures contradict what their mode must hold (a heap worker holds its "
                "copies of the weights; a mapped worker's RSS covers the mapped pages it had touched): "
                "the sample was disturbed (memory pressure, another process) or is not the worker's. "
                "They are kept in the worker table and left out of every sum and ratio.",
                _counted(f"{r.mode} N={r.processes} worker {r.worker}: {r.memory_note}" for r in implausible),
            )
        )
    return notes


def _incompleteness(row: SummaryRow) -> str:
    """Why a group is incomplete: its note without the system delta's doubt (a note of its own)."""
    state = system_delta_state(row.system_delta_bytes, row.system_noise_bytes)
    return (row.note or "").removesuffix(state).removesuffix("; ") or "completeness unknown"


def _path_notes(run: RunData) -> list[Note]:
    notes = []
    noisy = [s for s in run.summary if delta_doubt(s)]
    if noisy:
        notes.append(
            Note(
                "info",
                "System delta within noise: no ratio shown",
                "The drop in system available memory is measured with everything else the machine "
                "runs. The idle available memory was read before and after each group; where that "
                f"drift is more than 1/{SYSTEM_NOISE_FACTOR} of the group's delta, the delta is "
                "reported but not turned into a ratio or judged by a gate.",
                _counted(f"{s.mode} N={s.processes} repeat {s.repeat}: {delta_doubt(s)}" for s in noisy),
            )
        )
    fallback = [r for r in run.results if r.path_taken == PathTaken.FALLBACK]
    retried = [r for r in run.results if (r.map_attempts or 0) > 1 and r.path_taken != PathTaken.FALLBACK]
    if fallback:
        outcomes = Counter((r.repeat, r.fallback_stage or "?") for r in fallback)
        notes.append(
            Note(
                "warn",
                f"{len(fallback)} worker(s) fell back to the heap",
                "A stage of the mapped pipeline (map, register, create) failed in these workers and they "
                "read the weights directly into the heap instead, exactly once: they ran, but without the "
                "saving. Per repeat and failing stage, then the errors:",
                [f"repeat {rep}: {n} worker(s) fell back at {stage}" for (rep, stage), n in sorted(outcomes.items())]
                + _counted(e for r in fallback for e in (r.map_errors or r.error or "").split("; ")),
            )
        )
    if retried:
        notes.append(
            Note(
                "info",
                f"{len(retried)} worker(s) mapped after a retry",
                "The first mapping attempt failed and a later one succeeded.",
                _counted(e for r in retried for e in (r.map_errors or "").split("; ")),
            )
        )
    missing = [r.memory_note for r in memory_view(run.results) if r.memory_note and r.memory_ok is not False]
    if missing:
        notes.append(
            Note(
                "warn",
                "Some memory figures are missing",
                "Empty cells in the tables are figures that could not be read, for these reasons:",
                _counted(missing),
            )
        )
    return notes


def _coverage_notes(run: RunData) -> list[Note]:
    notes = []
    modes = run.modes
    if len(modes) == 1:
        notes.append(
            Note(
                "info",
                f"Only {modes[0]} mode was run",
                "With one mode there is nothing to compare: the mapped/heap ratios, their gates and "
                "the saving cannot be shown. Run both modes to see them.",
            )
        )
    counts = run.process_counts
    if len(counts) == 1:
        notes.append(
            Note(
                "info",
                f"Only N={counts[0]} was measured",
                "One process count gives one point per mode: the memory-vs-N chart shows no trend "
                "and the fixed/per-session split and projection need a sweep (e.g. --processes "
                "1,2,4).",
            )
        )
    if run.results and all(r.pss_bytes is None for r in run.results):
        notes.append(
            Note(
                "info",
                "No PSS on this platform",
                "PSS exists only on Linux. The figures that show the saving here are USS / private "
                "bytes and the drop in system available memory.",
            )
        )
    if 1 in counts and run.results and any(r.pss_bytes is not None for r in run.results):
        notes.append(
            Note(
                "info",
                "N=1: a lone mapping counts in USS",
                "With N=1 a mapped file's pages are private to the one process, so USS counts them; "
                "sharing shows from N=2 on.",
            )
        )
    weights = run.weights_bytes
    if weights and weights < SMALL_WEIGHTS and len(modes) > 1:
        notes.append(
            Note(
                "info",
                "Small weights",
                f"The weights ({fmt_bytes(weights)}) are small next to a worker's own overhead "
                "(Python and ONNX Runtime take some 25-35 MiB each), so the ratios stay nearer 1 "
                "even when sharing works. The default saving gates start at 128 MiB.",
            )
        )
    return notes


def run_notes(run: RunData) -> list[Note]:
    """Every note that applies to ``run``, most important first; the RSS note always."""
    figures = [Note(*note) for note in figure_notes(run)]
    faults = [Note(*note) for note in fault_notes(run)]
    notes = [*_worker_notes(run), *faults, *_qnn_notes(run), *figures, *_coverage_notes(run), RSS_NOTE]
    status = run.meta.get("status")
    if status and status != RunStatus.COMPLETE:
        notes.append(
            Note(
                "warn",
                f"Run {status}",
                f"metadata.json says the run is {status}: the figures cover only the groups that "
                "finished before it stopped.",
            )
        )
    for text in run.load_notes:
        notes.append(Note("warn", "Incomplete run folder", text))
    if run.migrated:
        text = (
            f"Written in format version {run.written_in} by an older harness, read as version {FORMAT_VERSION}: "
            "the columns it lacks are empty, figures it did not measure:"
        )
        notes.append(Note("info", "Older run folder", text, list(run.migrated)))
    unverified = [str(k) for k in run.run.get("unverified_session_config") or []]
    if unverified:
        notes.append(
            Note(
                "warn",
                "Session config not verified",
                f"--session-config {', '.join(unverified)}: no library of this ONNX Runtime names "
                f"{'this key' if len(unverified) == 1 else 'these keys'}, so nothing in it can read "
                f"{'it' if len(unverified) == 1 else 'them'}. ORT "
                "accepts any key and ignores the ones nothing reads: recorded as given, but nothing shows it "
                "was applied (a typo?).",
            )
        )
    notes += _target_notes(run)
    order = {"error": 0, "warn": 1, "info": 2}
    return sorted(notes, key=lambda n: order.get(n.kind, 3))
