"""The SoC the simulated HTP compiles for when none is named: 60 (Snapdragon X Elite; else MEM_ALLOC often)."""

from __future__ import annotations

import platform
import sys
from typing import Any

SIMULATOR_SOC_MODEL = "60"  #: QNN_SOC_MODEL_SC8380XP: the Snapdragon X Elite of the Windows-on-ARM laptops.


def is_simulator() -> bool:
    """True where onnxruntime-qnn ships its HTP simulator: Linux x86_64."""
    return sys.platform.startswith("linux") and platform.machine().lower() in ("x86_64", "amd64")


def default_soc_model(opts: Any) -> tuple[dict[str, str], str] | None:
    """On the simulator, when the user named no SoC (nor an HTP architecture): the run's provider
    options with ``soc_model=60``, and the note that says so; None otherwise. The run's own
    options are left as they are (the runner applies the returned ones: `Prepared.provider_options`)."""
    options = opts.provider_options
    backend = opts.target_options.get("backend_type", "htp")
    if not is_simulator() or backend != "htp" or "soc_model" in options or "htp_arch" in options:
        return None
    return {**options, "soc_model": SIMULATOR_SOC_MODEL}, (
        f"The simulated HTP compiles for soc_model={SIMULATOR_SOC_MODEL} (SC8380XP, Snapdragon X Elite, "
        "HTP v73), the SoC of the laptops this harness is for, because no --provider-option soc_model "
        "was given; without a SoC the simulator fails many float graphs with MEM_ALLOC. "
        "--provider-option soc_model=0 keeps the EP's own default (unknown SoC)."
    )
