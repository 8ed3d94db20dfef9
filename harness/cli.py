"""Command line of the harness: ``run``, ``bench``, ``report``, ``cache``, ``doctor``.

One program name everywhere: ``python -m harness`` (the same program is installed as the
``qnn-fmw-harness`` console script). Every option's help shows its default and unit.

This module is the composition root: it is the only module of `harness` that imports
`reports`. The runner records facts, `harness.core` interprets them (one `Judgement` per run),
and this module prints that judgement and has `reports` render it.

Exit codes (a contract CI relies on): 0 success, 1 a worker failed, a gate failed or the run is
incomplete, 2 usage or input error (one line on stderr, never a traceback), 130 interrupted.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from typing import Any

from harness.core.errors import HelpFormatter, InputError, OneLineArgumentParser
from harness.core.schema import MODES

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130
#: Hidden test hooks of the reliability suites (--inject-worker-fault I=ACTION): make worker I
#: fail, drop its weight pages before it is sampled, or stop at a moment of its start-up.
WORKER_FAULTS = (
    "crash",
    "signal",
    "hang",
    "raise",
    "drop-weight-pages",
    "pause-spawn",
    "pause-start",
    "pause-imports",
    "pause-session",
)
PROG = "python -m harness"
DESCRIPTION = (
    "Measure N ONNX Runtime sessions with and without file-mapped weights (the QNN EP's "
    "disable_file_mapped_weights=0/1), judge the run and render a self-contained report. "
    "Also installed as the console script qnn-fmw-harness."
)
EXIT_CODES = (
    "Exit codes: 0 pass, 1 a worker or gate failed or the run is incomplete, 2 usage or input error, 130 interrupted."
)


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
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be a finite number of seconds > 0")
    return value


def _size(text: str) -> int:
    from harness.core.units import parse_size

    try:
        return parse_size(text)
    except InputError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def _projection(text: str) -> tuple[int, int]:
    """``8x4GiB`` -> (8 sessions, 4 GiB of weights)."""
    from harness.core.units import parse_projection

    try:
        return parse_projection(text)
    except InputError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def _worker_fault(text: str) -> tuple[int, str]:
    index, _, action = text.partition("=")
    if not index.isdigit() or action not in WORKER_FAULTS:
        raise argparse.ArgumentTypeError(f"{text!r}: expected INDEX=ACTION, ACTION in {','.join(WORKER_FAULTS)}")
    return int(index), action


def _label(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key.strip() or any(c in key for c in ",;=\n"):
        raise argparse.ArgumentTypeError(f"{text!r}: expected KEY=VALUE, e.g. device=x-elite")
    return key.strip(), value.strip()


def _labels(pairs: list[tuple[str, str]]) -> dict[str, str]:
    """--label KEY=VALUE pairs; a key given twice is a mistake, not "the last one wins"."""
    labels: dict[str, str] = {}
    for key, value in pairs:
        if key in labels:
            raise InputError(f"--label {key}: given twice ({labels[key]!r} and {value!r})")
        labels[key] = value
    return labels


def _target_option_type(option: Any):
    """argparse type for a target option: its own parser, its message on one line."""

    def parse(text: str) -> Any:
        try:
            return option.parse(text)
        except (ValueError, TypeError) as err:
            raise argparse.ArgumentTypeError(f"{text!r}: {err}") from None

    parse.__name__ = option.name
    return parse


def _add_target_options(parser: argparse.ArgumentParser) -> None:
    """Every registered target's own options; each records None unless given, so giving one to
    another target is caught (see `_target_options`)."""
    from harness.targets import all_targets

    for target in all_targets():
        group = parser.add_argument_group(f"--target {target.name} options")
        for option in target.options:
            dest = f"target_option_{option.name}"
            default = option.default
            if isinstance(default, bool):
                default = str(default).lower()
            elif default in ({}, [], (), None):  # a repeatable option starts empty
                default = "none"
            text = f"{option.help} (default: {default})"
            if option.parse is None:
                group.add_argument(option.flag, dest=dest, action="store_const", const=True, default=None, help=text)
            elif option.repeat:
                group.add_argument(
                    option.flag,
                    dest=dest,
                    type=_target_option_type(option),
                    action="append",
                    default=None,
                    metavar=option.metavar,
                    help=text,
                )
            else:
                group.add_argument(
                    option.flag,
                    dest=dest,
                    type=_target_option_type(option),
                    default=None,
                    choices=option.choices,
                    metavar=option.metavar,
                    help=text,
                )


def _add_run_arguments(run: argparse.ArgumentParser) -> None:
    from harness.core.units import SIZE_HELP
    from harness.targets import DEFAULT, NAMES, get_target

    summaries = "; ".join(f"{n}: {get_target(n).summary.removesuffix(' (default)')}" for n in NAMES)
    run.add_argument("--target", choices=NAMES, default=DEFAULT, help=f"what loads the weights; {summaries}")
    run.add_argument(
        "--peer",
        choices=NAMES,
        default=None,
        help="also measure this target in mapped mode beside --target, e.g. ort-native (default: none)",
    )
    src = run.add_mutually_exclusive_group()
    src.add_argument(
        "--model",
        type=Path,
        action="append",
        metavar="PATH",
        help="any ONNX model (cpu targets: weights externalised to one aligned file; qnn: compiled, "
        "or measured as it is when it is a compiled EPContext model); repeat it, or give a "
        "folder (its genai_config.json, else every *.onnx), to load a pipeline in every "
        "session group (default: a generated model of --model-size)",
    )
    src.add_argument(
        "--model-size",
        type=_size,
        default="256MiB",
        metavar="SIZE",
        help=f"weights of the generated model ({SIZE_HELP})",
    )
    run.add_argument(
        "--shape",
        action="append",
        default=[],
        metavar="NAME=1x3x224x224",
        help="fix a dynamic input shape of --model (repeatable)",
    )
    run.add_argument(
        "--free-dim",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="set a named symbolic dimension in every input, as onnxruntime_perf_test -f (repeatable)",
    )
    run.add_argument(
        "--input",
        action="append",
        default=[],
        metavar="NAME=FILE.npy|NAME=VALUE",
        help="feed this input real values: a .npy array, or one value filled to its shape, e.g. sr=16000 (repeatable)",
    )
    run.add_argument(
        "--session-config",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="ORT session config entry for every session, both modes, and the reference (repeatable)",
    )
    run.add_argument(
        "--provider-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="QNN EP provider option, e.g. soc_model=60 (repeatable; not disable_file_mapped_weights)",
    )
    run.add_argument(
        "--intra-op-threads",
        type=_positive_int,
        default=None,
        metavar="N",
        help="intra-op threads of every session and the reference (default: ORT's choice)",
    )
    run.add_argument(
        "--runs",
        type=_int_at_least(0),
        default=0,
        metavar="R",
        help="timed inferences after the first, for latency p50/p90/p99 (count)",
    )
    run.add_argument(
        "--page-cache",
        choices=("warm", "cold"),
        default="warm",
        help="warm: read the weights once before the first group; cold: evict their pages "
        "before each group and verify it (Linux)",
    )
    run.add_argument(
        "--processes",
        type=_processes,
        default="4",
        metavar="LIST",
        help="worker processes N (count), e.g. 4, or 1,2,4,8 for a sweep",
    )
    run.add_argument(
        "--sessions-per-process",
        type=_positive_int,
        default=1,
        metavar="M",
        help="ORT sessions in each worker process (count)",
    )
    run.add_argument(
        "--modes",
        type=_modes,
        default="mapped,heap",
        metavar="LIST",
        help="modes to measure: mapped (disable_file_mapped_weights=0), heap (=1)",
    )
    run.add_argument(
        "--repeat",
        type=_positive_int,
        default=1,
        metavar="R",
        help="repeats of every group (count); the headline is the median over them",
    )
    run.add_argument(
        "--worker-timeout",
        type=_timeout,
        default="300",
        metavar="SECONDS",
        help="kill a worker not ready after this many seconds",
    )
    _add_folder_arguments(run, "run")
    run.add_argument(
        "--gate",
        action="append",
        default=[],
        metavar="EXPR",
        help="pass/fail criterion, e.g. mapped_pss_ratio<=0.35 (repeatable; metrics below); a failing gate exits 1",
    )
    run.add_argument(
        "--gates-file", type=Path, metavar="FILE", help="one gate expression per line, # comments (default: none)"
    )
    run.add_argument("--no-default-gates", action="store_true", help="do not add the target's default gates")
    run.add_argument(
        "--label",
        type=_label,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="tag the run (repeatable), e.g. device=x-elite: kept in metadata.json and the history",
    )
    run.add_argument(
        "--history",
        type=Path,
        metavar="FILE",
        help="append this run's summary and headline to a history CSV; needs the report (default: none)",
    )
    run.add_argument(
        "--project-to",
        type=_projection,
        default=None,
        metavar="SESSIONSxSIZE",
        help="deployment the report projects to, e.g. 8x4GiB (default: the measured weights at twice the "
        "largest N x M measured, at least 8 sessions)",
    )
    run.add_argument("--no-report", action="store_true", help="skip report.html (headline.json is still written)")
    run.add_argument("--quiet", action="store_true", help="no progress on stderr")
    run.add_argument(
        "--inject-worker-fault", type=_worker_fault, action="append", default=[], help=argparse.SUPPRESS
    )  # reliability suites: make worker I crash/hang/raise
    _add_target_options(run)


def _add_folder_arguments(parser: argparse.ArgumentParser, kind: str) -> None:
    """--out and --cache-dir, the same for `run` and `bench`: only the default folder's name differs."""
    parser.add_argument(
        "--out", type=Path, metavar="DIR", help=f"output folder (default: a new results/{kind}-<time>/)"
    )
    parser.add_argument(
        "--cache-dir",
        type=Path,
        metavar="DIR",
        help="model cache (default: $HARNESS_CACHE_DIR or ~/.cache/qnn-fmw-harness)",
    )


