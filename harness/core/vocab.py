"""Every closed vocabulary of a run, defined once: one string enum per vocabulary.

The values are the very strings the CSV files, metadata.json, headline.json and the report
have always carried: a member *is* its string (``Mode.MAPPED == "mapped"``, the same hash, the
same text in an f-string, a ``repr``, ``json.dumps`` and a CSV cell), so files stay byte-identical and code
that still holds a plain string compares equal. What the enums add is one place where each set
of values lives, so a tuple in one module cannot drift from the same tuple in another.
``suites/harness/test_architecture.py`` refuses a vocabulary value written as a literal where it
is compared (``==``, ``in``, a ``match`` case, a dict key or index) outside this module, and
names the enum to use.

Why not ``enum.StrEnum``: it is new in Python 3.11, and the project supports 3.10 (the
``requires-python`` floor; onnxruntime still ships 3.10 wheels). `StrEnum` below is the same
thing in four lines: a ``str`` mix-in whose ``str()`` and ``format()`` are the value, on every
version. Membership of a plain string is asked with `values` (``"mapped" in Mode`` raises on
3.10 and 3.11).
"""

from __future__ import annotations

from enum import Enum


class StrEnum(str, Enum):
    """A string enum: each member is its value, in comparisons, hashes, f-strings and JSON."""

    __str__ = str.__str__
    __format__ = str.__format__
    __repr__ = str.__repr__  # messages that quote a value read as they always did: 'mapped'

    @classmethod
    def values(cls) -> tuple[str, ...]:
        """The plain strings, in declaration order (for messages, choices and CSV checks)."""
        return tuple(member.value for member in cls)


class Mode(StrEnum):
    """How a worker asked for its weights: ``disable_file_mapped_weights`` 0 or 1."""

    MAPPED = "mapped"
    HEAP = "heap"


#: The provider option ``disable_file_mapped_weights`` each mode passes: "1" turns mapping off.
DISABLE_FLAGS: dict[Mode, str] = {Mode.MAPPED: "0", Mode.HEAP: "1"}
#: The modes, mapped first (the order tables and charts show them in).
MODES: tuple[Mode, ...] = tuple(Mode)


def disable_flag(mode: str) -> str:
    """``disable_file_mapped_weights`` for a mode: "0" (mapped) or "1" (heap); KeyError otherwise."""
    return DISABLE_FLAGS[mode]


class PathTaken(StrEnum):
    """How a worker's weights were really loaded (``path_taken``), from its own evidence."""

    MAPPED = "mapped"
    HEAP = "heap"
    FALLBACK = "fallback"  # mapping was tried and failed: the weights were read instead
    UNKNOWN = "unknown"  # the EP log gave no evidence either way


class EpState(StrEnum):
    """How the QNN EP treated file mapping in a session, from its own log (``ep_file_mapping``;
    harness/targets/qnn/eplog.py says what evidence each needs). ``NA``: no EP stands between
    the weights and the sessions (cpu, ort-native): the worker's own path is the evidence."""

    ACTIVE = "active"
    RETRIED = "retried"
    MIXED = "mixed"
    DISABLED = "disabled"
    EP_DISABLED = "ep-disabled"
    UNAVAILABLE = "unavailable"
    OPTION_IGNORED = "option-ignored"
    EP_ERROR = "ep-error"
    UNKNOWN = "unknown"
    #: A mapped-mode worker that reported the mapped path (or an active EP) while its private
    #: memory held the weights (copied_bytes, against the group's control worker): a silent copy,
    #: as onnxruntime-qnn #677's SSR recovery made. Set by the runner from memory, never by a log.
    COPIED = "copied"
    NA = "n/a"

    @classmethod
    def of(cls, cell: str | None) -> str:
        """The state a cell records; an empty cell is `NA` (rows built without an EP verdict)."""
        return cell or cls.NA


#: The states the EP's own log may give a qnn session (`EpState` without `EpState.NA`).
EP_STATES: tuple[EpState, ...] = tuple(s for s in EpState if s is not EpState.NA)
#: The only EP state that is evidence the weights came from the mapping (a qnn session).
MAPPED_STATES: tuple[EpState, ...] = (EpState.ACTIVE,)
#: The states under which a worker whose own path says mapped counts as mapped: the EP's own
#: evidence (`MAPPED_STATES`), or no EP at all (`EpState.NA`).
MAPPED_PATH_STATES: tuple[EpState, ...] = (*MAPPED_STATES, EpState.NA)


