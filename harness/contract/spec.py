"""The small explicit spec the parent hands each worker, and the record a worker hands back.

Both are JSON files (not stdout: ORT and QNN log there). A worker's record carries its own
timings and output check; memory is sampled by the parent while every worker is alive.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from harness.core.files import write_json_atomic
from harness.core.vocab import EpState


@dataclass
class SessionSettings:
    """What the command line says about sessions; travels to the workers as a dict."""

    config: dict[str, str] = field(default_factory=dict)  # --session-config KEY=VALUE
    intra_op_threads: int | None = None  # --intra-op-threads N (None: ORT's default)
    provider_options: dict[str, str] = field(default_factory=dict)  # --provider-option (qnn)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> SessionSettings:
        data = data or {}
        return cls(
            dict(data.get("config") or {}), data.get("intra_op_threads"), dict(data.get("provider_options") or {})
        )

    def apply(self, so: Any) -> Any:
        """Put the user's session knobs on ``so`` (after the harness's own entries: a user entry
        of the same key wins, deliberately)."""
        for key, value in self.config.items():
            so.add_session_config_entry(key, value)
        if self.intra_op_threads is not None:
            so.intra_op_num_threads = self.intra_op_threads
        return so


#: 5: the run's settings every worker applies are typed fields (`WorkerSpec.models`,
#: `WorkerSpec.settings`), no longer keys of ``options``, which keeps a target's own options only.
SPEC_VERSION = 5


@dataclass
class WorkerSettings:
    """The run's settings every worker applies, whatever its target: typed, so a worker (and a
    target) reads ``spec.settings.runs``, never ``int(spec.options.get("runs") or 0)``."""

    #: The ORT session knobs of every session, both modes and the reference
    #: (`SessionSettings` as a dict: config, intra_op_threads,
    #: provider_options); read it with `session_settings`.
    session: dict[str, Any] = field(default_factory=dict)
    runs: int = 0  # timed inferences after the first (--runs)
    warmup: int = 0  # untimed inferences before the timed ones (--warmup)
    concurrency: int = 1  # inference threads of the timed runs (--concurrency)
    #: The generate workload (0 new tokens: the infer workload): the prompt, the tokens to
    #: generate and the ids the parent's reference generated, which every session must match.
    new_tokens: int = 0
    prompt_ids: list[int] = field(default_factory=list)
    expected_ids: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not isinstance(self.session, dict):
            raise TypeError(f"settings.session must be a mapping, not {type(self.session).__name__}")
        for name, least in (("runs", 0), ("warmup", 0), ("concurrency", 1), ("new_tokens", 0)):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < least:
                raise ValueError(f"settings.{name} must be a whole number >= {least}, not {value!r}")

    def session_settings(self) -> SessionSettings:
        """The session knobs as `SessionSettings`."""
        return SessionSettings.from_dict(self.session)


@dataclass
class WorkerSpec:
    target: str
    mode: str  # "mapped" | "heap"
    model_folder: str  # the PreparedModel folder (manifest.json, reference.npz) of the first model
    sessions: int = 1
    ready_path: str = ""
    result_path: str = ""
    log_path: str = ""
    weights_bytes: int = 0  # bytes the sessions load: weights file, or the QNN context binary
    #: Every model folder of the run, in order (a pipeline loads several; []: ``model_folder``).
    models: list[str] = field(default_factory=list)
    settings: WorkerSettings = field(default_factory=WorkerSettings)
    #: The target's own options (its `TargetOption`s) and what its prepare step hands its
    #: workers (e.g. the qnn target's compiled "onnx" paths): nothing every worker needs.
    options: dict[str, Any] = field(default_factory=dict)
    #: The harness that started this worker (pid + creation time, as psutil reports it): the
    #: worker watches THIS process, not whatever ``getppid()`` says when it starts (if the
    #: harness died first, that is already init).
    parent_pid: int = 0
    parent_create_time: float = 0.0
    #: How long the worker waits at the barrier for its release before giving up.
    release_timeout_s: float = 3600.0
    #: Test hook of the reliability suites, never set by a normal run: "crash", "signal", "hang",
    #: "raise", "drop-weight-pages", "exit-after-ready" (a background exit with code 0 once the
    #: ready record is written, as onnxruntime-qnn #337's TerminateProcess(0)), or "pause-start" /
    #: "pause-imports" / "pause-session" (stop at that moment of the worker's start-up so a test
    #: can kill the harness right there).
    fault_action: str = ""
    #: The group's control worker: the same sessions over no weights (`harness.runner.control`).
    control: bool = False
    #: The group's phase board and this worker's slot on it (`harness.runner.phaseboard`):
    #: how the parent's peak watch learns the worker's pid and phases ("": not watched).
    phase_board: str = ""
    phase_slot: int = -1
    spec_version: int = SPEC_VERSION

    def __post_init__(self) -> None:
        if not isinstance(self.models, list) or not all(isinstance(m, str) for m in self.models):
            raise TypeError(f"models must be a list of folder paths, not {self.models!r}")
        if not isinstance(self.options, dict):
            raise TypeError(f"options must be a mapping, not {type(self.options).__name__}")

    def model_folders(self) -> list[str]:
        """Every model folder of the run, in order (one unless the run loads a pipeline)."""
        return list(self.models or [self.model_folder])

    def session_settings(self):
        """The run's ORT session knobs (`WorkerSettings.session_settings`)."""
        return self.settings.session_settings()

    def write(self, path: Path) -> None:
        write_json_atomic(path, asdict(self))

    @classmethod
    def read(cls, path: Path) -> WorkerSpec:
        """The spec at ``path``; ValueError / TypeError for one of another version or shape (a
        worker is always started by the harness that wrote its spec: nothing to migrate)."""
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        if not isinstance(data, dict) or data.get("spec_version") != SPEC_VERSION:
            version = data.get("spec_version") if isinstance(data, dict) else None
            raise ValueError(f"{path}: spec_version {version} != {SPEC_VERSION}")
        settings = data.pop("settings", {})
        if not isinstance(settings, dict):
            raise TypeError(f"{path}: settings must be a mapping")
        return cls(**data, settings=WorkerSettings(**settings))


