"""Every closed vocabulary of a run, once: string enums whose members are their strings (3.10: our `StrEnum`)."""

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
MODES: tuple[Mode, ...] = tuple(Mode)  #: The modes, mapped first (the order tables and charts show them in).


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
    """How the QNN EP treated file mapping in a session, from its log; ``NA``: no EP (cpu, ort-native)."""

    ACTIVE = "active"
    RETRIED = "retried"
    MIXED = "mixed"
    DISABLED = "disabled"
    EP_DISABLED = "ep-disabled"
    UNAVAILABLE = "unavailable"
    OPTION_IGNORED = "option-ignored"
    EP_ERROR = "ep-error"
    UNKNOWN = "unknown"
    COPIED = "copied"  #: A mapped worker whose private memory held the weights: a silent copy (#677), from memory.
    NA = "n/a"

    @classmethod
    def of(cls, cell: str | None) -> str:
        """The state a cell records; an empty cell is `NA` (rows built without an EP verdict)."""
        return cell or cls.NA


#: The states the EP's own log may give a qnn session (`EpState` without `EpState.NA`).
EP_STATES: tuple[EpState, ...] = tuple(s for s in EpState if s is not EpState.NA)
MAPPED_STATES: tuple[EpState, ...] = (EpState.ACTIVE,)  #: The one EP state proving the weights came from the mapping.
#: States under which a worker whose own path says mapped counts as mapped.
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


PASSED_GATE_STATUSES = (GateStatus.PASS, GateStatus.SKIP)  #: Gate statuses that count as passed.
UNDECIDED_GATE_STATUSES = (GateStatus.INCONCLUSIVE, GateStatus.CONTENDED)  #: Gate statuses that decided nothing.


class Verdict(StrEnum):
    """A run's one verdict (`harness.core.verdict.judge`)."""

    PASS = "pass"
    FAIL = "fail"
    INCOMPLETE = "incomplete"


class RunStatus(StrEnum):
    """metadata.json's ``status``; ``"failed: <what>"`` (`RunStatus.failed`) is no member."""

    RUNNING = "running"
    COMPLETE = "complete"
    INTERRUPTED = "interrupted"
    UNKNOWN = "unknown"  # no metadata.json

    @staticmethod
    def failed(what: object) -> str:
        """The status of a run that could not go on."""
        return f"{FAILED_PREFIX}{what}"


FAILED_PREFIX = "failed: "  #: How the status of a run that could not go on starts.


class PageCache(StrEnum):
    """The page-cache state of the weights as a group started (``page_cache``)."""

    WARM = "warm"
    COLD = "cold"
    COLD_UNVERIFIED = "cold-unverified"  # evicted, but the OS could not confirm it


PAGE_CACHE_CHOICES = (PageCache.WARM, PageCache.COLD)  #: What ``--page-cache`` may ask for.


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
    """How a group's workers started: together (memory sampled) or one at a time (the timing pass)."""

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