class FeatureStatus(StrEnum):
    """Was file mapping really exercised in a run's mapped mode (`harness.core.verdict`)."""

    ACTIVE = "active"
    PARTIAL = "partial"
    UNAVAILABLE = "unavailable"
    DISABLED = "disabled"
    OPTION_IGNORED = "option-ignored"
    EP_ERROR = "ep-error"
    COPIED = "copied"
    UNKNOWN = "unknown"
    NOT_MEASURED = "not-measured"


class GateStatus(StrEnum):
    """What a gate came to (`harness.core.gates.GateResult.status`)."""

    PASS = "pass"
    FAIL = "fail"
    SKIP = "skip"  # its condition did not hold, or it compares modes a run did not both measure
    INCONCLUSIVE = "inconclusive"  # a timing gate whose interval straddles the threshold
    CONTENDED = "contended"  # a timing gate timed on a busy machine


#: Gate statuses that count as passed; an undecided gate never does.
PASSED_GATE_STATUSES = (GateStatus.PASS, GateStatus.SKIP)
#: Gate statuses that decided nothing (never a pass).
UNDECIDED_GATE_STATUSES = (GateStatus.INCONCLUSIVE, GateStatus.CONTENDED)


class Verdict(StrEnum):
    """A run's one verdict (`harness.core.verdict.judge`)."""

    PASS = "pass"
    FAIL = "fail"
    INCOMPLETE = "incomplete"


class RunStatus(StrEnum):
    """metadata.json's ``status``; a run that could not go on says ``"failed: <what>"``
    (`RunStatus.failed`), which is no member: its words vary."""

    RUNNING = "running"
    COMPLETE = "complete"
    INTERRUPTED = "interrupted"
    UNKNOWN = "unknown"  # no metadata.json

    @staticmethod
    def failed(what: object) -> str:
        """The status of a run that could not go on."""
        return f"{FAILED_PREFIX}{what}"


#: How the status of a run that could not go on starts.
FAILED_PREFIX = "failed: "


class PageCache(StrEnum):
    """The page-cache state of the weights as a group started (``page_cache``)."""

    WARM = "warm"
    COLD = "cold"
    COLD_UNVERIFIED = "cold-unverified"  # evicted, but the OS could not confirm it


#: What ``--page-cache`` may ask for.
PAGE_CACHE_CHOICES = (PageCache.WARM, PageCache.COLD)


class PeakPhase(StrEnum):
    """The start-up phase a worker's private-memory peak fell in (``peak_phase``)."""

    START = "start"
    LOAD = "load"
    CREATE = "create"
    FIRST_RUN = "first_run"


class Workload(StrEnum):
    """What each session does (``--workload``): one inference, or a greedy generate loop over a decoder."""

    INFER = "infer"
    GENERATE = "generate"


class Start(StrEnum):
    """How a group's workers started (``start``, `harness.core.passes`): together, memory
    sampled with all N alive, or one at a time, the timing pass."""

    CONCURRENT = "concurrent"
    SEQUENTIAL = "sequential"


class Doubt(StrEnum):
    """Why physics refuses a derived figure (`harness.core.physics.Refusal`)."""

    IMPLAUSIBLE = "implausible"  # physics forbids it: missing evidence, never a pass
    NOT_MEASURABLE = "not measurable"  # below the run's noise: no measurement, no sign of a broken sample


class Aggregate(StrEnum):
    """How a group's figure comes from its workers' (`harness.core.metrics.Figure`)."""

    MEDIAN = "median"  # over the ok workers
    SUM = "sum"  # over every worker, complete groups only
    MIN = "min"
    MAX = "max"


class Tone(StrEnum):
    """The colour of a badge, named after the report's colour variables."""

    PASS = "pass"  # green: a success with evidence
    FAIL = "fail"  # red
    WARN = "warn"  # amber: no failure, but not a success either
    MUTED = "skip"  # grey: nothing to say
