"""One run folder, loaded and checked: metadata, result rows, summary rows, headline.

The report, the gates and the history all start from a `RunData`, so the input checks (folder
exists, results.csv exists, format_version is one we understand) live here, once, and raise
`InputError` with a one-line message the command line prints as is.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from .errors import InputError
from .files import read_json
from .schema import FORMAT_VERSION, MODES, ResultRow, SummaryRow
from .summary import headline, primary_target, summarize, with_completeness
from .tables import RESULTS_CSV, SUMMARY_CSV, read_rows

METADATA_JSON = "metadata.json"


@dataclass
class RunData:
    """Everything one run folder holds, plus what is derived from it."""

    folder: Path
    meta: dict[str, Any]
    results: list[ResultRow]
    summary: list[SummaryRow]
    #: Problems found while loading that do not stop the report (shown as notes).
    load_notes: list[str] = field(default_factory=list)

    @property
    def run(self) -> dict[str, Any]:
        return self.meta.get("run") or {}

    @property
    def env(self) -> dict[str, Any]:
        return self.meta.get("env") or {}

    @property
    def target_notes(self) -> list[str]:
        """How the run's target measures, in its own words (recorded by the runner)."""
        return [str(t) for t in self.meta.get("target_notes") or []]

    @property
    def target_options(self) -> dict[str, Any]:
        return dict(self.run.get("target_options") or {})

    @property
    def status(self) -> str:
        """ "complete", "running" or "interrupted" as metadata.json says; "unknown" without it."""
        return str(self.meta.get("status") or "unknown")

    @property
    def run_id(self) -> str:
        return str(self.run.get("run_id") or self.folder.name)

    @property
    def target(self) -> str:
        return str(self.run.get("target") or primary_target(self.summary) or "?")

    @property
    def weights_bytes(self) -> int | None:
        value = self.run.get("weights_bytes")
        if value is None:
            value = max((r.weights_bytes or 0 for r in self.results), default=0) or None
        return value

    @property
    def modes(self) -> list[str]:
        seen = {r.mode for r in self.results if r.mode}
        return sorted(seen, key=lambda m: (MODES.index(m) if m in MODES else len(MODES), m))

    @property
    def process_counts(self) -> list[int]:
        return sorted({r.processes for r in self.results if r.processes is not None})

    @cached_property
    def headline(self) -> dict[str, float | int | None]:
        return headline(self.summary)


def _read_metadata(folder: Path, notes: list[str]) -> dict[str, Any]:
    path = folder / METADATA_JSON
    if not path.is_file():
        notes.append(f"{METADATA_JSON} is missing: the header lacks the run's settings.")
        return {}
    try:
        meta = read_json(path)
    except (OSError, ValueError) as exc:
        raise InputError(f"{path}: not readable JSON ({exc})") from None
    if not isinstance(meta, dict):
        raise InputError(f"{path}: expected a JSON object")
    version = meta.get("format_version")
    if version != FORMAT_VERSION:
        raise InputError(
            f"{path}: format_version {version!r} is not {FORMAT_VERSION}; this report understands only that version"
        )
    return meta


def load_run(folder: Path | str) -> RunData:
    """Load and check one run folder; `InputError` (one line) for what stops a report."""
    folder = Path(folder)
    if not folder.is_dir():
        raise InputError(f"{folder}: no such run folder")
    results_path = folder / RESULTS_CSV
    if not results_path.is_file():
        raise InputError(f"{folder}: no {RESULTS_CSV} (is this a run folder?)")
    notes: list[str] = []
    meta = _read_metadata(folder, notes)
    try:
        results = read_rows(results_path, ResultRow)
        summary_path = folder / SUMMARY_CSV
        if summary_path.is_file():
            summary = with_completeness(read_rows(summary_path, SummaryRow), results)
        else:
            notes.append(
                f"{SUMMARY_CSV} is missing: summarised again from {RESULTS_CSV} (the system memory delta is not in it)."
            )
            summary = summarize(results)
    except OSError as exc:
        raise InputError(f"{folder}: cannot read ({exc})") from None
    if not results:
        notes.append(f"{RESULTS_CSV} has no rows: no worker reported anything.")
    return RunData(folder=folder, meta=meta, results=results, summary=summary, load_notes=notes)
