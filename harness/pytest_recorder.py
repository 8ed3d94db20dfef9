"""The session recorder of ``--fmw-report-dir``: run folders under ``DIR/runs/``, outcomes, ``DIR/report.html``."""

from __future__ import annotations

import json
import os
import re
import shutil
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

RUNS = "runs"
SESSION_DIR = ".harness-session"
REPORT = "report.html"


@dataclass
class SessionRecorder:
    """Keeps the session's run folders and the outcomes of the tests that produced them."""

    report_dir: Path
    token: str
    controller: bool
    outcomes: dict[str, list[tuple[str, str]]] = field(default_factory=lambda: defaultdict(list))

    @property
    def runs(self) -> Path:
        return self.report_dir / RUNS

    @property
    def index(self) -> Path:
        return self.report_dir / SESSION_DIR

    def start(self) -> None:
        """Controller, before any test: clean runs/ and index, removing only what an earlier session of ours left."""
        for folder in (self.runs, self.index):
            _check_ours(folder, self.report_dir)
        earlier = sum(1 for _ in self.runs.iterdir()) if self.runs.is_dir() else 0
        for folder in (self.runs, self.index):
            if folder.exists():
                shutil.rmtree(folder)
        if earlier:  # never lost without a word (issue 28): the session says what it replaced
            import sys

            print(
                f"qnn-fmw-harness: --fmw-report-dir {self.report_dir}: replaced the earlier session's "
                f"{earlier} run folder(s) in {RUNS}/",
                file=sys.stderr,
            )
        self.runs.mkdir(parents=True, exist_ok=True)
        self.index.mkdir(parents=True, exist_ok=True)

    def reserve(self, name: str) -> Path:
        """A new, empty folder runs/NAME (or NAME-2, NAME-3...: the first that did not exist)."""
        for k in range(1, 10_000):
            path = self.runs / (name if k == 1 else f"{name}-{k}")
            try:
                path.mkdir(parents=True)
                return path
            except FileExistsError:
                continue
        raise RuntimeError(f"{self.runs}: no free run folder name for {name}")

    def keep(self, owner: str, out: Path, fresh_out) -> Path | None:
        """Record that ``owner`` produced ``out`` (copied under runs/); None when nothing was measured."""
        results = out / "results.csv"
        try:
            measured = False
            if results.is_file():  # a header and one row are enough: never the whole file
                with open(results, "rb") as handle:
                    measured = handle.read(1 << 20).count(b"\n") > 1
        except (OSError, ValueError):
            measured = False
        if not measured:
            return None
        kept = out
        if self.runs.resolve() not in out.resolve().parents:
            kept = fresh_out(owner, out.parent)
            shutil.copytree(out, kept, ignore=_not_copied, dirs_exist_ok=True)
            _rename_run(kept)
        worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
        line = json.dumps({"nodeid": owner, "folder": str(kept)}) + "\n"
        from harness.core.files import open_append

        with open_append(self.index / f"{self.token}-{worker}.jsonl", "session index") as handle:
            handle.write(line)
        return kept

    def record_report(self, report: pytest.TestReport) -> None:
        """Controller: every phase of every test (xdist forwards the workers' reports)."""
        if self.controller:
            self.outcomes[report.nodeid].append((report.when, _outcome(report)))

    def recorded_runs(self) -> list[tuple[str, str]]:
        lines = []
        for path in sorted(self.index.glob(f"{self.token}-*.jsonl")):
            for text in path.read_text(encoding="utf-8").splitlines():
                try:
                    record = json.loads(text)
                    lines.append((str(record["nodeid"]), str(record["folder"])))
                except (ValueError, KeyError, TypeError):
                    continue  # a torn line of a worker that died mid-write
        return lines

    def outcome_of(self, nodeid: str) -> str:
        """A test's outcome; for a module or class id, the worst of its tests."""
        phases = self.outcomes.get(nodeid)
        if phases is not None:
            return _merge(phases)
        inside = [_merge(p) for n, p in self.outcomes.items() if n.startswith(nodeid + "::")]
        for worst in ("failed", "error", "xpassed", "passed", "xfailed", "skipped"):
            if worst in inside:
                return worst
        return "unknown"

    def test_records(self) -> tuple[list[Any], dict[str, int]]:
        from harness.publish import test_record

        records, seen, with_runs = [], set(), set()
        for nodeid, folder in self.recorded_runs():
            if (nodeid, folder) not in seen and (Path(folder) / "results.csv").is_file():
                seen.add((nodeid, folder))
                with_runs.add(nodeid)
                records.append(test_record(shown_id(nodeid), self.outcome_of(nodeid), folder))
        for nodeid, phases in self.outcomes.items():
            outcome = _merge(phases)
            if outcome in ("failed", "error") and nodeid not in with_runs:
                records.append(test_record(shown_id(nodeid), outcome, ""))
        counts = Counter(_merge(p) for p in self.outcomes.values())
        return records, dict(counts)

    def finish(self, session: pytest.Session) -> None:
        """Controller: one report over every run of the session, with the tests' outcomes."""
        if not self.controller:
            return
        from harness.core.errors import InputError
        from harness.publish import render_test_session

        records, counts = self.test_records()
        folders = list(dict.fromkeys(r.folder for r in records if r.folder))
        terminal = session.config.pluginmanager.get_plugin("terminalreporter")
        try:
            path = render_test_session(folders, self.report_dir / REPORT, records, counts)
            line = f"qnn-fmw-harness: {len(folders)} run(s), report: {path}"
        except (InputError, OSError) as err:  # the session's own outcome must survive a bad --fmw-report-dir
            line = f"qnn-fmw-harness: no report rendered: {err}"
        if terminal is not None:
            terminal.write_line(line)