def _add_cache_parser(sub: Any) -> None:
    cache = sub.add_parser(
        "cache",
        help="show or clear the model cache",
        formatter_class=HelpFormatter,
        description="The model cache holds generated, externalised and compiled models "
        "(content-keyed: a stale entry is never used). Where: --cache-dir, else "
        "$HARNESS_CACHE_DIR, else ~/.cache/qnn-fmw-harness.",
    )
    cache.add_argument("action", choices=("info", "clear"), help="info: entries and sizes; clear: delete every entry")
    cache.add_argument(
        "--cache-dir",
        type=Path,
        metavar="DIR",
        help="the cache folder (default: $HARNESS_CACHE_DIR or ~/.cache/qnn-fmw-harness)",
    )


def build_parser() -> argparse.ArgumentParser:
    from harness.core.gates import metrics_epilog
    from harness.core.units import SIZE_HELP

    parser = OneLineArgumentParser(prog=PROG, description=DESCRIPTION, epilog=EXIT_CODES, formatter_class=HelpFormatter)
    sub = parser.add_subparsers(
        dest="command", required=True, parser_class=OneLineArgumentParser, metavar="{run,bench,report,cache,doctor}"
    )
    run = sub.add_parser(
        "run",
        help="measure N sessions with and without file-mapped weights",
        description="Measure N worker processes x M sessions in mapped and heap mode, print the "
        "judgement, write results.csv, summary.csv, metadata.json, headline.json and "
        "report.html into --out.",
        epilog=f"{metrics_epilog()}\n{SIZE_HELP}.\n{EXIT_CODES}",
        formatter_class=HelpFormatter,
    )
    _add_run_arguments(run)
    bench = sub.add_parser(
        "bench",
        help="the headline benchmark: cpu mapped/heap vs ort-native, criteria as gates",
        description="A run of --target cpu with --peer ort-native, judged by the criteria of "
        "harness/bench.gates; writes report.html, headline.json and bench.json.",
        epilog=EXIT_CODES,
        formatter_class=HelpFormatter,
    )
    bench.add_argument(
        "--model-size",
        type=_size,
        default="512MiB",
        metavar="SIZE",
        help=f"weights of the generated model ({SIZE_HELP})",
    )
    bench.add_argument("--processes", type=_positive_int, default=4, metavar="N", help="worker processes (count)")
    bench.add_argument(
        "--repeat",
        type=_positive_int,
        default=3,
        metavar="R",
        help="repeats (count); criteria use the median over them: single ms-scale init times on a "
        "2-core machine are noisy",
    )
    _add_folder_arguments(bench, "bench")
    bench.add_argument("--quiet", action="store_true", help="no progress on stderr")
    sub.add_parser(
        "report",
        help="render report.html from run folders, compare with a --baseline (see: report --help)",
        add_help=False,
    )
    _add_cache_parser(sub)
    doctor = sub.add_parser(
        "doctor",
        help="what the QNN EP reports on this machine: EP devices, NPU, HTP, "
        "RPCMem, file mapping, and whether it is a QNN device",
        description="Probe the QNN EP in a child process: EP devices, NPU, HTP, RPCMem, file "
        "mapping, and whether this machine is a QNN device.",
        epilog="Exit code 0 whenever a verdict was reached (no NPU is a finding, not an error); 2 usage error.",
        formatter_class=HelpFormatter,
    )
    doctor.add_argument("--target", choices=("qnn",), default="qnn", help="the target to probe")
    doctor.add_argument("--json", type=Path, metavar="FILE", help="also write the report as JSON (default: none)")
    doctor.add_argument("--timeout", type=_timeout, default="120", metavar="SECONDS", help="probe time limit")
    return parser


