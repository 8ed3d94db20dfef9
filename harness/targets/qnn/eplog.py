"""How the QNN EP treated file mapping, read from its own log: one verdict per session.

Why the log: the EP decides per session (and per EPContext node) whether the context binary's
weights come from a file mapping or from a copy in memory, and it says so only in its log. The
harness must report what the EP did, never what it was asked to do.

States (`EP_STATES`), each from evidence the EP printed (texts of onnxruntime-qnn 2.7.0, see
`PATTERNS`; every one is checked against the strings of the shipped binaries, see epstrings.py):

- ``active``: positive evidence that weights were served from the mapping. BOTH are required:
  a mapping line ("Creating context bin file mapping for <path>", or its verbose siblings) AND at
  least one "Created DMA data mapping with address: ..." (a weight region handed to QNN from the
  mapping and registered with RPCMem). The mapping line alone is printed *before* the attempt
  (and again on a per-process cache hit), so it proves an attempt, not a success; a DMA line alone
  could belong to another session's mapping. A context that asks for no weight region at all
  gets the mapping line and no DMA line: nothing was served from the mapping, so it is
  ``unknown`` (reason says so), not ``active``.
- ``retried``: a mapping attempt failed and the EP read the .bin instead: the 2.7.0 single-context
  retry ("contextCreateFromBinaryWithCallback failed (<err>). Retrying with direct read."), the
  shared-resource retry ("Failed to create context with file mapping enabled. Error: <e>, Code:
  <n>. Retrying with feature disabled."), or a failure line of the mapping attempt itself
  (DMA registration, out-of-range request, ...) in a session that was created anyway.
- ``disabled``: the EP confirmed the option: "User specified disable_file_mapped_weights: 1".
- ``ep-disabled``: the EP turned mapping off itself; `EpVerdict.reason` names why (one of
  `EP_DISABLED_REASONS`: embedded context, context binary version < 3.3.3, read callback
  registered, RPCMem unavailable).
- ``unavailable``: the platform gate ("File mapped weights feature is only available on Windows
  arm64 devices ..."), printed by the Linux build.
- ``unknown``: no evidence, or contradictory evidence. Never counted as mapped (`MAPPED_STATES`).

Precedence inside one session's log segment (`PRECEDENCE`, first wins), in the order the EP
makes its decisions: the platform gate and the option are global and taken when the EP is
constructed, before any context is loaded, so nothing after them can be a real attempt
(``unavailable`` > ``disabled``). Then per-context outcomes: a failed attempt is worse than a
deliberate policy decision and must not hide behind one, and either means the weights did not
all come from the mapping, so ``retried`` > ``ep-disabled`` > ``active``. A typical on-device
failure prints the mapping line, DMA lines, then the failure and the retry: ``retried``.
Contradictions (mapping evidence after the gate or after a confirmed "1") are ``unknown``: a
log that contradicts itself is no evidence.

A worker with M sessions logs M segments in sequence: `LogSegment` records a session's offsets
in the worker's log file, `classify_session` gives its verdict, `aggregate` counts the verdicts
per state and picks the worst (`WORST_ORDER`). `classify_log` is the whole-log entry point.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from functools import cached_property
from pathlib import Path

from harness.core.schema import EP_STATES, MAPPED_STATES

OPTION_VALUES = ("0", "1")  # disable_file_mapped_weights: "1" turns the feature off
#: inside one session's segment: the first state whose evidence is present wins
PRECEDENCE = ("unavailable", "disabled", "retried", "ep-disabled", "active", "unknown")
#: across a worker's sessions, worst first: no evidence (nothing can be ruled out, not even a
#: retry) > a failed attempt > the EP's own policy > the platform gate > the user's option > mapped
WORST_ORDER = ("unknown", "retried", "ep-disabled", "unavailable", "disabled", "active")

REASON_EMBEDDED = "embedded context"
REASON_VERSION = "context binary version < 3.3.3"
REASON_READ_CALLBACK = "read callback registered"
REASON_RPCMEM = "RPCMem unavailable"
EP_DISABLED_REASONS = (REASON_EMBEDDED, REASON_VERSION, REASON_READ_CALLBACK, REASON_RPCMEM)

WIN, LINUX = "win_arm64", "linux_x86_64"  # the two binaries onnxruntime-qnn ships
EVIDENCE_LINES = 5


@dataclass(frozen=True)
class LogPattern:
    """One message of the EP. `template` is the message with ``{}`` where the EP inserts a value;
    the literal parts between are C string literals of the shipped binaries listed in
    `platforms` (the strings test checks each is there), so the pattern cannot drift from the
    real text unnoticed."""

    name: str
    template: str
    effect: str  # see _EFFECTS
    platforms: tuple[str, ...] = (WIN,)
    reason: str = ""  # ep-disabled only: one of EP_DISABLED_REASONS
    level: str = ""  # log level the EP uses (I/W/E/V; "" when it is a status text)

    @property
    def fragments(self) -> tuple[str, ...]:
        return tuple(part for part in self.template.split("{}") if part)

    @cached_property
    def regex(self) -> re.Pattern[str]:
        parts = self.template.split("{}")
        body = "(.*?)".join(re.escape(p) for p in parts[:-1])
        body = body + "(.*)" + re.escape(parts[-1]) if len(parts) > 1 else re.escape(parts[0])
        return re.compile(body)


_EVIDENCE_RANK = (
    "gate",
    "option",
    "retry",
    "map-failed",
    "ep-disabled",
    "map",
    "dma-ok",
    "dma-request",
    "note",
    "session",
)
_EFFECTS = ("session", "gate", "option", "ep-disabled", "retry", "map", "dma-request", "dma-ok", "map-failed", "note")

# Order matters only where one text contains another: specific before generic.
PATTERNS: tuple[LogPattern, ...] = (
    LogPattern("session", "Creating QNN EP", "session", (WIN, LINUX), level="I"),
    LogPattern(
        "gate",
        "File mapped weights feature is only available on Windows arm64 devices for QNN API "
        "versions >= 2.32. Feature will be disabled by default",
        "gate",
        (LINUX,),
        level="W",
    ),
    LogPattern("option", "User specified disable_file_mapped_weights: {}", "option", (WIN, LINUX), level="W"),
    LogPattern(
        "embedded-node",
        "{} is using an embedded cache. Disabling file mapping for this node.",
        "ep-disabled",
        reason=REASON_EMBEDDED,
        level="W",
    ),
    LogPattern(
        "embedded-ep",
        "File mapped weights feature is incompatible with embedded EP contexts. Feature will be disabled by default.",
        "ep-disabled",
        reason=REASON_EMBEDDED,
        level="W",
    ),
    LogPattern(
        "old-binary",
        "{}. File mapping is only supported for versions >= 3.3.3. Disabling file mapping for this node.",
        "ep-disabled",
        reason=REASON_VERSION,
        level="W",
    ),
    LogPattern(
        "old-binary-ssr",
        "SSR recovery: context binary version {} < 3.3.3, file mapping not supported. Falling back to direct read.",
        "ep-disabled",
        reason=REASON_VERSION,
        level="W",
    ),
    LogPattern(
        "read-callback-reuse",
        "EPContext read callback registered on a session reusing an already-set-up "
        "backend manager; disabling file mapping for this session.",
        "ep-disabled",
        (WIN, LINUX),
        reason=REASON_READ_CALLBACK,
        level="W",
    ),
    LogPattern(
        "read-callback",
        "EPContext read callback registered; disabling file mapping for this session.",
        "ep-disabled",
        (WIN, LINUX),
        reason=REASON_READ_CALLBACK,
        level="W",
    ),
    LogPattern(
        "rpcmem-load",
        "Unable to load RPCMem library: {} - Disabling file mapped weights.",
        "ep-disabled",
        (WIN, LINUX),
        reason=REASON_RPCMEM,
        level="W",
    ),
    LogPattern(
        "rpcmem-missing",
        "RPCMem Library is required for file mapping but is uninitialized.",
        "ep-disabled",
        reason=REASON_RPCMEM,
    ),
    LogPattern(
        "retry-direct-read",
        "contextCreateFromBinaryWithCallback failed ({}). Retrying with direct read.",
        "retry",
        level="W",
    ),
    LogPattern(
        "retry-feature-off",
        "Failed to create context with file mapping enabled. Error: {}. Retrying with feature disabled.",
        "retry",
        level="W",
    ),
    # the retry tails are literals of their own: any other message ending in one is a retry too
    LogPattern("retry-direct-read-tail", "{}). Retrying with direct read.", "retry", level="W"),
    LogPattern("retry-feature-off-tail", "{}. Retrying with feature disabled.", "retry", level="W"),
    LogPattern("map-create", "Creating context bin file mapping for {}", "map", level="I"),
    LogPattern("map-cached", "Found existing mapview memory pointer ({}", "map", level="V"),
    LogPattern("map-handle", "Created file mapping with handle ({}", "map", level="V"),
    LogPattern("map-view", "Created mapview pointer with address {}", "map", level="V"),
    LogPattern("dma-request", "Mapping DMA data for request: memory mapped base pointer({}", "dma-request", level="I"),
    LogPattern("dma-ok", "Created DMA data mapping with address: {}", "dma-ok", level="I"),
    LogPattern("dma-register-failed", "Failed to register DMA data mapping to RPCMEM", "map-failed", level="E"),
    LogPattern(
        "dma-after-error",
        "Attempting to map DMA data but file mapping has been disabled, possibly due "
        "to an error in a previous request.",
        "map-failed",
        level="W",
    ),
    LogPattern(
        "dma-null-base", "Attempting to map DMA data for null memory mapped base pointer", "map-failed", level="E"
    ),
    LogPattern(
        "dma-bad-size", "Mapping request size must be > 0 with backend mapping required", "map-failed", level="E"
    ),
    LogPattern(
        "dma-overflow",
        "Critical error in QNN: mapping request offset + size will overflow 64 bits",
        "map-failed",
        level="E",
    ),
    LogPattern(
        "dma-out-of-file", "Requested offset and size includes memory outside of mapped file", "map-failed", level="E"
    ),
    LogPattern("dma-callback-param", "MapDmaDataCallback: notify_param is null", "map-failed", level="E"),
    LogPattern("dma-callback-manager", "MapDmaDataCallback: QnnBackendManager is null", "map-failed", level="E"),
    LogPattern("map-handle-failed", "Failed to create file mapping handle for context bin{}", "map-failed"),
    LogPattern("map-view-failed", "Failed to retrieve mapview pointer for context bin{}", "map-failed"),
    LogPattern(
        "mapper-missing", "Attempting to use File Mapping feature but file_mapper_ is uninitialized", "map-failed"
    ),
    LogPattern(
        "callback-api-missing", "Invalid function pointer for contextCreateFromBinaryWithCallback.", "map-failed"
    ),
    # release side: reported as evidence, they do not change where this session's weights came from
    LogPattern("dma-release", "Releasing DMA data mapping for memory mapped pointer({}", "note", level="I"),
    LogPattern("deregister-failed", "Failed to deregister buffer from RPCMEM: {}", "note", level="E"),
    LogPattern("release-null", "Attempting to release DMA data for null memory mapped pointer", "note", level="E"),
    LogPattern(
        "release-bad-request",
        "Mapping release request address must not be null and size must be > 0",
        "note",
        level="E",
    ),
    LogPattern("release-callback-param", "ReleaseDmaDataCallback: notify_param is null", "note", level="E"),
    LogPattern("release-callback-manager", "ReleaseDmaDataCallback: QnnBackendManager is null", "note", level="E"),
)

#: Selected strings of the binaries (see epstrings.SELECT_TERMS) that no pattern reads, each
#: with why. A regex, matched against the whole string.
IGNORED: tuple[tuple[str, str], ...] = (
    (r"disable_file_mapped_weights", "the provider option's key, not a message"),
    (r"rpcmem_(alloc|free|to_fd)", "symbol names the EP resolves in the RPCMem library"),
    (r"rpcmem_[aft]H", "machine code bytes that happen to spell a symbol prefix (Linux .so)"),
    (
        r"Failed to get symbol rpcmem_(alloc|free|to_fd)\.",
        "text of the exception reported inside 'Unable to load RPCMem library: <e>'",
    ),
    (
        r"(remote_register_)?Failed to initialize RPCMEM dynamic library hand(le: |Hash table size overflow)",
        "text of the exception reported inside 'Unable to load RPCMem library: <e>'",
    ),
    (r"rpcmem_lib should not be nullptr\.", "internal assertion text (ORT_ENFORCE), not a log message"),
    (
        r"rpcmem_alloc\(\) failed to allocate and returned nullptr\.",
        "HTP shared-memory allocator (enable_htp_shared_memory_allocator), not file mapping",
    ),
    (
        r"rpcmem_to_fd\(\) returned invalid file descriptor\.",
        "HTP shared-memory allocator (enable_htp_shared_memory_allocator), not file mapping",
    ),
    (
        r"No EPContext read callback registered; reading '",
        "debug detail (VERBOSE) of where ORT gets the .bin path; printed on Linux too, says nothing of mapping",
    ),
    (
        r"EPContext binary decrypted via App read callback: ",
        "debug detail of the read-callback path; the 'read callback registered' line is what is classified",
    ),
    (
        r"Failed to resolve EPContext read callback \(",
        "configuration error of the read callback: session creation fails, no mapping path taken",
    ),
    (
        r"Unknown exception occurred while creating QNN EP( factory\.| for compatibility check|\.)",
        "EP construction error; selected only by the session marker's search term",
    ),
    (r"(Unmap|Map)ViewOfFile", "Win32 API import names"),
    (r"onnxruntime::qnn::(Map|Release)DmaDataCallback", "function names (__FUNCTION__ of error statuses)"),
    (r"\.\?AV.*RpcMemLibrary.*", "MSVC RTTI type name (symbol)"),
    (r"_Z.*|St\d+_Sp_counted_ptr_inplace.*", "C++ mangled symbol name (Linux .so)"),
    (r"(/.*/)?rpcmem_library\.cc", "source file name (Linux .so)"),
)

_ANY_FRAGMENT = re.compile("|".join(re.escape(f) for p in PATTERNS for f in p.fragments))
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_TIMESTAMP = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+\s+")
_LOC = re.compile(r"^\[(?P<sev>[VIWEF]):[^\]]*\]\s*")  # "[W:onnxruntime:, qnn_execution_provider.cc:933 QnnEp] "


@dataclass(frozen=True)
class EpVerdict:
    """How the EP treated file mapping in one session (or one log)."""

    state: str  # one of EP_STATES
    reason: str = ""  # why: the EP-disabled reason, the retry's error, what evidence is missing
    evidence: str = ""  # the last relevant lines, one per message kind, colour codes/timestamps removed

    @property
    def mapped(self) -> bool:
        return self.state in MAPPED_STATES

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class WorkerVerdict:
    """A worker's M session verdicts: how many took each path, and the worst of them."""

    state: str  # the worst session state (WORST_ORDER)
    counts: dict[str, int] = field(default_factory=dict)  # state -> sessions, only states seen
    reason: str = ""  # the worst session's reason
    evidence: str = ""  # the worst session's evidence

    @property
    def sessions(self) -> int:
        return sum(self.counts.values())

    @property
    def mapped_sessions(self) -> int:
        return sum(n for s, n in self.counts.items() if s in MAPPED_STATES)

    def counts_text(self) -> str:
        """'active=3 retried=1' in EP_STATES order (for a CSV cell)."""
        return " ".join(f"{s}={self.counts[s]}" for s in EP_STATES if self.counts.get(s))

    def to_dict(self) -> dict:
        return {**asdict(self), "sessions": self.sessions}


