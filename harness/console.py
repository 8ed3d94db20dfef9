"""What the command line prints on stdout, all from one `Judgement`. Text from data (errors,
paths, run ids, gates) is printed plain, never as rich markup: "[run-1]" must not vanish."""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

from harness.core.metrics import FIGURES
from harness.core.passes import SEQUENTIAL, memory_view, start_of
from harness.core.schema import ResultRow, SummaryRow
from harness.core.summary import complete_pair, pair_ratio, paired, timing_pairs
from harness.core.units import fmt_bytes, fmt_ratio, fmt_seconds, fmt_value
from harness.core.vocab import EpState, PathTaken

#: The figures of the table (`metrics.Figure.terminal`).
TABLE_FIGURES = [f for f in FIGURES if f.terminal]


#: Width of tables when the output is not a terminal (CI logs, pipes): rich's default of 80
#: columns would cut column titles and values ("fallba…") where nobody can widen the window.
LOG_WIDTH = 160


def make_console(*, stderr: bool = False) -> Any:
    """A rich Console that never interprets markup or highlights numbers in data."""
    from rich.console import Console

    console = Console(stderr=stderr, highlight=False, soft_wrap=True, markup=False, emoji=False)
    if not console.is_terminal:
        console.width = LOG_WIDTH
    return console


def summary_table(summary: list[SummaryRow]) -> Any:
    """A rich Table: one block of metric lines per (target, N, M, repeat)."""
    from rich.table import Table

    table = Table(title="file-mapped weights: mapped vs heap", show_lines=False)
    for name in ("target", "N x M", "rep", "metric", "mapped", "heap", "mapped/heap"):
        table.add_column(name, justify="left" if name in ("target", "metric") else "right")
    pairs = paired(summary)
    windows = not any(s.sum_pss_bytes is not None for s in summary)
    for mapped, heap in pairs:
        first, who = True, _who(mapped)
        shown_figures = [
            f for f in TABLE_FIGURES if (getattr(mapped, f.column), getattr(heap, f.column)) != (None, None)
        ]
        if windows:  # Windows has no PSS: private bytes, its saving figure, lead
            shown_figures.sort(key=lambda f: f.column != "sum_private_bytes")
        for figure in shown_figures:  # a figure neither mode measured (TTFT of an infer run) is left out
            column = figure.column
            m, h = getattr(mapped, column), getattr(heap, column)
            shown = pair_ratio(mapped, heap, column)
            why = "incomplete" if not complete_pair(mapped, heap) else "noise" if column == "system_delta_bytes" else ""
            table.add_row(
                who if first else "",
                f"{mapped.processes} x {mapped.sessions_per_process}" if first else "",
                str(mapped.repeat) if first else "",
                figure.terminal,
                fmt_value(m, figure.unit),
                fmt_value(h, figure.unit),
                fmt_ratio(shown) if shown is not None or not why else why,
                end_section=figure is shown_figures[-1],
            )
            first = False
    in_pairs = {id(s) for pair in pairs for s in pair}
    for s in (s for s in summary if id(s) not in in_pairs):
        table.add_row(
            _who(s),
            f"{s.processes} x {s.sessions_per_process}",
            str(s.repeat),
            f"{s.mode} only: sum PSS / init",
            fmt_bytes(s.sum_pss_bytes),
            fmt_seconds(s.init_s_median),
            "-",
        )
        if s.ttft_s_median is not None:  # a generate peer: its TTFT and tokens/s beside the harness's
            rate = s.decode_tokens_per_s_median
            tps = f"{rate:.1f}/s" if rate is not None else "-"
            table.add_row("", "", "", f"{s.mode} only: TTFT / tokens/s", fmt_seconds(s.ttft_s_median), tps, "-")
    return table


def _who(row: SummaryRow) -> str:
    """The target, and for the timing pass which pass it is (memory is not sampled there)."""
    return f"{row.target} (timing pass)" if start_of(row) == SEQUENTIAL else row.target


