"""Which run folders the nightly fleet merge takes: tonight's sweep of each device kind, once.

The fleet job downloads every ``nightly-device-*`` artifact of the workflow run into
``devices/<artifact>/``, or straight into ``devices/`` when the pattern matches one artifact only
(download-artifact v5+: a one-kind fleet, or a night only one kind ran).
Each artifact holds ``nightly/<kind>-run-<run>-<attempt>/`` (tonight's
sweep), but also ``history/last-run/`` (last night's tables, kept as tonight's baseline) and
``reports-out/`` (the pytest run folders). Taking every folder with a ``results.csv`` read one
device as two runs, and a device whose sweep did not finish contributed last night's run as
tonight's. A re-run of failed jobs adds a second attempt's artifact beside the first, which
merged that kind twice. So:

- only ``nightly/<kind>-run-<run>-<attempt>`` folders of THIS workflow run count;
- per kind, the newest attempt whose sweep wrote ``results.csv`` is merged (an older attempt only
  when the newer one did not finish, and the summary says so);
- a kind with no finished sweep tonight is named, never replaced by an older night.

Standard library only: it runs before the project is installed. Usage (the fleet step)::

    python .ci/fleet_runs.py devices --run-number N --list fleet/runs.txt

writes one folder per line to ``--list``, prints GitHub ``::warning::`` lines for kinds not
merged, appends a Markdown summary to ``$GITHUB_STEP_SUMMARY`` when it is set, and exits 1 when
no kind can be merged (nothing to report), 2 on a usage error.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path

#: ``<kind>-run-<run number>-<attempt>``, as the device job names ``RUN_DIR``.
_RUN_DIR = re.compile(r"^(?P<kind>[A-Za-z0-9][A-Za-z0-9_.-]*)-run-(?P<run>\d+)-(?P<attempt>\d+)$")


@dataclass(frozen=True)
class Sweep:
    kind: str
    attempt: int
    path: Path

    @property
    def finished(self) -> bool:
        return (self.path / "results.csv").is_file()


def tonights_sweeps(devices: Path, run_number: int) -> list[Sweep]:
    """Every ``[<artifact>/]nightly/<kind>-run-<run_number>-<attempt>`` folder under ``devices``
    (symlinks are not followed: an artifact is data, not a place to be sent elsewhere)."""
    found = []
    for artifact in [devices, *sorted(devices.iterdir())]:
        nightly = artifact / "nightly"
        if artifact.is_symlink() or nightly.is_symlink() or not nightly.is_dir():
            continue
        for folder in sorted(nightly.iterdir()):
            match = _RUN_DIR.match(folder.name)
            if folder.is_symlink() or not folder.is_dir() or not match or int(match["run"]) != run_number:
                continue
            found.append(Sweep(match["kind"], int(match["attempt"]), folder))
    return found


def choose(sweeps: list[Sweep]) -> tuple[list[Sweep], list[str]]:
    """One sweep per kind (the newest finished attempt) and a line for each kind's story."""
    chosen, lines = [], []
    for kind in sorted({s.kind for s in sweeps}):
        attempts = sorted((s for s in sweeps if s.kind == kind), key=lambda s: s.attempt, reverse=True)
        newest = attempts[0]
        finished = [s for s in attempts if s.finished]
        if not finished:
            tried = ", ".join(str(s.attempt) for s in attempts)
            lines.append(f"::warning::{kind}: not merged: no sweep finished tonight (attempts {tried}, no results.csv)")
            continue
        pick = finished[0]
        chosen.append(pick)
        if pick is not newest:
            lines.append(
                f"::warning::{kind}: attempt {newest.attempt} did not finish (no results.csv); "
                f"merged attempt {pick.attempt}"
            )
    return chosen, lines


def _summary(chosen: list[Sweep], lines: list[str]) -> str:
    rows = [f"- {s.kind}: attempt {s.attempt}, `{s.path.as_posix()}`" for s in chosen]
    notes = [f"- {ln.removeprefix('::warning::')}" for ln in lines]
    return "\n".join(["### Fleet nightly", f"Run folders merged ({len(chosen)}):", *rows, *notes, ""])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("devices", type=Path, help="the folder the device artifacts were downloaded into")
    parser.add_argument("--run-number", type=int, required=True, help="github.run_number of this workflow run")
    parser.add_argument("--list", type=Path, required=True, help="write the chosen run folders here, one per line")
    args = parser.parse_args(argv)
    if not args.devices.is_dir():
        print(f"::error::{args.devices}: no device artifacts were downloaded", file=sys.stderr)
        return 1
    chosen, lines = choose(tonights_sweeps(args.devices, args.run_number))
    for line in lines:
        print(line)
    args.list.parent.mkdir(parents=True, exist_ok=True)
    args.list.write_text("".join(f"{s.path.as_posix()}\n" for s in chosen), encoding="utf-8")
    summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if summary:
        with open(summary, "a", encoding="utf-8") as handle:
            handle.write(_summary(chosen, lines))
    if not chosen:
        print(f"::error::no device finished a sweep in run {args.run_number}: nothing to merge")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