def check_disable_flag(value: object) -> str:
    """The provider option is a string "0"/"1"; anything else would be silently misread by the EP."""
    if not isinstance(value, str) or value not in OPTION_VALUES:
        raise ValueError(
            f'disable_file_mapped_weights must be the string "0" (feature on) or "1" (feature off), got {value!r}'
        )
    return value


# ----------------------------------------------------------------------------- scanning


@dataclass(frozen=True)
class _Hit:
    pattern: LogPattern
    line: str  # cleaned: no colour codes, no timestamp
    value: str  # the first inserted value ("" when the template has none)


def clean_line(line: str) -> str:
    """A log line without ANSI colour codes and ORT's timestamp, at most 300 characters."""
    return _TIMESTAMP.sub("", _ANSI.sub("", line)).strip()[:300]


def _scan(text: str) -> list[_Hit]:
    hits = []
    for raw in (text or "").splitlines():
        if not _ANY_FRAGMENT.search(raw):  # a VERBOSE log has ~200 lines per session; most are not ours
            continue
        line = clean_line(raw)
        for pattern in PATTERNS:
            m = pattern.regex.search(line)
            if m:
                hits.append(_Hit(pattern, line, (m.group(1) if m.groups() else "").strip()))
                break
    return hits


def find_messages(text: str, *names: str) -> list[str]:
    """The EP's own words: cleaned lines of the given PATTERNS names, in log order."""
    return [_message(h) for h in _scan(text) if h.pattern.name in names]


