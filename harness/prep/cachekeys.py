"""Cache keys of prepared models: the files' identities, the request, session settings, ORT's version and CPU."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from harness.core.errors import InputError
from harness.core.files import real_path

from .onnxfile import external_data_files
from .sessions import SessionSettings

PREP_VERSION = 2  #: Bumped when the preparation of user models changes what it writes (a new cache key).


def settings_tag(settings: SessionSettings) -> str:
    """Cache-name suffix for non-default session settings (the reference depends on them)."""
    if not settings.config and settings.intra_op_threads is None:
        return ""
    key = json.dumps({"c": settings.config, "t": settings.intra_op_threads}, sort_keys=True).encode()
    return "-" + hashlib.blake2b(key, digest_size=6).hexdigest()


def _file_identity(path: Path) -> str:
    """Where a file is, its size, mtime, inode and a hash of its first and last 64 KiB."""
    from mapper_impl._common import identity_of_path

    ident = identity_of_path(str(path), edge=64 * 1024)  # the keys' edges, whatever mapper_impl keeps
    edges = hashlib.blake2b(ident.edges, digest_size=16).hexdigest()  # the digest keys have always had
    return f"{real_path(path)}|{ident.device}|{ident.inode}|{ident.size}|{ident.mtime_ns}|{edges}"


def source_key(path: Path, model: Any, extra: object = None, files: list[Path] | None = None) -> str:
    """Cache key of a user model: the ONNX file and every external-data file it reads, plus ``extra``."""
    h = hashlib.blake2b(digest_size=12)
    for file in [path, *external_data_files(path, model), *(files or [])]:
        try:
            h.update(_file_identity(file).encode())
        except FileNotFoundError:
            raise InputError(
                f"--model {path}: external data file {file.name!r} is missing (expected next to the model)"
            ) from None
        except OSError as err:
            raise InputError(f"--model {path}: cannot read {file.name} ({err.strerror or err})") from None
    h.update(json.dumps(extra, sort_keys=True, default=str).encode())
    return h.hexdigest()


def machine_key() -> dict[str, str]:
    """What an offline-optimized model also depends on: ORT's version and this CPU."""
    import platform

    import onnxruntime as ort

    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith(("model name", "flags")):
                    cpu += "|" + line.split(":", 1)[1].strip()
                if line.startswith("flags"):
                    break
    except OSError:
        pass
    return {"onnxruntime": ort.__version__, "cpu": hashlib.blake2b(cpu.encode(), digest_size=8).hexdigest()}
