"""The child of `harness.prep.ortjob`: ``python -m harness.prep.ortchild JOB.json`` runs one job
(``optimize`` or ``reference``) and writes its result JSON. Nothing imports this module: it is
only ever run as a program, so the jobs' modules may import `harness.prep.ortjob` freely."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from harness.core.errors import InputError
from harness.prep.ortjob import SLOW_ENV, status


def _run(job: dict) -> dict:
    if job["kind"] == "optimize":
        from harness.prep.optimize import optimize_in_process

        return optimize_in_process(job)
    if job["kind"] == "reference":
        from harness.prep.reference import reference_in_process

        return reference_in_process(job)
    if job["kind"] == "generate":
        from harness.prep.decoder import generate_in_process

        return generate_in_process(job)
    raise ValueError(f"unknown job kind {job['kind']!r}")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    job = json.loads(Path(argv[0]).read_text(encoding="utf-8"))
    from harness.contract.spawn import set_parent_death_signal

    set_parent_death_signal()  # never outlives the harness that asked for it
    if os.environ.get(SLOW_ENV):
        status(job, "waiting (test hook)")
        time.sleep(float(os.environ[SLOW_ENV]))
    try:
        result = {"ok": True, **_run(job)}
    except InputError as err:
        result = {"ok": False, "error": str(err)}
    except MemoryError:
        result = {
            "ok": False,
            "error": f"{job.get('label', 'the model')}: out of memory in ONNX Runtime (the model "
            "or its input shapes, --shape / --input, need more memory than there is)",
        }
    except Exception as err:  # anything else: one line for the parent, the whole trace in the log
        import traceback

        traceback.print_exc()
        text = str(err).strip().splitlines()
        result = {
            "ok": False,
            "error": f"{job.get('label', 'the model')}: {type(err).__name__}: {text[0] if text else ''}",
        }
    Path(job["result"]).write_text(json.dumps(result), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
