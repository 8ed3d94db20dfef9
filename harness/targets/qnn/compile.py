"""Preparing the qnn target's model: a generated QDQ uint8 chain (or the user's model),
compiled once to an EPContext model + ``*_qnn.bin`` and cached by content.

The folder also holds ``reference.npz``: the un-compiled model's output on ORT's CPU EP for a
fixed input, which every worker compares with the QNN EP's output.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path

from harness.core.errors import InputError
from harness.models import PreparedModel, _cached, default_cache_dir, prepare_user_model


def _generated_qdq(size: int, cache_dir: Path) -> PreparedModel:
    def build(tmp: Path) -> PreparedModel:
        import numpy as np

        from harness.targets.qnn.ep import make_feeds, make_qdq_model, reference_output

        info = make_qdq_model(tmp / "model.onnx", size)
        feeds = make_feeds(info)
        reference = reference_output(tmp / "model.onnx", feeds)
        np.savez(tmp / "reference.npz", **{f"in:{k}": v for k, v in feeds.items()},
                 **{f"out:{info['output_name']}": reference})
        source = f"generated:qdq-matmul-chain:{info['layers']}x{info['dim']}x{info['dim']}xuint8"
        return PreparedModel(tmp, source, [], {info["input_name"]: info["input_shape"]},
                             {info["input_name"]: "float32"}, [info["output_name"]], info["weights_bytes"],
                             extra={"quant_step": info["output_scale"]})

    return _cached(cache_dir / f"qdq-chain-{size}-s0", build)


def _flush_c_stdio() -> None:
    if os.name != "posix":
        return
    import ctypes

    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None).fflush(None)


@contextlib.contextmanager
def native_stdout_to_stderr() -> Iterator[None]:
    """The QNN libraries print banner lines to fd 1 when they load; stdout carries the
    summary table, so send those lines to stderr (the progress stream) instead."""
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        os.dup2(2, 1)
        yield
    finally:
        sys.stdout.flush()
        _flush_c_stdio()  # the libraries write through C stdio: flush while fd 1 is redirected
        os.dup2(saved, 1)
        os.close(saved)


def prepare_qnn_model(opts) -> tuple[PreparedModel, str, int]:
    """(source model folder, compiled EPContext onnx path, context bytes). Every problem the
    user can fix (platform, missing package, dynamic shapes, nothing for QNN) is an InputError."""
    from harness.targets.qnn.ep import (
        QnnInputError,
        QnnUnavailableError,
        compile_epcontext,
        qnn_platform_supported,
        register_qnn_ep,
    )

    supported, why = qnn_platform_supported()
    if not supported:
        raise InputError(f"--target qnn: {why}")
    try:
        with native_stdout_to_stderr():
            register_qnn_ep()
    except QnnUnavailableError as err:
        raise InputError(f"--target qnn: {err}") from None
    cache_dir = opts.cache_dir or default_cache_dir()
    if opts.model is not None:
        model = prepare_user_model(opts.model, opts.shapes, cache_dir=cache_dir)
    else:
        model = _generated_qdq(opts.model_size, cache_dir)
    try:
        compiled = compile_epcontext(model.onnx_path, model.folder / f"qnn-em{opts.embed_mode}",
                                     embed_mode=opts.embed_mode)
    except QnnInputError as err:
        raise InputError(f"--target qnn: {err}") from None
    return model, str(compiled.onnx_path), int(compiled.context_bytes)
