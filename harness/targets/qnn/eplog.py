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
- ``disabled``: the EP confirmed the option, as its build echoes it (`ECHO_STYLES`): 2.7.0's
  "User specified disable_file_mapped_weights: 1", or a readable build's enable flag ": 0".
- ``option-ignored`` (a failure): a session run with "1" whose log shows the EP working on a
  mapping (`MAPPING_ACTIVITY`: mapping, DMA, a failed attempt, a retry), whatever was echoed;
  or an echo that, read as the EP's known version echoes, says the EP read another value than
  the harness passed. The echo of a version not in `ECHO_BY_VERSION` is a note, not evidence.
- ``ep-error`` (a failure): "RPCMem Library is required for file mapping but is
  uninitialized.", a hard error of ``SetupBackend``, not a deliberate disable.
- ``mixed``: some nodes of the session were mapped, others disabled per node (embedded
  context, old binary): `EpVerdict.nodes_mapped` / ``nodes_disabled`` count them.
- ``ep-disabled``: the EP turned mapping off itself; `EpVerdict.reason` names why (one of
  `EP_DISABLED_REASONS`: embedded context, context binary version < 3.3.3, read callback
  registered, RPCMem unavailable).
- ``unavailable``: the platform gate ("File mapped weights feature is only available on Windows
  arm64 devices ..."), printed by the Linux x86_64 and the Windows x64 (win_amd64) builds.
- ``unknown``: no evidence, or contradictory evidence. Never counted as mapped (`MAPPED_STATES`).

Precedence inside one session's log segment (`PRECEDENCE`, first wins), in the order the EP
makes its decisions: an ignored option and a setup error are failures whatever follows; the
platform gate and the option are global and taken when the EP is constructed, before any
context is loaded, so nothing after them can be a real attempt (``unavailable`` >
``disabled``). Then per-context outcomes: a failed attempt is worse than a deliberate policy
decision and must not hide behind one, and either means the weights did not all come from the
mapping, so ``retried`` > ``mixed`` > ``ep-disabled`` > ``active``. A typical on-device
failure prints the mapping line, DMA lines, then the failure and the retry: ``retried``.
Contradictions (mapping evidence after the gate or after a confirmed "1") are ``unknown``: a
log that contradicts itself is no evidence.

A worker with M sessions logs M segments in sequence: `LogSegment` records a session's offsets
in the worker's log file, `classify_session` gives its verdict, `aggregate` counts the verdicts
per state and picks the worst (`WORST_ORDER`). `classify_log` is the whole-log entry point.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field

from harness.core.schema import EP_STATES, MAPPED_STATES
from harness.core.vocab import EpState

# The messages, reasons and orders live in eplog_patterns; re-exported here (one import for users).
from .eplog_patterns import (  # noqa: E402, F401
    _EFFECTS,
    _EVIDENCE_RANK,
    ECHO_BY_VERSION,
    ECHO_ENABLE_FLAG,
    ECHO_NONE,
    ECHO_STRING,
    ECHO_STYLES,
    EP_DISABLED_REASONS,
    EVIDENCE_LINES,
    FAILED_STATES,
    IGNORED,
    LINUX,
    MAPPING_ACTIVITY,
    NODE_DISABLES,
    NODE_MAPS,
    OPTION_VALUES,
    PATTERNS,
    PLATFORMS,
    PRECEDENCE,
    REASON_EMBEDDED,
    REASON_READ_CALLBACK,
    REASON_RPCMEM,
    REASON_VERSION,
    WIN,
    WIN_X64,
    WORST_ORDER,
    LogPattern,
    echo_style,
)

# Where a session's lines are in the worker's log; re-exported here (one import for users).
from .eplog_segments import LogSegment, log_offset, read_log_segment, stderr_offset  # noqa: E402, F401

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
    nodes_mapped: int = 0  # EPContext nodes whose context bin was mapped (with DMA regions served)
    nodes_disabled: int = 0  # nodes the EP disabled mapping for, one warning each
    note: str = ""  # what the log said that is no evidence here (an echo of an unknown version)

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
    nodes_mapped: int = 0  # over all sessions
    nodes_disabled: int = 0
    note: str = ""  # the sessions' notes, each once

    @property
    def failed(self) -> bool:
        """The EP ignored the option or failed its setup in a session: the worker fails."""
        return any(self.counts.get(s) for s in FAILED_STATES)

    def nodes_text(self) -> str:
        """'mapped=1 disabled=1' (for the ep_nodes cell; "" when no node said anything)."""
        if not (self.nodes_mapped or self.nodes_disabled):
            return ""
        return f"mapped={self.nodes_mapped} disabled={self.nodes_disabled}"

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


def classify_session(segment: str, *, disable_file_mapped_weights: str, echo: str | None = None) -> EpVerdict:
    """The verdict for ONE session, from the log lines it printed while it was created (see
    `LogSegment`). `disable_file_mapped_weights` is what the harness passed; ``echo`` is how
    the EP's build echoes the option (`ECHO_STYLES`, from its version: `echo_style`), None when
    not known: its echo is then a note, and only the log's other evidence decides.
    """
    passed = check_disable_flag(disable_file_mapped_weights)
    if echo is not None and echo not in ECHO_STYLES:
        raise ValueError(f"echo must be one of {', '.join(ECHO_STYLES)} or None, got {echo!r}")
    hits = _scan(segment)
    state, reason, note = _decide(hits, segment or "", passed, echo)
    mapped, disabled = _nodes(hits)
    return EpVerdict(state, reason, _evidence(hits), mapped, disabled, note)


def _nodes(hits: Sequence[_Hit]) -> tuple[int, int]:
    """(nodes mapped, nodes disabled per node): a mapped node has its mapping line and the
    session served DMA regions; a disabled node has its own warning."""
    served = any(h.pattern.effect == "dma-ok" for h in hits)
    mapped = sum(h.pattern.name in NODE_MAPS for h in hits) if served else 0
    return mapped, sum(h.pattern.name in NODE_DISABLES for h in hits)


def _by_effect(hits: Sequence[_Hit]) -> dict[str, list[_Hit]]:
    out: dict[str, list[_Hit]] = {e: [] for e in _EFFECTS}
    for h in hits:
        out[h.pattern.effect].append(h)
    return out


def _read_option(echoed: str | None, echo: str | None) -> tuple[str | None, str]:
    """(the value the EP read, as its build's echo says; a note when the echo says nothing we
    can read). The string echo is the value itself; the enable-flag echo is its opposite."""
    if echoed is None:
        return None, ""
    if echo == ECHO_STRING:
        return echoed, ""
    if echo == ECHO_ENABLE_FLAG and echoed in OPTION_VALUES:
        return ("1" if echoed == "0" else "0"), ""
    known = "not known" if echo is None else f'not expected of a build whose echo is "{echo}"'
    return None, (
        f'the EP echoed "disable_file_mapped_weights: {echoed}"; how this EP version echoes the option is '
        f"{known}, so the echo is a note, not evidence (known: {_known_echoes()})"
    )


def _known_echoes() -> str:
    return ", ".join(f"{v}: {style}" for v, style in ECHO_BY_VERSION.items())


def _activity(e: dict[str, list[_Hit]]) -> str:
    """The mapping work a session's log shows ("" when none), in words."""
    found = []
    if e["dma-ok"]:
        found.append(f"{len(e['dma-ok'])} DMA region(s) mapped")
    if e["map"] and not e["dma-ok"]:
        found.append("a context bin file mapping")
    if e["map-failed"] or e["retry"]:
        found.append("a failed mapping attempt")
    if not found and e["dma-request"]:
        found.append("DMA data requested")
    return ", ".join(found)


def _decide(hits: Sequence[_Hit], text: str, passed: str, echo: str | None) -> tuple[str, str, str]:
    e = _by_effect(hits)
    echoed = e["option"][-1].value if e["option"] else None
    read, note = _read_option(echoed, echo)
    said = f' (the EP echoed "{echoed}")' if echoed is not None else ""
    activity = _activity(e) if any(e[x] for x in MAPPING_ACTIVITY) else ""
    if passed == "1" and activity:
        why = f'option ignored by the EP: the harness passed "1" but the log shows {activity}{said}'
        return EpState.OPTION_IGNORED, why, note
    if read is not None and read != passed:
        how = "" if echo == ECHO_STRING else f', the enable flag: the EP read "{read}"'
        return (
            EpState.OPTION_IGNORED,
            (
                f'option ignored by the EP: the harness passed disable_file_mapped_weights="{passed}", '
                f'the EP echoed "{echoed}"{how}'
            ),
            note,
        )
    if e["ep-error"]:
        return EpState.EP_ERROR, "hard error in SetupBackend: " + _message(e["ep-error"][-1]), note
    if e["gate"]:
        if e["dma-ok"]:
            return (
                EpState.UNKNOWN,
                "contradictory log: DMA data mapped after the platform gate turned mapping off",
                note,
            )
        return EpState.UNAVAILABLE, "platform gate: " + _message(e["gate"][-1]), note
    if passed == "1" and read == "1":
        flag = f' (its enable flag, "{echoed}")' if echo == ECHO_ENABLE_FLAG else ""
        return EpState.DISABLED, f"disable_file_mapped_weights=1 confirmed by the EP{flag}", note
    state, reason = _decide_mapped(e, hits, text, passed, echoed)
    return state, reason, note


def _decide_mapped(e: dict[str, list[_Hit]], hits: Sequence[_Hit], text: str, passed: str, echoed) -> tuple[str, str]:
    """The per-context outcome of a session the option and the gate left to the EP."""
    mapped = bool(e["map"]) and bool(e["dma-ok"])
    if e["retry"]:
        return EpState.RETRIED, _message(e["retry"][-1]).rstrip(".")
    if e["map-failed"]:
        return EpState.RETRIED, (
            "mapping attempt failed ("
            + _message(e["map-failed"][0]).rstrip(".")
            + "); the session was created from a direct read"
        )
    nodes_mapped, nodes_disabled = _nodes(hits)
    if e["ep-disabled"]:
        reasons = "; ".join(dict.fromkeys(h.pattern.reason for h in e["ep-disabled"]))
        if mapped and nodes_mapped and nodes_disabled:
            return EpState.MIXED, f"{nodes_mapped} node(s) mapped, {nodes_disabled} disabled per node ({reasons})"
        return EpState.EP_DISABLED, reasons
    if mapped:
        paths = sorted({h.value for h in e["map"] if h.pattern.name == "map-create" and h.value})
        reason = f"{len(e['dma-ok'])} DMA region(s) mapped" + (f" from {', '.join(paths)}" if paths else "")
        return EpState.ACTIVE, reason
    return EpState.UNKNOWN, _missing(e, text, passed, echoed)


def _missing(e: dict[str, list[_Hit]], text: str, passed: str, ep_option: str | None) -> str:
    """Why there is no verdict: say which evidence is missing, so the fix is obvious."""
    if passed == "1":
        said = "missing" if ep_option is None else f"the EP printed {ep_option!r}, which is no confirmation here"
        return f'option "1" passed but the EP did not confirm it (its echo: {said}) and no other line shows the path'
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
        return WorkerVerdict(EpState.UNKNOWN, {}, "no session classified")
    counts: dict[str, int] = {}
    for v in verdicts:
        counts[v.state] = counts.get(v.state, 0) + 1
    worst = min(verdicts, key=lambda v: WORST_ORDER.index(v.state))
    return WorkerVerdict(
        worst.state,
        {s: counts[s] for s in EP_STATES if s in counts},
        worst.reason,
        worst.evidence,
        sum(v.nodes_mapped for v in verdicts),
        sum(v.nodes_disabled for v in verdicts),
        "; ".join(dict.fromkeys(v.note for v in verdicts if v.note)),
    )


def classify_log(text: str, *, disable_file_mapped_weights: str, echo: str | None = None) -> WorkerVerdict:
    """Whole-log entry point for a caller that has one text: split into sessions where the log
    marks them (`split_sessions`), classify each, aggregate."""
    flag = disable_file_mapped_weights
    return aggregate(classify_session(seg, disable_file_mapped_weights=flag, echo=echo) for seg in split_sessions(text))


def classify_ep_log(text: str, *, disable_file_mapped_weights: str, echo: str | None = None) -> tuple[str, str]:
    """(state, evidence) of a whole log: the interface targets/base.py uses today."""
    v = classify_log(text, disable_file_mapped_weights=disable_file_mapped_weights, echo=echo)
    detail = v.evidence or v.reason
    if v.state == EpState.UNKNOWN and v.reason and v.reason not in detail:
        detail = v.reason + ("\n" + detail if detail else "")
    return v.state, detail
