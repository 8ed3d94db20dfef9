"""The options of one run (`RunOptions`): what the command line, the bench and the pytest
plugin hand to `harness.runner.sweep.execute`, and what the targets read."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.core.schema import MODES

#: What ``--page-cache`` accepts: warm (read the weights once before the first group) or cold
#: (evict their pages before each group).
PAGE_CACHE_MODES = ("warm", "cold")


@dataclass
class RunOptions:
    target: str = "cpu"
    target_options: dict[str, Any] = field(default_factory=dict)  # the target's own options, generic
    peer: str | None = None  # a second target measured in mapped mode beside it (e.g. ort-native)
    model: Path | None = None  # the first of ``models`` (kept in step by __post_init__)
    models: list[Path] = field(default_factory=list)  # --model, repeatable: files or folders (a pipeline)
    model_size: int = 256 * 1024**2
    shapes: dict[str, list[int]] = field(default_factory=dict)
    free_dims: dict[str, int] = field(default_factory=dict)  # --free-dim NAME=VALUE
    input_values: dict[str, str] = field(default_factory=dict)  # --input NAME=FILE.npy | NAME=VALUE
    session_config: dict[str, str] = field(default_factory=dict)  # --session-config KEY=VALUE
    provider_options: dict[str, str] = field(default_factory=dict)  # --provider-option KEY=VALUE (qnn)
    intra_op_threads: int | None = None  # --intra-op-threads N
    runs: int = 0  # --runs R: timed inferences after the first (latency percentiles)
    page_cache: str = "warm"  # --page-cache warm|cold
    processes: list[int] = field(default_factory=lambda: [4])
    sessions_per_process: int = 1
    modes: list[str] = field(default_factory=lambda: list(MODES))
    repeat: int = 1
    worker_timeout_s: float = 300.0
    out: Path | None = None
    out_prefix: str = "run"  # the default folder is results/<prefix>-<date>-<time>[-K]
    cache_dir: Path | None = None
    gates: list[str] = field(default_factory=list)  # user gate expressions (validated before any work)
    default_gates: bool = True
    labels: dict[str, str] = field(default_factory=dict)  # KEY=VALUE tags (device kind...) for history
    fault_actions: dict[int, str] = field(default_factory=dict)
    command: str = ""
    project_to: tuple[int, int] | None = None  # (sessions, weights bytes) the report projects to

    def __post_init__(self) -> None:
        if self.cache_dir is not None:  # the compiler's child and the workers run in other folders
            self.cache_dir = Path(self.cache_dir).absolute()
        if self.models:
            self.model = self.models[0]
        elif self.model is not None:
            self.models = [self.model]

    def session_settings(self):
        """The ORT session knobs every session (mapped and heap) and the reference share."""
        from harness.prep.sessions import SessionSettings

        return SessionSettings(dict(self.session_config), self.intra_op_threads, dict(self.provider_options))

    def input_request(self):
        """What --shape, --free-dim and --input say about the model's inputs."""
        from harness.prep.inputs import InputRequest

        return InputRequest(dict(self.shapes), dict(self.free_dims), dict(self.input_values))
