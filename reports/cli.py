"""``python -m harness report RUN_DIR ... [--baseline RUN0]``: judge, render, compare; exit 0, 1 or 2."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from harness.core import argtypes
from harness.core.compare import MinEffect, parse_min_effect
from harness.core.compare_text import rule_text
from harness.core.errors import HelpFormatter, InputError, OneLineArgumentParser
from harness.core.gates import metrics_epilog, read_gates_file
from harness.core.limits import check_bounds
from harness.core.units import SIZE_HELP
from harness.core.verdict import gates_summary_line

from .html import Published, render_runs

__all__ = ["build_parser", "report_main"]


def build_parser(prog: str = "python -m harness report") -> argparse.ArgumentParser:
    parser = OneLineArgumentParser(
        prog=prog,
        description="Judge run folders and render one self-contained report.html (several runs: side by side, "
        "one column each). With --baseline, show each run's absolute values, deltas and percent "
        "changes against the baseline run, and which changes are real (significant and large enough).",
        epilog=f"{metrics_epilog()}\n{SIZE_HELP}.\nChange rule: {rule_text(MinEffect())}.\n"
        "Exit codes: 0 every run passes, 1 a gate or worker failed, a run is incomplete or (with "
        "--fail-on-regression) a figure regressed, 2 usage or input error.",
        formatter_class=HelpFormatter,
    )
    parser.add_argument(
        "run_dirs", nargs="+", type=Path, metavar="RUN_DIR", help="run folder(s) written by `python -m harness run`"
    )
    parser.add_argument(
        "--out",
        type=Path,
        metavar="FILE",
        help="report file (default: RUN_DIR/report.html for one run, ./report.html for several)",
    )
    _add_compare_options(parser)
    _add_gate_options(parser)
    return parser


def _add_compare_options(parser: argparse.ArgumentParser) -> None:
    """--baseline and what it enables: the JSON comparison, the regression exit, the effect sizes."""
    parser.add_argument(
        "--baseline", type=Path, metavar="RUN0", help="a run folder to compare every RUN_DIR with (default: none)"
    )
    parser.add_argument(
        "--json",
        type=Path,
        metavar="FILE",
        help="with --baseline: write the comparison (every figure's values, delta, p-value, threshold and "
        "call) to this JSON file (default: none)",
    )
    parser.add_argument(
        "--fail-on-regression",
        action="store_true",
        help="with --baseline: exit 1 when a figure of the mapped mode (memory, saving, init, latency) "
        "changed for the worse, naming each on one line",
    )
    parser.add_argument(
        "--min-effect",
        action="append",
        default=[],
        metavar="KIND=VALUE",
        help="smallest change called, repeatable: memory=1%%, memory=1MiB, time=5%% (the defaults)",
    )


def _add_gate_options(parser: argparse.ArgumentParser) -> None:
    """The history, the gates and the projection, judged on top of what the run recorded."""
    parser.add_argument(
        "--history",
        type=Path,
        metavar="FILE",
        help="CSV to append this run's summary and headline to; adds a trend chart (default: none)",
    )
    parser.add_argument(
        "--gate",
        action="append",
        default=[],
        metavar="EXPR",
        help="gate such as 'mapped_pss_ratio<=0.35' (repeatable), on top of the run's own",
    )
    parser.add_argument(
        "--gates-file",
        type=Path,
        metavar="FILE",
        help="file with one gate expression per line, '#' comments (default: none)",
    )
    parser.add_argument(
        "--no-default-gates",
        action="store_true",
        help="check only the gates given here and at run time, not the target's defaults",
    )
    parser.add_argument(
        "--project-to",
        type=argtypes.projection,
        metavar="SESSIONSxSIZE",
        help="deployment to project to, e.g. 8x4GiB (default: what the run recorded, else the "
        "measured weights at twice the largest N x M measured, at least 8 sessions)",
    )


def _print(published: Published) -> None:
    from harness.core.compare_text import comparison_lines

    print(f"report: {published.path}")
    if published.history_appended:
        print(f"history: appended {', '.join(published.history_appended)}")
    for judgement in published.judgements:
        for line in judgement.gate_lines():
            print(line)
    print(gates_summary_line(published.judgements))
    for comparison in published.comparisons:
        for line in comparison_lines(comparison):
            print(line)
    for judgement in published.judgements:
        print(f"[{judgement.run.run_id}] {judgement.verdict_line()}")


def _fail(message: str) -> int:
    """One line on stderr, exit code 2: what a CI log shows must be the cause, not a trace."""
    print("error: " + " ".join(message.splitlines()), file=sys.stderr)
    return 2


def report_main(argv: list[str], prog: str = "python -m harness report") -> int:
    """Run the report command; returns the exit code (the caller passes it to sys.exit)."""
    try:
        args = build_parser(prog).parse_args(argv)
        check_bounds(args)
        min_effect = _comparison_options(args)
        gates = [*args.gate, *(read_gates_file(args.gates_file) if args.gates_file else [])]
        published = render_runs(
            args.run_dirs,
            args.out,
            gates=gates,
            use_default_gates=not args.no_default_gates,
            history=args.history,
            project_to=args.project_to,
            baseline=args.baseline,
            inputs=[args.gates_file] if args.gates_file else [],
            min_effect=min_effect,
            json_out=args.json,
        )
    except SystemExit as exc:  # --help
        return int(exc.code or 0)
    except InputError as exc:
        return _fail(str(exc))
    except OSError as exc:
        return _fail(f"{exc.filename or ''}: {exc.strerror or exc}")
    _print(published)
    return _regression_exit(published, published.exit_code) if args.fail_on_regression else published.exit_code


def _comparison_options(args: argparse.Namespace) -> MinEffect:
    """--json, --fail-on-regression and --min-effect compare with a baseline: refused without one."""
    for given, flag in ((args.json, "--json"), (args.fail_on_regression, "--fail-on-regression")):
        if given and args.baseline is None:
            raise InputError(f"{flag} compares with a baseline: give --baseline RUN0")
    if args.min_effect and args.baseline is None:
        raise InputError("--min-effect sets when a change against --baseline is called: give --baseline RUN0")
    return parse_min_effect(args.min_effect)


def _regression_exit(published: Published, code: int) -> int:
    """1 when a compared figure regressed (each named on one line on stdout), else ``code``."""
    from harness.core.compare_text import regression_lines

    lines = [line for comparison in published.comparisons for line in regression_lines(comparison)]
    for line in lines:
        print(line)
    if not lines:
        print("regressions: none")
    return 1 if lines else code


if __name__ == "__main__":  # pragma: no cover - convenience: python -m reports.cli
    raise SystemExit(report_main(sys.argv[1:]))
