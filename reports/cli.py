"""``python -m harness report RUN_DIR [RUN_DIR ...]``: write report.html and judge the gates.

Exit codes are the contract CI scripts rely on: 0 every gate passed (or was skipped), 1 a gate
failed, 2 a usage or input error (missing folder, missing results.csv, bad gate expression,
unknown format_version) reported as ONE line on stderr, never a traceback.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from harness.core.errors import InputError, OneLineArgumentParser
from harness.core.gates import known_metrics, read_gates_file
from reports.html import REPORT_HTML, ReportOutcome, render_report, render_run_report

__all__ = ["build_parser", "render_run_report", "report_main"]


def build_parser(prog: str = "python -m harness report") -> argparse.ArgumentParser:
    parser = OneLineArgumentParser(
        prog=prog,
        description="Render one self-contained report.html from run folders and check gates.",
        epilog=f"Gate metrics: {', '.join(known_metrics())}. Exit codes: 0 all gates pass, "
               "1 a gate fails, 2 usage or input error.",
    )
    parser.add_argument("run_dirs", nargs="+", type=Path, metavar="RUN_DIR",
                        help="run folder(s) written by `python -m harness run`")
    parser.add_argument("--out", type=Path, help="report file (default: RUN_DIR/report.html for "
                        "one run, ./report.html for several)")
    parser.add_argument("--history", type=Path, metavar="FILE",
                        help="CSV to append this run's summary and headline to; adds a trend chart")
    parser.add_argument("--gate", action="append", default=[], metavar="EXPR",
                        help="gate such as 'mapped_pss_ratio<=0.35' (repeatable)")
    parser.add_argument("--gates-file", type=Path, metavar="FILE",
                        help="file with one gate expression per line, '#' comments")
    parser.add_argument("--no-default-gates", action="store_true",
                        help="check only the gates given here, not the target's defaults")
    return parser


def _print_outcome(outcome: ReportOutcome) -> None:
    print(f"report: {outcome.path}")
    if outcome.history_appended:
        print(f"history: appended {', '.join(outcome.history_appended)}")
    for line in outcome.gate_lines():
        print(line)


def _fail(message: str) -> int:
    """One line on stderr, exit code 2: what a CI log shows must be the cause, not a trace."""
    print("error: " + " ".join(message.splitlines()), file=sys.stderr)
    return 2


def report_main(argv: list[str]) -> int:
    """Run the report command; returns the exit code (the caller passes it to sys.exit)."""
    try:
        args = build_parser().parse_args(argv)
        gates = list(args.gate)
        if args.gates_file is not None:
            gates += read_gates_file(args.gates_file)
        out = args.out
        if out is None:
            out = args.run_dirs[0] / REPORT_HTML if len(args.run_dirs) == 1 else Path(REPORT_HTML)
        outcome = render_report(
            args.run_dirs,
            out,
            gates=gates,
            use_default_gates=not args.no_default_gates,
            history=args.history,
        )
    except SystemExit as exc:  # --help
        return int(exc.code or 0)
    except InputError as exc:
        return _fail(str(exc))
    except OSError as exc:
        return _fail(f"{exc.filename or ''}: {exc.strerror or exc}")
    _print_outcome(outcome)
    return outcome.exit_code


if __name__ == "__main__":  # pragma: no cover - convenience: python -m reports.cli
    raise SystemExit(report_main(sys.argv[1:]))
