"""The multi-partition reproducer: ``python -m harness.targets.qnn.partitions_repro`` loads it both ways."""

from __future__ import annotations

import sys
from pathlib import Path

from .partitions import MULTI_PARTITION_LEVEL, UPSTREAM_ERRORS, apply_load_level, make_shape_between_model


def _load_and_run(ctx: str, level: str) -> None:
    """Child of `main`: load the compiled reproducer at ``level`` and print S (may abort)."""
    import numpy as np
    import onnxruntime as ort

    from .ep import qnn_session_options

    so = qnn_session_options(disable_file_mapped_weights="1", log_severity=1)
    so.log_severity_level = 3
    if level != "default":
        so = apply_load_level(so, 2)
    session = ort.InferenceSession(ctx, so)
    out = session.run(None, {"X": np.zeros((1, 4, 8, 8), np.float32)})[1]
    print(f"loads and runs: S = {out.tolist()}")


def reproduce(folder: Path) -> dict[str, tuple[int, str]]:
    """Build, compile and load the reproducer both ways in a child: {level: (exit code, last output line)}."""
    import subprocess

    from harness.contract.spawn import python_child

    from .compile import compile_epcontext

    src = make_shape_between_model(Path(folder) / "shape_between.onnx")
    compiled = compile_epcontext(src, Path(folder) / "qnn")
    out = {}
    for level in ("default", MULTI_PARTITION_LEVEL):
        argv, env = python_child("harness.targets.qnn.partitions_repro", "--load", str(compiled.onnx_path), level)
        proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=600, stdin=subprocess.DEVNULL)
        lines = [line for line in (proc.stdout + proc.stderr).splitlines() if line.strip()]
        last = next((line for line in reversed(lines) if any(e in line for e in UPSTREAM_ERRORS)), "")
        out[level] = (proc.returncode, last or (lines[-1] if lines else ""))
    return out


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--load"]:
        _load_and_run(argv[1], argv[2])
        return 0
    import tempfile

    with tempfile.TemporaryDirectory(prefix="qnn-partitions-") as tmp:
        for level, (code, line) in reproduce(Path(argv[0]) if argv else Path(tmp)).items():
            print(f"{level}: exit {code}: {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
