"""TEST INPUTS for the reports suites: synthetic run folders built from a known linear law.

Nothing here is a measurement. Rows are constructed so every figure follows
memory = fixed + per_session*S + weights_term exactly (heap: W per session, mapped: W once),
which lets the suites check the fit recovers the law and the report shows what it should.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path

from harness.core.schema import FORMAT_VERSION, ResultRow
from harness.targets import version_labels

MIB = 1024**2
GIB = 1024**3
UNAVAILABLE_LOG = (
    "File mapped weights feature is only available on Windows arm64 devices for QNN API "
    "versions >= 2.32. Feature will be disabled by default"
)


@dataclass(frozen=True)
class Law:
    """Summed PSS(S) = fixed + per_session*S + (W if mapped else W*S), S = N processes."""

    fixed: int = 32 * MIB
    per_session: int = 72 * MIB
    weights: int = 256 * MIB

    def summed_pss(self, mode: str, sessions: int) -> int:
        weights = self.weights if mode == "mapped" else self.weights * sessions
        return self.fixed + self.per_session * sessions + weights


def fake_results(
    *,
    law: Law = Law(),
    target: str = "cpu",
    processes: Iterable[int] = (1, 2, 4),
    modes: Iterable[str] = ("mapped", "heap"),
    repeats: int = 1,
    ep_file_mapping: str = "n/a",
    pss: bool = True,
) -> list[ResultRow]:
    """Clean worker rows whose figures follow ``law`` exactly (one session per process)."""
    rows = []
    worker_id = 0
    for repeat in range(repeats):
        for n in processes:
            for mode in modes:
                shared = ep_file_mapping == "unavailable"  # both modes on the heap path
                effective = "heap" if shared else mode
                for w in range(n):
                    mapped = effective == "mapped"
                    pss_each = law.summed_pss(effective, n) // n
                    uss = law.per_session + (law.weights if (not mapped or n == 1) else 0)
                    init = (0.004 if mapped else 0.090) + 0.001 * w
                    rows.append(
                        ResultRow(
                            target=target,
                            mode=mode,
                            disable_file_mapped_weights="0" if mode == "mapped" else "1",
                            processes=n,
                            sessions_per_process=1,
                            repeat=repeat,
                            worker=w,
                            pid=10_000 + worker_id,
                            path_taken=effective,
                            map_attempts=1,
                            ep_file_mapping=ep_file_mapping,
                            init_s=init,
                            load_s=init * 0.4,
                            create_s=init * 0.6,
                            first_run_s=0.002,
                            rss_bytes=law.fixed + law.per_session + law.weights,
                            uss_bytes=uss,
                            pss_bytes=pss_each if pss else None,
                            private_bytes=uss,
                            peak_bytes=law.fixed + law.per_session + law.weights + MIB,
                            weights_bytes=law.weights,
                            output_ok=True,
                            error=None,
                            memory_note=None if pss else "PSS: not available on Windows",
                            exit_code=0,
                            map_errors=None,
                            ep_log_tail=UNAVAILABLE_LOG if shared else None,
                            memory_ok=True,
                        )
                    )
                    worker_id += 1
    return rows


def fail_worker(rows: list[ResultRow], index: int = -1, error: str = "RuntimeError: boom") -> list[ResultRow]:
    """Turn one row into a crashed worker (a test input for highlighting and gates)."""
    rows = list(rows)
    rows[index] = replace(
        rows[index],
        output_ok=False,
        error=error,
        exit_code=1,
        uss_bytes=None,
        pss_bytes=None,
        rss_bytes=None,
        memory_ok=False,
    )
    return rows


def metadata(target: str = "cpu", status: str = "complete", **run: object) -> dict:
    """metadata.json as the runner writes it for ``target`` (its options, default gates and
    notes come from the target itself, as in a real run)."""
    from harness.contract.options import RunOptions
    from harness.targets import get_target

    opts = RunOptions(target=target)
    tgt = get_target(target)
    base = {
        "target": target,
        "target_options": tgt.options_for(opts),
        "peer": None,
        "model": "generated:mlp:256MiB",
        "weights_bytes": 256 * MIB,
        "processes": [1, 2, 4],
        "sessions_per_process": 1,
        "modes": ["mapped", "heap"],
        "repeat": 1,
        "labels": {},
        "started": "2026-11-29T18:00:00+00:00",
        "finished": "2026-11-29T18:01:00+00:00",
        "duration_s": 60.0,
        "command": "python -m harness run --model-size 256MiB",
    }
    base.update(run)
    return {
        "format_version": FORMAT_VERSION,
        "status": status,
        "gates": [],
        "default_gates": [{"expr": e, "why": w} for e, w in tgt.default_gates(opts)],
        "target_notes": tgt.notes(opts),
        "run": base,
        "env": {
            "os": "Linux-6.1",
            "system": "Linux",
            "arch": "x86_64",
            "cpu": "test cpu",
            "cpu_count": 2,
            "ram_bytes": 24 * GIB,
            "python": "3.11",
            "onnxruntime": "1.32.0",
            "onnxruntime_qnn": "2.7.0",
            "qnn_sdk": "2.51",
            "hostname": "testhost",
            "git_commit": "0123456789abcdef",
            "version_labels": version_labels(),  # what the runner records (Target.version_keys)
        },
    }


def write_run(folder: Path, rows: list[ResultRow], meta: dict | None = None, law: Law = Law()) -> Path:
    """Write a run folder from ``rows`` with the runner's own writer (`sweep.write_outputs`:
    results.csv, summary.csv, results_long.csv, then metadata.json)."""
    from harness.runner.sweep import write_outputs

    folder.mkdir(parents=True, exist_ok=True)
    deltas = {}
    for row in rows:
        key = (row.target, row.mode, row.processes, row.sessions_per_process, row.repeat)
        mode = "heap" if row.ep_file_mapping == "unavailable" else row.mode
        deltas[key] = (law.summed_pss(mode, row.processes) - law.fixed, MIB)  # (drop, idle noise)
    target = rows[0].target if rows else "cpu"
    if meta is None and rows:  # what the rows measured: the report refuses rows the metadata does not plan
        meta = metadata(
            target,
            processes=sorted({r.processes for r in rows}),
            repeat=max(r.repeat for r in rows) + 1,
            modes=sorted({r.mode for r in rows}),
        )
    write_outputs(folder, rows, deltas, copy.deepcopy(meta or metadata(target)))
    return folder