def _check_ours(folder: Path, report_dir: Path) -> None:
    """UsageError unless ``folder`` is absent, or a folder holding only what this plugin writes
    there: run folders of this harness (or empty ones) in runs/, ``*.jsonl`` in the index."""
    from harness.core.runfiles import is_run_folder

    if not os.path.lexists(folder):
        return
    foreign: list[str] = []
    if folder.is_symlink() or not folder.is_dir():
        foreign = ["it is not a folder"]
    else:
        try:
            for entry in sorted(folder.iterdir()):
                if folder.name == SESSION_DIR:
                    ours = entry.suffix == ".jsonl" and entry.is_file() and not entry.is_symlink()
                else:
                    ours = (
                        entry.is_dir() and not entry.is_symlink() and (is_run_folder(entry) or not any(entry.iterdir()))
                    )
                if not ours:
                    foreign.append(entry.name)
        except OSError as err:
            foreign = [f"cannot list it: {err.strerror or err}"]
    if foreign:
        shown = ", ".join(foreign[:3]) + (", ..." if len(foreign) > 3 else "")
        raise pytest.UsageError(
            f"--fmw-report-dir {report_dir}: {folder.name}/ holds what this plugin did not write ({shown}); "
            "it empties that folder at the start of a session, so choose another --fmw-report-dir"
        )


def _not_copied(folder: str, names: list[str]) -> list[str]:
    """What a kept copy leaves out: ``workers/`` and anything not a regular file or folder (no link followed)."""
    import stat

    skipped = []
    for name in names:
        try:
            mode = os.lstat(os.path.join(folder, name)).st_mode
        except OSError:
            skipped.append(name)
            continue
        if name == "workers" or not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
            skipped.append(name)
    return skipped


def _rename_run(folder: Path) -> None:
    """A kept copy's run id becomes its folder name."""
    from harness.core.files import write_json_atomic

    for name, key in (("metadata.json", "run"), ("headline.json", None)):
        path = folder / name
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            (data.setdefault(key, {}) if key else data)["run_id"] = folder.name
            write_json_atomic(path, data)
        except (OSError, ValueError, AttributeError):
            pass  # a folder without readable metadata is reported under its folder name anyway


def shown_id(nodeid: str) -> str:
    """A test id without the ``@group`` suffix xdist's loadgroup adds."""
    return re.sub(r"@[\w.-]+$", "", nodeid)


def _outcome(report: pytest.TestReport) -> str:
    if hasattr(report, "wasxfail"):
        return "xfailed" if report.skipped else "xpassed"
    return report.outcome


def _merge(phases: list[tuple[str, str]]) -> str:
    """One outcome from a test's phases, as pytest counts them (failed setup/teardown: error)."""
    by_phase = dict(phases)
    if by_phase.get("call") == "failed":
        return "failed"
    if "failed" in (by_phase.get("setup"), by_phase.get("teardown")):
        return "error"
    for phase in ("call", "setup"):
        if by_phase.get(phase) in ("skipped", "xfailed", "xpassed"):
            return by_phase[phase]
    return by_phase.get("call", "passed" if by_phase else "unknown")
