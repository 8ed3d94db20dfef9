"""The SoC the simulated HTP compiles for when the user names none.

onnxruntime-qnn's Linux x86_64 wheel runs the HTP backend in a simulator. With no ``soc_model``
provider option the simulator sizes the graph for an unknown SoC, and many float graphs fail to
finalize with ``QNN_COMMON_ERROR_MEM_ALLOC`` (4 of 10 real models outside the suite did, all of
which compile with ``soc_model=60``). The devices this harness is for are Snapdragon X laptops,
whose SoC is ``QNN_SOC_MODEL_SC8380XP`` = 60 (Snapdragon X Elite, HTP v73) in QNN's SoC table, so
on the simulator the qnn target compiles for that SoC unless the user names one
(``--provider-option soc_model=N``; ``soc_model=0`` restores the EP's own default, unknown SoC).
On a device the EP detects its SoC itself and nothing is added.
"""

from __future__ import annotations

import platform
import sys
from typing import Any

#: QNN_SOC_MODEL_SC8380XP: the Snapdragon X Elite of the Windows-on-ARM laptops.
SIMULATOR_SOC_MODEL = "60"


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