def _target_options(ns: argparse.Namespace) -> dict[str, Any]:
    """The options given for the chosen target; InputError for another target's option."""
    from harness.targets import all_targets

    chosen: dict[str, Any] = {}
    for target in all_targets():
        for option in target.options:
            value = getattr(ns, f"target_option_{option.name}")
            if value is None:
                continue
            if target.name != ns.target:
                raise InputError(f"{option.flag} only applies to --target {target.name}")
            chosen[option.name] = dict(value) if option.repeat else value
    return chosen


def read_gate_expressions(exprs: list[str], gates_file: Path | None) -> list[str]:
    """--gate and --gates-file, parsed now: a typo costs a second, not a whole sweep."""
    from harness.core.gates import parse_gates, read_gates_file

    exprs = list(exprs) + (read_gates_file(gates_file) if gates_file is not None else [])
    parse_gates(exprs)
    return exprs


def _options(ns: argparse.Namespace, argv: list[str]):
    from harness.prep.modelargs import parse_free_dims, parse_input_values, parse_shapes
    from harness.prep.sessions import parse_key_values
    from harness.runner.options import RunOptions
    from harness.runner.sweep import command_line

    if ns.no_report and ns.history:
        raise InputError("--history is written with the report: drop --no-report")
    return RunOptions(
        target=ns.target,
        target_options=_target_options(ns),
        peer=ns.peer,
        models=list(ns.model or []),
        model_size=ns.model_size,
        shapes=parse_shapes(ns.shape),
        free_dims=parse_free_dims(ns.free_dim),
        input_values=parse_input_values(ns.input),
        session_config=parse_key_values(ns.session_config, "--session-config"),
        provider_options=parse_key_values(ns.provider_option, "--provider-option"),
        intra_op_threads=ns.intra_op_threads,
        runs=ns.runs,
        page_cache=ns.page_cache,
        processes=ns.processes,
        sessions_per_process=ns.sessions_per_process,
        modes=ns.modes,
        repeat=ns.repeat,
        worker_timeout_s=ns.worker_timeout,
        out=ns.out,
        cache_dir=ns.cache_dir,
        gates=read_gate_expressions(ns.gate, ns.gates_file),
        default_gates=not ns.no_default_gates,
        labels=_labels(ns.label),
        fault_actions=dict(ns.inject_worker_fault),
        command=command_line(argv),
        project_to=ns.project_to,
    )


