"""The interface every target implements; target options travel as one generic mapping, never named fields."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from harness.contract.options import RunOptions
    from harness.contract.spec import WorkerRecord, WorkerSpec
    from harness.prep.folder import PreparedModel

#: Every target gets at least this gate: correctness does not depend on the platform.
CORRECTNESS_GATE = ("failed_workers==0", "A crash, hang, exception or wrong output is a defect in either mode.")


@dataclass(frozen=True)
class TargetOption:
    """One option of one target: a command-line flag and a key in the options mapping."""

    name: str  # key in the options mapping, e.g. "embed_mode"
    flag: str  # command-line flag, e.g. "--embed-mode"
    default: Any
    help: str
    parse: Callable[[str], Any] | None = None  # None: an on/off switch
    choices: tuple | None = None
    metavar: str | None = None
    repeat: bool = False  #: Repeatable: ``parse`` gives a (key, value) pair per use; the value is their dict.


@dataclass
class Prepared:
    """What the parent prepared for the workers; everything here is a fact for metadata."""

    model: PreparedModel  # the first model: folder with manifest.json and reference.npz
    weights_bytes: int  # bytes the sessions load (weights files, or the QNN context binaries)
    warm_files: list[Path]  #: The weights files: read once before the first group, or evicted before each (cold).
    #: This target's own worker options (merged into every WorkerSpec.options of its groups).
    worker_options: dict[str, Any] = field(default_factory=dict)
    source: str = ""  # what was measured, for people
    models: list[PreparedModel] = field(default_factory=list)  # every model of a pipeline (default: [model])
    notes: list[str] = field(default_factory=list)  # facts about these models (how the reference was made...)
    logs: list[Path] = field(default_factory=list)  # logs of the preparation (the QNN compiler's): copied into the run
    #: Bytes of the files the heap path reads whole (weights files with their alignment padding;
    #: 0: not a prepared weights file, e.g. a QNN context binary, measured as it is).
    file_bytes: int = 0
    #: Bytes of the weights read as indexed tables (embeddings, `prep.models.gathered_initializers`):
    #: a mapped worker keeps only the rows its inputs index resident.
    gathered_bytes: int = 0
    #: The provider options the target ran with when it chose some itself (None: the run's own).
    provider_options: dict[str, str] | None = None
    #: The generate workload's prompt, G and reference ids (`WorkerSettings` fields; {}: infer).
    generation: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.models:
            self.models = [self.model]


@dataclass
class LiveSessions:
    """A worker's sessions plus what must outlive them; ``groups[m][k]`` is group m's session of model k."""

    sessions: list = field(default_factory=list)
    keepalive: list = field(default_factory=list)
    closers: list[Callable[[], None]] = field(default_factory=list)
    groups: list[list] = field(default_factory=list)

    def add_group(self, sessions: list) -> None:
        self.groups.append(list(sessions))
        self.sessions.extend(sessions)

    def first_group(self) -> list:
        return self.groups[0] if self.groups else self.sessions[:1]

    def close(self) -> None:
        self.groups.clear()
        self.sessions.clear()
        self.keepalive.clear()
        closers, self.closers = self.closers, []
        for close in closers:
            close()


class Target(ABC):
    """One way of loading weights into ORT sessions, measured mapped vs heap."""

    name: str
    summary: str  # one line for --help
    options: tuple[TargetOption, ...] = ()
    #: The EP whose provider options ``--provider-option`` sets, e.g. "the QNN EP" ("": this
    #: target takes none, and a run of it refuses them).
    provider_ep: str = ""
    #: Its models list their external tensors, so each group can run a weightless control
    #: worker beside the workers (`harness.runner.control`).
    has_control: bool = False
    #: What ``doctor`` says it will do before its probe ("": nothing beyond the target's name).
    probe_summary: str = ""

    def options_for(self, opts: RunOptions) -> dict[str, Any]:
        """This target's options: its defaults, overridden by what was given when it is the run's own target."""
        given = opts.target_options if self.name == opts.target else {}
        return {o.name: given.get(o.name, o.default) for o in self.options}

    def check(self, opts: RunOptions) -> None:  # noqa: B027 - optional hook, deliberately empty
        """Refuse (InputError) run options this target cannot honour. Called before any work."""

    @abstractmethod
    def prepare(self, opts: RunOptions, progress: Any) -> Prepared:
        """Build or reuse (cache) the model the workers load. InputError for user mistakes."""

    def mapped_may_copy(self, opts: RunOptions) -> bool:
        """True when mapped workers may hold private copies (faults injected): the budget plans heap-like use."""
        return False

    def notes(self, opts: RunOptions) -> list[str]:
        """Plain-language facts about how this target measures (they travel in metadata)."""
        from harness.prep.sessions import settings_notes

        return settings_notes(opts.session_settings())

    def default_gates(self, opts: RunOptions) -> list[tuple[str, str]]:
        """(expression, why) pairs judged unless --no-default-gates; recorded in metadata."""
        return [CORRECTNESS_GATE]

    def versions(self) -> dict[str, str | None]:
        """Versions of what this target runs on, beyond onnxruntime (metadata, history)."""
        return {}

    def version_keys(self) -> dict[str, str]:
        """The keys `versions` reports with their labels (``{"qnn_sdk": "QNN SDK"}``); declarative."""
        return {}

    def probe(self, timeout_s: float) -> Any | None:
        """This machine's device as the target's EP reports it, or None: nothing to probe."""
        return None

    @property
    def has_probe(self) -> bool:
        return type(self).probe is not Target.probe

    @abstractmethod
    def create_sessions(self, spec: WorkerSpec, models: list[PreparedModel], record: WorkerRecord) -> LiveSessions:
        """Create spec.sessions session groups, one session per model, timed into ``record``."""

    def weightless_work(self, spec: WorkerSpec, models: list[PreparedModel]) -> None:  # noqa: B027 - optional hook
        """What a worker of this target does beyond its sessions (e.g. reading its own memory
        maps): the control worker does it too, so its cost is never called a weight copy."""

    def run(self, session: Any, model: PreparedModel, feeds: dict) -> list:
        """One inference of ``model`` in ``session``: its outputs, in ``model.outputs`` order."""
        from harness.prep.sessions import run_session

        return run_session(session, model.outputs, feeds, model.input_types, model.output_types)

    def generate(self, group: list, models: list[PreparedModel], settings: Any, after_prefill: Any = None) -> Any:
        """One greedy loop of the generate workload in one session group (a `prep.decoder.Generation`)."""
        from harness.prep.decoder import generate_in_models

        return generate_in_models(self, group, models, settings, after_prefill)

    def check_output(self, outputs: list, reference: dict, model: PreparedModel) -> tuple[bool, str]:
        """Compare the first inference with the reference: (ok, detail), tolerances by element type."""
        from harness.prep.outputs import check_outputs

        return check_outputs(outputs, reference, model.outputs, model.nondeterministic)