def _has_severity(text: str, sev: str) -> bool:
    return re.search(rf"\[{sev}:onnxruntime:", text or "") is not None


def _evidence(hits: Sequence[_Hit]) -> str:
    """The last line of each message kind, in log order, with a count when a kind repeats (a big
    context asks for thousands of DMA regions). At most EVIDENCE_LINES kinds: the decisive ones
    (`_EVIDENCE_RANK`; VERBOSE details after their INFO siblings) when there are more."""
    last: dict[str, tuple[int, _Hit]] = {}
    count: dict[str, int] = {}
    for i, h in enumerate(hits):
        if h.pattern.effect == "session":
            continue
        last[h.pattern.name] = (i, h)
        count[h.pattern.name] = count.get(h.pattern.name, 0) + 1

    def rank(item: tuple[int, _Hit]) -> tuple[int, bool, int]:
        i, h = item
        return _EVIDENCE_RANK.index(h.pattern.effect), h.pattern.level == "V", -i

    chosen = sorted(sorted(last.values(), key=rank)[:EVIDENCE_LINES], key=lambda t: t[0])
    return "\n".join(h.line + (f" [x{count[h.pattern.name]}]" if count[h.pattern.name] > 1 else "") for _, h in chosen)


def _message(hit: _Hit) -> str:
    return _LOC.sub("", hit.line)