def _interrupt_on_sigterm() -> None:
    """SIGTERM (a CI timeout, ``kill``, a container stop) and SIGHUP (the terminal or SSH
    session closed) end the run like Ctrl-C: workers are killed, what was measured is written
    and metadata.json says "interrupted". By default either would end this process on the spot
    with the run left "running". A disposition someone chose deliberately (ignored, e.g. under
    nohup, or a handler) is left alone."""
    import signal
    import threading

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    if threading.current_thread() is not threading.main_thread():
        return  # only the main thread may set handlers (main() called from a test thread)
    for name in ("SIGTERM", "SIGHUP"):
        sig = getattr(signal, name, None)
        if sig is not None and signal.getsignal(sig) == signal.SIG_DFL:
            signal.signal(sig, interrupt)


def report_run(out: Path, *, history: Path | None, render: bool, outcomes: bool, kind: str = "run") -> Any:
    """Judge a finished run folder, print the judgement, write headline.json and render its
    report (and history)."""
    from harness.console import make_console, print_judgement
    from harness.core.headline import write_headline
    from harness.core.rundata import load_run
    from harness.core.verdict import judge

    judgement = judge(load_run(out))
    console = make_console()
    print_judgement(console, judgement, outcomes=outcomes)
    write_headline(out, judgement, kind=kind)
    if render:
        from harness.runner.resources import describe
        from harness.runner.sweep import RunFailed
        from reports import publish

        try:
            published = publish([judgement], out / "report.html", history=history)
        except OSError as err:
            raise RunFailed(describe(err, "writing report.html or the history"), out) from err
        console.print(f"report: {published.path}")
    console.print(f"results: {out}")
    return judgement