def outcome_table(rows: list[ResultRow]) -> Any | None:
    """With faults or retries: how each repeat ended, to show that recovery is deterministic."""
    from rich.table import Table

    interesting = [
        r
        for r in rows
        if (
            r.path_taken == PathTaken.FALLBACK
            or (r.map_attempts or 0) > 1
            or r.ep_file_mapping in (EpState.RETRIED, EpState.COPIED)
            or r.error
            or r.stale_registrations
            or r.late_releases
        )
    ]
    if not interesting:
        return None
    table = Table(title="outcomes per repeat and stage (recovery must be deterministic)")
    for name in (
        "repeat",
        "mode",
        "N",
        "path_taken",
        "fallback_stage",
        "map_attempts",
        "ep_file_mapping",
        "stale",
        "late",
        "workers",
        "errors",
    ):
        table.add_column(name)
    counts = Counter(
        (
            r.repeat,
            r.mode,
            r.processes,
            r.path_taken,
            r.fallback_stage or "",
            r.map_attempts,
            r.ep_file_mapping,
            _count(r.stale_registrations),
            _count(r.late_releases),
            bool(r.error),
        )
        for r in rows
    )
    for (rep, mode, n, path, stage, attempts, ep, stale, late, err), count in sorted(counts.items(), key=str):
        cells = (str(rep), mode, str(n), path or "-", stage, str(attempts), str(ep), stale, late, str(count))
        table.add_row(*cells, "yes" if err else "")
    return table


def _count(value: int | None) -> str:
    """A count cell: empty when not counted, the number otherwise (0 included)."""
    return "" if value is None else str(value)


def startup_lines(run: Any) -> list[str]:
    """After the memory table: how many sessions fit this machine at the start-up peak
    (`harness.core.fits`; a capacity run's measured figure beside it), then the latency table
    at the headline's N x M (`--runs`)."""
    from harness.core.capacity import measured_for
    from harness.core.fits import fits, fits_sentence
    from harness.core.latency import latency_lines
    from harness.core.summary import headline_pairs

    own = [s for s in run.summary if s.target == run.target]
    complete = [p for p in headline_pairs(memory_view(own)) if complete_pair(*p)]
    found = fits(*complete[0]) if complete else {}
    sentence = fits_sentence(found) if complete else None
    lines = [f"fits (start-up peak, all workers at once): {sentence}"] if sentence else []
    measured = measured_for(run, found)
    if measured is not None:
        lines.append(f"fits, {measured[0]}")
    return lines + latency_lines(timing_pairs(own), fmt_seconds)


def note_lines(judgement: Any) -> list[str]:
    """Errors and warnings with their text and first details, the rest with a sentence (the report
    has their text)."""
    from harness.core.notes import RSS_NOTE

    lines = []
    for note in judgement.notes:
        if note == RSS_NOTE:
            continue  # always true, explained in the report
        full = note.kind in ("error", "warn") or note.terminal
        text = note.text if full else re.split(r"(?<=\.)\s+(?=[A-Z])", note.text)[0]  # its first sentence
        lines.append(f"note: {note.title}: {text}".replace("\n", "\n    ").removesuffix(": "))
        if note.kind in ("error", "warn"):  # a warning's text may end "for these reasons:"
            lines += ["    " + str(detail).replace("\n", "\n    ") for detail in note.details[:3]]  # EP lines
    return lines


def spread_lines(judgement: Any) -> list[str]:
    """One line per timing ratio at the headline's N: its median and spread over repeats (the
    table above shows each repeat; a timing figure is never given as a bare median)."""
    from harness.core.headline import contention
    from harness.core.timing import spread_text, timing_rounds, timing_spread

    run = judgement.run
    busy = (
        "; indicative: timed on a contended machine" if contention(run.summary, run.target)["contended_groups"] else ""
    )
    return [
        f"{name} {fmt_ratio(judgement.values.get(name))} (median): {spread_text(entry)}{busy}"
        for name, entry in timing_spread(run.summary, timing_rounds(run)).items()
    ]


def print_judgement(console: Any, judgement: Any, *, outcomes: bool = False) -> None:
    """The run's platform (Windows only), summary table, outcomes, notes, gates and verdict."""
    from harness.core.runmeta import platform_line

    if line := platform_line(judgement.run.env):
        console.print(line)
    console.print(summary_table(judgement.run.summary))
    for line in [*startup_lines(judgement.run), *spread_lines(judgement)]:  # memory first, then timings
        console.print(line)
    table = outcome_table(judgement.run.results) if outcomes else None
    if table is not None:
        console.print(table)
    for line in note_lines(judgement):
        console.print(line)
    from harness.core.headline import headline_sentence
    from harness.core.verdict import gates_summary_line

    for line in [*judgement.gate_lines(), gates_summary_line([judgement])]:
        console.print(line)
    console.print(headline_sentence(judgement))
    console.print(judgement.verdict_line())