# ----------------------------------------------------------------------------- classification


def classify_session(segment: str, *, disable_file_mapped_weights: str) -> EpVerdict:
    """The verdict for ONE session, from the log lines it printed while it was created (see
    `LogSegment`). `disable_file_mapped_weights` is what the harness passed; the EP's own
    confirmation decides ``disabled`` (the option has been seen ignored by older EPs).
    """
    passed = check_disable_flag(disable_file_mapped_weights)
    hits = _scan(segment)
    state, reason = _decide(hits, segment or "", passed)
    return EpVerdict(state, reason, _evidence(hits))


def _by_effect(hits: Sequence[_Hit]) -> dict[str, list[_Hit]]:
    out: dict[str, list[_Hit]] = {e: [] for e in _EFFECTS}
    for h in hits:
        out[h.pattern.effect].append(h)
    return out


def _decide(hits: Sequence[_Hit], text: str, passed: str) -> tuple[str, str]:
    e = _by_effect(hits)
    ep_option = e["option"][-1].value if e["option"] else None
    mapped = bool(e["map"]) and bool(e["dma-ok"])
    if e["gate"]:
        if e["dma-ok"]:
            return "unknown", "contradictory log: DMA data mapped after the platform gate turned mapping off"
        return "unavailable", "platform gate: " + _message(e["gate"][-1])
    if ep_option == "1":
        if e["dma-ok"]:
            return "unknown", "contradictory log: DMA data mapped although the EP confirmed option 1"
        note = "" if passed == "1" else ' (the harness passed "0")'
        return "disabled", "disable_file_mapped_weights=1 confirmed by the EP" + note
    if e["retry"]:
        return "retried", _message(e["retry"][-1]).rstrip(".")
    if e["map-failed"]:
        return "retried", (
            "mapping attempt failed ("
            + _message(e["map-failed"][0]).rstrip(".")
            + "); the session was created from a direct read"
        )
    if e["ep-disabled"]:
        reasons = list(dict.fromkeys(h.pattern.reason for h in e["ep-disabled"]))
        return "ep-disabled", "; ".join(reasons)
    if mapped:
        paths = sorted({h.value for h in e["map"] if h.pattern.name == "map-create" and h.value})
        reason = f"{len(e['dma-ok'])} DMA region(s) mapped" + (f" from {', '.join(paths)}" if paths else "")
        if passed == "1":
            reason += ' although the harness passed "1" (' + (
                'the EP reported "0")' if ep_option == "0" else "the EP did not confirm it)"
            )
        return "active", reason
    return "unknown", _missing(e, text, passed, ep_option)