def check_history_path(history: Path, out: Path | None) -> None:
    """--history is checked before any work: appendable, a history CSV, and not one of the
    files the run itself writes (appending to its own results.csv would corrupt both)."""
    from harness.runner.outdir import RUN_FILES, RUN_FOLDERS
    from reports import check_history

    check_history(history)
    if out is not None:
        own = {(out / name).resolve() for name in RUN_FILES}
        inside = [(out / name).resolve() for name in RUN_FOLDERS]
        target = history.resolve()
        if target in own or any(folder == target or folder in target.parents for folder in inside):
            raise InputError(
                f"--history {history}: is one of the files this run writes in --out {out}; "
                "keep the history outside the run folder's own files"
            )


def test_record(nodeid: str, outcome: str, folder: str) -> Any:
    """A pytest test and the run folder it produced, as the report shows it (pytest plugin)."""
    from reports import TestRecord

    return TestRecord(nodeid, outcome, folder)


def render_test_session(folders: list[str], out: Path, records: list[Any], counts: dict[str, int]) -> Path:
    """The pytest plugin's --report-dir report: every run folder of the session judged and
    rendered into one page with the tests' outcomes. A folder that cannot be loaded (a run
    killed before it wrote its tables) is left out, never fatal: the session must end."""
    from harness.core.rundata import load_run
    from harness.core.verdict import judge
    from reports import publish

    judgements = []
    for folder in folders:
        try:
            judgements.append(judge(load_run(folder)))
        except InputError:
            continue
    return publish(judgements, out, tests=records, test_counts=counts).path


def cmd_run(ns: argparse.Namespace, argv: list[str]) -> int:
    opts = _options(ns, argv)
    if ns.history is not None:
        check_history_path(ns.history, opts.out)
    outcome = _execute(opts, quiet=ns.quiet)
    try:
        _say_interrupted(outcome)
        show_outcomes = opts.repeat > 1 or any(k in opts.target_options for k in ("fault", "map_failures"))
        judgement = report_run(
            outcome.out, history=ns.history, render=not ns.no_report and bool(outcome.rows), outcomes=show_outcomes
        )
    finally:
        outcome.release()
    if outcome.exit_code != EXIT_OK:
        return outcome.exit_code
    return judgement.exit_code


def _execute(opts: Any, *, quiet: bool) -> Any:
    """The sweep of a run or bench, interruptible by SIGTERM/SIGHUP as by Ctrl-C, with its
    progress on stderr, which is closed however the sweep ends."""
    from harness.runner.progress import Progress
    from harness.runner.sweep import execute

    _interrupt_on_sigterm()
    progress = Progress(quiet=quiet)
    try:
        return execute(opts, progress)
    finally:
        progress.close()


def _say_interrupted(outcome: Any) -> None:
    """The one stderr line of an interrupted run or bench (--quiet included): where the
    partial results are."""
    if outcome.exit_code == EXIT_INTERRUPTED:
        print(f"interrupted: what was measured is in {outcome.out}", file=sys.stderr)


