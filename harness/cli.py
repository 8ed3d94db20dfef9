"""Command line: ``python -m harness run [options]`` and ``python -m harness report ...``.

Exit codes (a contract CI relies on): 0 success, 1 a worker failed or a gate failed,
2 usage or input error (one line on stderr, never a traceback), 130 interrupted.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from harness.core.errors import InputError, OneLineArgumentParser
from harness.core.schema import MODES, TARGETS

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130
WORKER_FAULTS = ("crash", "signal", "hang", "raise")


def _int_at_least(minimum: int):
    """An argparse type: a whole number >= ``minimum``, with a one-line message otherwise."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"{text!r} must be >= {minimum}")
        return value

    parse.__name__ = f"integer >= {minimum}"
    return parse


_positive_int = _int_at_least(1)
_non_negative_int = _int_at_least(0)


def _processes(text: str) -> list[int]:
    try:
        values = [int(p) for p in text.split(",") if p.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a list like 1,2,4,8") from None
    if not values or any(v < 1 for v in values):
        raise argparse.ArgumentTypeError(f"{text!r}: each N must be >= 1")
    return sorted(set(values))


def _modes(text: str) -> list[str]:
    values = [m.strip() for m in text.split(",") if m.strip()]
    bad = [m for m in values if m not in MODES]
    if not values or bad:
        raise argparse.ArgumentTypeError(f"{text!r}: modes are {','.join(MODES)}")
    return list(dict.fromkeys(values))


def _timeout(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be > 0")
    return value


def _size(text: str) -> int:
    from harness.core.units import parse_size

    try:
        return parse_size(text)
    except InputError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def _worker_fault(text: str) -> tuple[int, str]:
    index, _, action = text.partition("=")
    if not index.isdigit() or action not in WORKER_FAULTS:
        raise argparse.ArgumentTypeError(f"{text!r}: expected INDEX=ACTION, ACTION in {','.join(WORKER_FAULTS)}")
    return int(index), action


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineArgumentParser(prog="harness", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True, parser_class=OneLineArgumentParser)
    run = sub.add_parser("run", help="measure N sessions with and without file-mapped weights")
    run.add_argument("--target", choices=TARGETS, default="cpu",
                     help="cpu: mapper_impl + ORT CPU EP (default); ort-native: ORT maps external "
                          "data itself; qnn: the real QNN EP (HTP simulator on Linux x86_64)")
    src = run.add_mutually_exclusive_group()
    src.add_argument("--model", type=Path, help="any ONNX model (weights externalised to one aligned file)")
    src.add_argument("--model-size", type=_size, default=256 * 1024**2,
                     help="size of the generated model's weights (default 256MiB)")
    run.add_argument("--shape", action="append", default=[], metavar="NAME=1x3x224x224",
                     help="fix a dynamic input shape (repeatable)")
    run.add_argument("--processes", type=_processes, default=[4], metavar="LIST",
                     help="worker processes, e.g. 4 or 1,2,4,8 for a sweep (default 4)")
    run.add_argument("--sessions-per-process", type=_positive_int, default=1, metavar="M")
    run.add_argument("--modes", type=_modes, default=list(MODES), help="mapped,heap (default both)")
    run.add_argument("--repeat", type=_positive_int, default=1, metavar="R")
    run.add_argument("--map-failures", type=_non_negative_int, default=0, metavar="K",
                     help="cpu target: the first K mapping attempts in each worker fail (FaultPlan)")
    run.add_argument("--max-attempts", type=_positive_int, default=3,
                     help="mapping attempts before falling back to the heap (default 3)")
    run.add_argument("--worker-timeout", type=_timeout, default=300.0, metavar="S",
                     help="kill a worker not ready after S seconds (default 300)")
    run.add_argument("--out", type=Path, help="output folder (default: a new folder under results/)")
    run.add_argument("--embed-mode", type=int, choices=(0, 1), default=0,
                     help="qnn: 0 = context in an external .bin (mappable), 1 = inside the ONNX file")
    run.add_argument("--share-ep-contexts", action="store_true",
                     help="qnn: the M sessions of one process share their QNN contexts")
    run.add_argument("--cache-dir", type=Path, help="where generated/compiled models are cached")
    run.add_argument("--gate", action="append", default=[], metavar="EXPR",
                     help="e.g. mapped_pss_ratio<=0.35 (repeatable); a failing gate exits 1")
    run.add_argument("--gates-file", type=Path)
    run.add_argument("--no-default-gates", action="store_true")
    run.add_argument("--history", type=Path, help="append this run's summary to a history CSV")
    run.add_argument("--no-report", action="store_true", help="skip report.html")
    run.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    run.add_argument("--inject-worker-fault", type=_worker_fault, action="append", default=[],
                     help=argparse.SUPPRESS)  # reliability suites: make worker I crash/hang/raise
    bench = sub.add_parser("bench", help="the headline benchmark: cpu mapped/heap vs ort-native, criteria table")
    bench.add_argument("--model-size", type=_size, default=512 * 1024**2, help="default 512MiB")
    bench.add_argument("--processes", type=_positive_int, default=4, metavar="N")
    bench.add_argument("--repeat", type=_positive_int, default=3, metavar="R",
                       help="repeats; criteria use the median over them (default 3: single ms-scale "
                            "init times on a 2-core machine are noisy)")
    bench.add_argument("--out", type=Path)
    bench.add_argument("--cache-dir", type=Path)
    sub.add_parser("report", help="render report.html from run folders (see: harness report --help)")
    return parser


def _options(ns: argparse.Namespace, argv: list[str]):
    from harness.models import parse_shapes
    from harness.runner.sweep import RunOptions, command_line

    if ns.shape and ns.model is None and ns.target != "qnn":
        raise InputError("--shape fixes inputs of --model; the generated model has static shapes")
    if ns.map_failures and ns.target != "cpu":
        raise InputError("--map-failures drives mapper_impl's FaultPlan: it needs --target cpu")
    if ns.no_report and (ns.gate or ns.gates_file or ns.history):
        raise InputError("--gate, --gates-file and --history are evaluated by the report: drop --no-report")
    if ns.share_ep_contexts and ns.target != "qnn":
        raise InputError("--share-ep-contexts only applies to --target qnn")
    return RunOptions(
        target=ns.target, model=ns.model, model_size=ns.model_size, shapes=parse_shapes(ns.shape),
        processes=ns.processes, sessions_per_process=ns.sessions_per_process, modes=ns.modes,
        repeat=ns.repeat, map_failures=ns.map_failures, max_attempts=ns.max_attempts,
        worker_timeout_s=ns.worker_timeout, out=ns.out, embed_mode=ns.embed_mode,
        share_ep_contexts=ns.share_ep_contexts, cache_dir=ns.cache_dir, gates=ns.gate,
        gates_file=ns.gates_file, default_gates=not ns.no_default_gates, history=ns.history,
        report=not ns.no_report, fault_actions=dict(ns.inject_worker_fault), command=command_line(argv),
    )


def _interrupt_on_sigterm() -> None:
    """SIGTERM (a CI timeout, ``kill``, a container stop) ends the run like Ctrl-C: workers
    are killed and what was measured is written. By default it would end this process on
    the spot and leave a hung worker running with no parent. A SIGTERM disposition someone
    chose deliberately (ignored, or a handler) is left alone."""
    import signal
    import threading

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    if threading.current_thread() is not threading.main_thread():
        return  # only the main thread may set handlers (main() called from a test thread)
    if hasattr(signal, "SIGTERM") and signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
        signal.signal(signal.SIGTERM, interrupt)


def cmd_run(ns: argparse.Namespace, argv: list[str]) -> int:
    from rich.console import Console

    from harness.console import outcome_table, summary_table
    from harness.runner.progress import Progress
    from harness.runner.sweep import execute

    opts = _options(ns, argv)
    if opts.gates_file is not None and not opts.gates_file.is_file():
        raise InputError(f"--gates-file {opts.gates_file}: no such file")
    progress = Progress(quiet=ns.quiet)
    _interrupt_on_sigterm()
    outcome = execute(opts, progress)
    if outcome.exit_code == EXIT_INTERRUPTED:
        print(f"interrupted: what was measured is in {outcome.out}", file=sys.stderr)
    console = Console(highlight=False, soft_wrap=True)  # notes and gate lines: never wrapped mid-word
    console.print(summary_table(outcome.summary))
    outcomes = outcome_table(outcome.rows)
    if outcomes is not None and (opts.repeat > 1 or opts.map_failures):
        console.print(outcomes)
    for note in outcome.notes:
        console.print(f"note: {note}")
    code = outcome.exit_code
    if opts.report and outcome.rows:
        from reports import render_run_report

        report = render_run_report(outcome.out, gates=opts.gates, gates_file=opts.gates_file,
                                   default_gates=opts.default_gates, history=opts.history)
        console.print(f"report: {report.path}")
        for line in report.gate_lines():
            console.print(line)
        if code == EXIT_OK and not report.gates_passed:
            code = EXIT_FAILED
    console.print(f"results: {outcome.out}")
    return code


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        if argv[:1] == ["report"]:  # its own parser, options included (--help too)
            from reports.cli import report_main

            return report_main(argv[1:])
        ns = build_parser().parse_args(argv)
        if ns.command == "bench":
            from harness.bench import run_bench
            from harness.runner.sweep import command_line

            return run_bench(model_size=ns.model_size, processes=ns.processes, repeat=ns.repeat, out=ns.out,
                             cache_dir=ns.cache_dir, command=command_line(argv))
        return cmd_run(ns, argv)
    except InputError as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
