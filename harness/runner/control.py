"""The control worker: a group's sessions over weights that cost no memory, so ``copied_bytes`` is attributable."""

from __future__ import annotations

import mmap
import os
import time
from typing import Any

from harness.targets import get_target
from harness.targets.base import LiveSessions, Target


def has_control(target: Target) -> bool:
    """True when ``target``'s models list their external tensors, so a weightless twin exists."""
    return bool(target.has_control)


def _zero_pages(model: Any) -> mmap.mmap:
    """Weights-sized memory that costs none: an anonymous read-only mapping (POSIX), a file view (Windows)."""
    size = max(model.weights_extent(), 1)
    if os.name == "nt":
        with open(model.weights_path, "rb") as f:
            return mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    return mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS, prot=mmap.PROT_READ)


class ControlTarget(Target):
    """A stand-in for a group's own target in the control worker (never chosen by a user)."""

    name = "control"
    summary = "the weightless twin of a group's workers"

    def prepare(self, opts, progress):  # pragma: no cover - the control never prepares a model
        raise NotImplementedError("the control worker loads the group's prepared models")

    def create_sessions(self, spec, models, record) -> LiveSessions:
        """One session per model per session group, as the workers create, over zero pages."""
        import onnxruntime as ort

        import mapper_impl  # noqa: F401 - the workers' runtime includes it
        from harness.prep.sessions import cpu_session_options
        from harness.prep.tensors import ortvalue_over

        settings = spec.session_settings()
        live = LiveSessions()
        record.load_s = record.create_s = 0.0
        for _ in range(spec.sessions):
            group = []
            for model in models:
                pages = _zero_pages(model)
                live.closers.append(_closer(pages))
                t0 = time.perf_counter()
                so = cpu_session_options(settings, level=model.session_level)
                for t in model.tensors:
                    value = ortvalue_over(pages, t.onnx_type, t.shape, t.offset)
                    live.keepalive.append(value)
                    so.add_initializer(t.name, value)
                group.append(ort.InferenceSession(str(model.onnx_path), so, providers=["CPUExecutionProvider"]))
                record.create_s += time.perf_counter() - t0
            live.add_group(group)
        get_target(spec.target).weightless_work(spec, models)
        record.path_taken = ""
        record.weights_bytes = 0
        return live

    def check_output(self, outputs, reference, model) -> tuple[bool, str]:
        """Not compared: zero weights give other values; the control only has to run."""
        return True, ""


def _closer(pages: mmap.mmap):
    """Unmap at teardown; a view ORT still holds keeps the pages until the process exits."""

    def close() -> None:
        try:
            pages.close()
        except BufferError:
            pass

    return close