def cmd_bench(ns: argparse.Namespace, argv: list[str]) -> int:
    from harness.bench import bench_options, write_bench_json
    from harness.runner.sweep import command_line

    opts = bench_options(
        model_size=ns.model_size,
        processes=ns.processes,
        repeat=ns.repeat,
        out=ns.out,
        cache_dir=ns.cache_dir,
        command=command_line(argv),
    )
    outcome = _execute(opts, quiet=ns.quiet)
    try:
        _say_interrupted(outcome)
        judgement = report_run(outcome.out, history=None, render=bool(outcome.rows), outcomes=False, kind="bench")
        path = write_bench_json(outcome.out, judgement)
    finally:
        outcome.release()
    print(f"bench: {path}")
    if outcome.exit_code != EXIT_OK:
        return outcome.exit_code
    return judgement.exit_code


def cmd_cache(ns: argparse.Namespace) -> int:
    """``cache info``: where the cache is, its entries and sizes; ``cache clear``: delete them."""
    import datetime as dt

    from harness.cache import cache_entries, clear_cache, default_cache_dir
    from harness.core.units import fmt_bytes

    folder = ns.cache_dir or default_cache_dir()
    if ns.action == "info":
        entries = cache_entries(folder)
        total = sum(e.bytes for e in entries)
        print(
            f"cache: {folder} ({len(entries)} entries, {fmt_bytes(total)})"
            + ("" if folder.is_dir() else " - does not exist yet")
        )
        for entry in entries:
            when = dt.datetime.fromtimestamp(entry.modified).strftime("%Y-%m-%d %H:%M")
            print(f"  {fmt_bytes(entry.bytes):>10}  {when}  {entry.path.name}")
        return EXIT_OK
    removed, kept = clear_cache(folder)
    print(f"cache: {folder}: removed {len(removed)} entries ({fmt_bytes(sum(e.bytes for e in removed))})")
    for path, why in kept:
        print(f"  kept {path.name}: {why}")
    return EXIT_FAILED if kept else EXIT_OK


def cmd_doctor(ns: argparse.Namespace) -> int:
    """Probe the QNN EP in a child process and print its verdict. Exit 0 whenever a verdict was
    reached (a machine without an NPU is a finding, not an error)."""
    from harness.core.files import write_json_atomic
    from harness.targets.qnn.device import probe_device

    if ns.json is not None:  # checked before the probe: a mistake costs no probe
        from harness.core.files import check_creatable, check_writable, replaceable_path

        check_creatable(ns.json, "--json", folder=False)
        replaceable_path(ns.json, "--json")
        check_writable(ns.json, "--json", folder=False)
    report = probe_device(timeout_s=ns.timeout)
    for line in report.lines():
        print(line)
    if ns.json is not None:
        write_json_atomic(ns.json, report.to_dict(), what="--json")
    return EXIT_OK


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        if argv[:1] == ["report"]:  # its own parser, options included (--help too)
            from reports.cli import report_main

            return report_main(argv[1:], prog=f"{PROG} report")
        ns = build_parser().parse_args(argv)
        if ns.command == "bench":
            return cmd_bench(ns, argv)
        if ns.command == "cache":
            return cmd_cache(ns)
        if ns.command == "doctor":
            return cmd_doctor(ns)
        return cmd_run(ns, argv)
    except InputError as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Exception as err:  # resource edges: one line, never a traceback
        return _failed(err)


def _failed(err: Exception) -> int:
    """A run that could not go on (`RunFailed`: the disk filled, no descriptors left, a worker
    could not be started), or a resource error outside any run folder: one line, exit 1."""
    from harness.runner.resources import describe
    from harness.runner.sweep import RunFailed

    if isinstance(err, RunFailed):
        where = f"; what was measured before is in {err.out}" if err.out else ""
        print(f"error: run failed: {err}{where}", file=sys.stderr)
        return EXIT_FAILED
    if isinstance(err, (OSError, MemoryError)):
        where = f" ({err.filename})" if getattr(err, "filename", None) else ""
        print(f"error: {describe(err, 'in the harness')}{where}", file=sys.stderr)
        return EXIT_FAILED
    raise err