def _missing(e: dict[str, list[_Hit]], text: str, passed: str, ep_option: str | None) -> str:
    """Why there is no verdict: say which evidence is missing, so the fix is obvious."""
    if passed == "1" and ep_option != "1":
        said = "missing" if ep_option is None else f"the EP printed {ep_option!r}"
        return (
            f'option "1" passed but the EP did not confirm it ("User specified disable_file_mapped_weights: 1" {said})'
        )
    if e["map"] and not e["dma-request"]:
        return "file mapping created but QNN requested no weight region: nothing was served from the mapping"
    if e["dma-request"] and not e["dma-ok"]:
        return "DMA data requested but no region created (log cut short?)"
    if e["dma-ok"] and not e["map"]:
        return "DMA regions created but no 'Creating context bin file mapping' line in this segment"
    if not text.strip():
        return "no QNN EP log captured"
    if not e["session"] and "qnn" not in text.lower():
        return "no QNN EP line in the log"
    if not _has_severity(text, "I"):
        return "no INFO line in the log: the mapping evidence needs log_severity_level 0 or 1"
    return "no file-mapping line in the EP log"


def split_sessions(text: str) -> list[str]:
    """Cut a log holding several sessions at each "Creating QNN EP" (INFO, one per session).

    Without INFO lines there is no marker and the whole text is one segment. Lines before the
    first marker (ORT's session-options trace) belong to the first session.
    """
    lines = (text or "").splitlines(keepends=True)
    starts = [i for i, ln in enumerate(lines) if PATTERNS[0].regex.search(ln)]
    if len(starts) < 2:
        return [text or ""]
    bounds = [0, *starts[1:], len(lines)]
    return ["".join(lines[a:b]) for a, b in zip(bounds, bounds[1:], strict=False)]


