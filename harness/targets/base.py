"""The interface every target implements, in the way psutil keeps one module per platform
behind one API: the runner and the worker only ever talk to a `Target`.

A target has two sides:

- parent side (the `harness run` process): declare its options, check them against the run's
  options, prepare the model(s) and their cache, say which files to warm, its notes, its default
  gates and the versions of what it runs on;
- worker side (each worker process): create the M session groups (one session per model of
  the run: usually one, several for a pipeline), say which path each took, run them and check
  the outputs against the reference.

Target options travel as one generic mapping (``RunOptions.target_options`` ->
``WorkerSpec.options``), never as target-named fields threaded through the runner; what every
worker needs whatever its target (the models, the session knobs, --runs...) is a typed field
of the spec (``WorkerSpec.models``, ``WorkerSpec.settings``), never a key of that mapping.
"""

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
    #: Repeatable: ``parse`` returns a (key, value) pair per use; the option's value is their dict.
    repeat: bool = False


@dataclass
class Prepared:
    """What the parent prepared for the workers; everything here is a fact for metadata."""

    model: PreparedModel  # the first model: folder with manifest.json and reference.npz
    weights_bytes: int  # bytes the sessions load (weights files, or the QNN context binaries)
    #: The weights files: read once before the first group (warm page cache) or evicted
    #: before each group (--page-cache cold).
    warm_files: list[Path]
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
    #: The generate workload's prompt, G and reference ids (`WorkerSettings` fields; {}: infer).
    generation: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.models:
            self.models = [self.model]


@dataclass
class LiveSessions:
    """A worker's sessions plus everything that must outlive them (weights, OrtValues).

    ``groups[m][k]`` is session group m's session of model k; ``sessions`` all of them."""

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

    # -- parent side -------------------------------------------------------------------
    def options_for(self, opts: RunOptions) -> dict[str, Any]:
        """This target's options: its defaults, overridden by what was given (when it is the
        run's own target; a peer runs with its defaults)."""
        given = opts.target_options if self.name == opts.target else {}
        return {o.name: given.get(o.name, o.default) for o in self.options}

    def check(self, opts: RunOptions) -> None:  # noqa: B027 - optional hook, deliberately empty
        """Refuse (InputError) run options this target cannot honour. Called before any work."""

    @abstractmethod
    def prepare(self, opts: RunOptions, progress: Any) -> Prepared:
        """Build or reuse (cache) the model the workers load. InputError for user mistakes."""

    def mapped_may_copy(self, opts: RunOptions) -> bool:
        """True when mapped-mode workers may end up holding private copies (faults injected):
        the memory budget then plans for heap-like use in both modes."""
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
        """The keys `versions` reports, each with what reports call it (``{"qnn_sdk": "QNN
        SDK"}``): headline.json, the history's columns and the report's environment take their
        version keys from here (`harness.targets.version_labels`), so a target with versions of
        its own touches no generic module. Declarative: no import, no probe."""
        return {}

    def probe(self, timeout_s: float) -> Any | None:
        """What this machine's device is, as the target's EP reports it (``doctor``): an object
        with ``lines()`` (for people) and ``to_dict()`` (``--json``); None when the target has
        no device to probe (``doctor`` then does not offer it)."""
        return None

    @property
    def has_probe(self) -> bool:
        return type(self).probe is not Target.probe

    # -- worker side -------------------------------------------------------------------
    @abstractmethod
    def create_sessions(self, spec: WorkerSpec, models: list[PreparedModel], record: WorkerRecord) -> LiveSessions:
        """Create spec.sessions session groups, each one session per model, timed into
        ``record`` (load_s, create_s, path_taken...)."""

    def run(self, session: Any, model: PreparedModel, feeds: dict) -> list:
        """One inference of ``model`` in ``session``: its outputs, in ``model.outputs`` order."""
        from harness.prep.sessions import run_session

        return run_session(session, model.outputs, feeds, model.input_types, model.output_types)

    def generate(self, group: list, models: list[PreparedModel], settings: Any, after_prefill: Any = None) -> Any:
        """One greedy loop of the generate workload in one session group (a `prep.decoder.Generation`)."""
        from harness.prep.decoder import generate_in_models

        return generate_in_models(self, group, models, settings, after_prefill)

    def check_output(self, outputs: list, reference: dict, model: PreparedModel) -> tuple[bool, str]:
        """Compare the first inference with the reference: (ok, detail). Tolerances follow each
        output's element type; non-deterministic outputs are compared by shape only."""
        from harness.prep.outputs import check_outputs

        return check_outputs(outputs, reference, model.outputs, model.nondeterministic)