@dataclass
class WorkerRecord:
    """What a worker measured about itself (the parent adds memory and exit status)."""

    pid: int = 0  # the worker's own pid: the process the parent samples
    path_taken: str = ""
    map_attempts: int | None = None
    fallback_stage: str = ""
    map_errors: list[str] = field(default_factory=list)
    ep_file_mapping: str = EpState.NA
    ep_log_tail: str = ""
    ep_sessions: str = ""  # e.g. "active=3 retried=1" (qnn)
    ep_reason: str = ""
    ep_nodes: str = ""  # e.g. "mapped=1 disabled=1" (qnn)
    load_s: float | None = None
    create_s: float | None = None
    first_run_s: float | None = None
    runs: int = 0  # timed inferences after the first (--runs)
    latency_p50_s: float | None = None
    latency_p90_s: float | None = None
    latency_p99_s: float | None = None
    warmup: int = 0  # untimed inferences before the timed ones (--warmup)
    concurrency: int = 1  # inference threads of the timed phase (--concurrency)
    latency_mean_s: float | None = None
    latency_stdev_s: float | None = None
    latency_min_s: float | None = None
    latency_p95_s: float | None = None
    latency_max_s: float | None = None
    inferences_per_s: float | None = None
    #: The generate workload (`harness.core.schema.GENERATE_COLUMNS`).
    ttft_s: float | None = None
    decode_tokens_per_s: float | None = None
    token_latency_p50_s: float | None = None
    token_latency_p90_s: float | None = None
    token_latency_p99_s: float | None = None
    kv_cache_bytes: int | None = None
    prefill_private_bytes: int | None = None
    last_token_private_bytes: int | None = None
    generated_tokens: str = ""
    tokens_ok: bool | None = None
    #: The start-up peak as the worker saw it at its phase changes (harness.runner.peak); the
    #: parent merges its own 1 kHz samples into the row (harness.runner.peakwatch).
    peak_private_bytes: int | None = None
    peak_phase: str | None = None
    peak_shared_bytes: int | None = None
    peak_rss_bytes: int | None = None
    output_ok: bool = False
    output_detail: str = ""
    weights_bytes: int | None = None
    peak_bytes: int | None = None
    #: Bytes of weight copies the target holds in this process's private memory, every page
    #: written (heap and fallback loads): its USS / private bytes cannot be below this.
    private_copy_bytes: int | None = None
    #: Resident bytes of the model's mapped files in this process's page tables, read from its
    #: own memory maps just before it reported ready, only under the "drop-weight-pages" test
    #: hook (the parent reads the maps of every other worker itself): its RSS cannot be below this.
    mapped_resident_bytes: int | None = None
    #: CPU time (every thread) and wall time of the measured work (sessions, first inference,
    #: timed runs): a share well below 1 means the worker waited for a CPU (contention).
    cpu_s: float | None = None
    busy_s: float | None = None
    #: Seconds to map the weights file(s) and touch nothing, before the load (`harness.runner.floor`).
    floor_s: float | None = None
    #: Failed DMA registrations left behind, stale, by the worker's loads (cpu target: upstream
    #: never undoes one; `--failed-registration undo` does), None when not counted.
    stale_registrations: int | None = None
    #: Release callbacks of failed attempts that arrived late (during or after the direct read, or
    #: at teardown: counted once the sessions were closed), None when not counted.
    late_releases: int | None = None
    teardown: str = ""  # what the worker's teardown left behind (mapper_impl stats), empty when clean
    #: True once the parent's release reached the worker: a final record without it (or none
    #: at all) from a worker that exited means it ended before the harness let it go.
    released: bool = False
    error: str = ""

    @classmethod
    def from_dict(cls, data: dict) -> WorkerRecord:
        return cls(**{k: v for k, v in data.items() if k in cls.__dataclass_fields__})
