"""The small explicit spec the parent hands each worker, and the record a worker hands back.

Both are JSON files (not stdout: ORT and QNN log there). A worker's record carries its own
timings and output check; memory is sampled by the parent while every worker is alive.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

SPEC_VERSION = 1


@dataclass
class WorkerSpec:
    target: str
    mode: str  # "mapped" | "heap"
    model_folder: str  # PreparedModel folder (cpu, ort-native) or compiled model folder (qnn)
    sessions: int = 1
    map_failures: int = 0
    max_attempts: int = 3
    ready_path: str = ""
    result_path: str = ""
    log_path: str = ""
    share_ep_contexts: bool = False
    qnn_onnx: str = ""  # compiled EPContext model (qnn)
    weights_bytes: int = 0  # bytes the sessions load: weights file, or the QNN context binary
    fault_action: str = ""  # test hook: "crash", "hang", "raise", "sigbus" (reliability suites)
    spec_version: int = SPEC_VERSION

    @property
    def disable_flag(self) -> str:
        return "1" if self.mode == "heap" else "0"

    def write(self, path: Path) -> None:
        write_json_atomic(path, asdict(self))

    @classmethod
    def read(cls, path: Path) -> WorkerSpec:
        data = json.loads(Path(path).read_text())
        if data.get("spec_version") != SPEC_VERSION:
            raise ValueError(f"{path}: spec_version {data.get('spec_version')} != {SPEC_VERSION}")
        return cls(**data)


@dataclass
class WorkerRecord:
    """What a worker measured about itself (the parent adds memory and exit status)."""

    pid: int = 0
    path_taken: str = ""
    map_attempts: int | None = None
    map_errors: list[str] = field(default_factory=list)
    ep_file_mapping: str = "n/a"
    ep_log_tail: str = ""
    load_s: float | None = None
    create_s: float | None = None
    first_run_s: float | None = None
    output_ok: bool = False
    output_detail: str = ""
    weights_bytes: int | None = None
    peak_bytes: int | None = None
    error: str = ""


def write_json_atomic(path: Path, data: dict) -> None:
    """Write then rename: a reader never sees half a record."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data))
    os.replace(tmp, path)