def aggregate(verdicts: Iterable[EpVerdict]) -> WorkerVerdict:
    """Counts per state and the worst state (`WORST_ORDER`) of a worker's session verdicts."""
    verdicts = list(verdicts)
    if not verdicts:
        return WorkerVerdict("unknown", {}, "no session classified")
    counts: dict[str, int] = {}
    for v in verdicts:
        counts[v.state] = counts.get(v.state, 0) + 1
    worst = min(verdicts, key=lambda v: WORST_ORDER.index(v.state))
    return WorkerVerdict(worst.state, {s: counts[s] for s in EP_STATES if s in counts}, worst.reason, worst.evidence)


def classify_log(text: str, *, disable_file_mapped_weights: str) -> WorkerVerdict:
    """Whole-log entry point for a caller that has one text: split into sessions where the log
    marks them (`split_sessions`), classify each, aggregate."""
    return aggregate(
        classify_session(seg, disable_file_mapped_weights=disable_file_mapped_weights) for seg in split_sessions(text)
    )


def classify_ep_log(text: str, *, disable_file_mapped_weights: str) -> tuple[str, str]:
    """(state, evidence) of a whole log: the interface targets/base.py uses today."""
    v = classify_log(text, disable_file_mapped_weights=disable_file_mapped_weights)
    detail = v.evidence or v.reason
    if v.state == "unknown" and v.reason and v.reason not in detail:
        detail = v.reason + ("\n" + detail if detail else "")
    return v.state, detail


# ----------------------------------------------------------------------------- log segments


def _flush_everything() -> None:
    """Python's buffered streams and C stdio (the QNN libraries print through it) to their fds."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(AttributeError, OSError, ValueError):
            stream.flush()
    if os.name == "posix":
        import ctypes

        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None).fflush(None)


def log_offset(path: str | os.PathLike) -> int:
    """Bytes in the log file now, after flushing what this process has buffered."""
    _flush_everything()
    try:
        return os.stat(path).st_size
    except OSError:
        return 0


def stderr_offset() -> int:
    """Bytes written so far to this process's fd 2 when it is a file (0 for a pipe or a tty):
    a worker whose stderr the parent pointed at its log file needs no path to mark a segment."""
    _flush_everything()
    try:
        return os.fstat(2).st_size
    except OSError:
        return 0


def read_log_segment(path: str | os.PathLike, start: int, end: int | None = None) -> str:
    """The text between two offsets of a log file ('' when unreadable)."""
    try:
        with open(path, "rb") as f:
            f.seek(start)
            data = f.read(-1 if end is None else max(0, end - start))
    except OSError:
        return ""
    return data.decode("utf-8", errors="replace")


class LogSegment:
    """Offsets of one session's lines in a log file this process's fd 2 (and 1) write to.

    The worker's stderr is a file the parent opened; ORT logs there unbuffered. Wrap each
    ``InferenceSession(...)`` in one segment, then classify `text()`::

        with LogSegment(spec.log_path) as seg:
            session = ort.InferenceSession(path, so)
        verdict = classify_session(seg.text(), disable_file_mapped_weights=flag)
    """

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)
        self.start = self.end = 0

    def __enter__(self) -> LogSegment:
        self.start = log_offset(self.path)
        self.end = self.start
        return self

    def __exit__(self, *exc: object) -> None:
        self.end = log_offset(self.path)

    def text(self) -> str:
        return read_log_segment(self.path, self.start, self.end)
