"""Command line of the harness (``python -m harness``); exits 0 ok, 1 failed or incomplete, 2 usage, 130 interrupted."""

from __future__ import annotations

import argparse
import errno
import os
import sys
from pathlib import Path
from typing import Any

from harness.cli_parser import PROG, build_parser, commands_overview
from harness.core.argtypes import attach_dash_values
from harness.core.errors import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE, INTERRUPT_REQUESTED, InputError
from harness.core.limits import check_bounds, check_text_arguments, refuse_repeated
from harness.publish import check_history_path, report_run


def _options(ns: argparse.Namespace, argv: list[str]):
    from harness.cli_parser import target_options
    from harness.contract.options import RunOptions
    from harness.runner.sweep import command_line

    if ns.no_report and ns.history:
        raise InputError("--history is written with the report: drop --no-report")
    for items, flag in (
        (ns.session_config, "--session-config"),
        (ns.provider_options, "--provider-option"),
        (ns.free_dims, "--free-dim"),
        (ns.input_values, "--input"),
    ):
        refuse_repeated(items, flag)
    return RunOptions.from_arguments(ns, target_options=target_options(ns), command=command_line(argv))


def _interrupt_on_sigterm() -> None:
    """SIGTERM and SIGHUP end the run like Ctrl-C (metadata.json "interrupted", not "running"),
    once; a disposition someone chose (ignored under nohup, a handler) is left alone."""
    import signal
    import threading

    def interrupt(signum: int, frame: object) -> None:
        INTERRUPT_REQUESTED.set()
        for sig in caught:  # the run is ending: a second signal must not cut its final writes
            signal.signal(sig, lambda *_: None)
        raise KeyboardInterrupt

    caught = [s for s in (getattr(signal, n, None) for n in ("SIGTERM", "SIGHUP")) if s is not None]

    if threading.current_thread() is not threading.main_thread():
        return  # only the main thread may set handlers (main() called from a test thread)
    INTERRUPT_REQUESTED.clear()  # a request of an earlier command in this process is not this one's
    caught = [sig for sig in caught if signal.getsignal(sig) == signal.SIG_DFL]
    for sig in caught:
        signal.signal(sig, interrupt)


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
    """The sweep of a run or bench, interruptible by SIGTERM/SIGHUP, with its progress on stderr."""
    from harness.runner.progress import Progress
    from harness.runner.sweep import execute

    _interrupt_on_sigterm()
    progress = Progress(quiet=quiet)
    try:
        return execute(opts, progress)
    finally:
        progress.close()


def _say_interrupted(outcome: Any) -> None:
    """The one stderr line of an interrupted run: where the partial results are."""
    if outcome.exit_code == EXIT_INTERRUPTED:
        print(f"interrupted: what was measured is in {outcome.out}", file=sys.stderr)


def cmd_bench(ns: argparse.Namespace, argv: list[str]) -> int:
    from harness import bench
    from harness.core.vocab import Workload
    from harness.runner.sweep import command_line

    generate = ns.workload == Workload.GENERATE
    sized = any(a == "--model-size" or a.startswith("--model-size=") for a in argv)
    opts = bench.bench_options(
        model_size=bench.GENERATE_SIZE if generate and not sized else ns.model_size,
        workload=ns.workload,
        prompt_tokens=ns.prompt_tokens,
        new_tokens=ns.new_tokens,
        processes=ns.processes,
        repeat=ns.repeat,
        intra_op_threads=ns.intra_op_threads,
        out=ns.out,
        replace=ns.replace,
        cache_dir=ns.cache_dir,
        command=command_line(argv),
    )
    outcome = _execute(opts, quiet=ns.quiet)
    try:
        _say_interrupted(outcome)
        judgement = report_run(outcome.out, history=None, render=bool(outcome.rows), outcomes=False, kind="bench")
        summary = judgement.run.summary
        if generate:
            lines = bench.generate_lines(bench.generate_figures(summary))
        else:
            lines = bench.limits_lines(bench.limits(summary), opts.intra_op_threads)
        print("\n".join(lines))
        path = bench.write_bench_json(outcome.out, judgement, ns.workload)
    finally:
        outcome.release()
    print(f"bench: {path}")
    if outcome.exit_code != EXIT_OK:
        return outcome.exit_code
    return judgement.exit_code


def _check_json(path: Path, runs: list[Path]) -> None:
    """--json checked as every output is, and writable, before any work."""
    from harness.core.files import check_creatable, check_writable
    from harness.core.runfiles import check_output

    check_creatable(path, "--json", folder=False)
    check_output(path, "--json", runs=runs)
    check_writable(path, "--json", folder=False)


def cmd_capacity(ns: argparse.Namespace, argv: list[str]) -> int:
    """Search the largest N per mode under --memory-limit; print it beside the projection."""
    from harness.contract.options import RunOptions
    from harness.core.capacity import sentence_of
    from harness.runner.capacity import capacity_options, run_capacity
    from harness.runner.progress import Progress
    from harness.runner.sweep import command_line

    if ns.json is not None:  # checked before the search: a mistake costs no probe
        _check_json(ns.json, [ns.out] if ns.out is not None else [])
    base = RunOptions.from_arguments(ns, command=command_line(argv))
    opts = capacity_options(base, ns.max_processes)
    _interrupt_on_sigterm()
    progress = Progress(quiet=ns.quiet)
    try:
        outcome = run_capacity(opts, progress, ns.json)
    finally:
        progress.close()
    try:
        _say_interrupted(outcome)
        if outcome.document is not None:
            judgement = report_run(outcome.out, history=None, render=not ns.no_report, outcomes=False, kind="capacity")
            print(f"capacity {sentence_of(outcome.document)}")
            print(f"capacity: {outcome.out / 'capacity.json'}")
            return outcome.exit_code or judgement.exit_code
    finally:
        outcome.release()
    return outcome.exit_code


def cmd_cache(ns: argparse.Namespace) -> int:
    """``cache info``: where the cache is, its entries and sizes; ``cache clear``: delete them."""
    import datetime as dt

    from harness.cache import cache_entries, clear_cache, default_cache_dir
    from harness.core.units import fmt_bytes, plural

    folder = ns.cache_dir or default_cache_dir()
    if os.path.lexists(folder) and not folder.is_dir():  # a file, a FIFO, a dangling link: not a cache
        raise InputError(f"cache {folder}: is not a folder (--cache-dir or HARNESS_CACHE_DIR names something else)")
    if ns.action == "info":
        entries = cache_entries(folder)
        total = sum(e.bytes for e in entries)
        print(
            f"cache: {folder} ({plural(len(entries), 'entry', 'entries')}, {fmt_bytes(total)})"
            + ("" if folder.is_dir() else " - does not exist yet")
        )
        for entry in entries:
            when = dt.datetime.fromtimestamp(entry.modified).strftime("%Y-%m-%d %H:%M")
            print(f"  {fmt_bytes(entry.bytes):>10}  {when}  {entry.path.name}")
        return EXIT_OK
    removed, kept = clear_cache(folder)
    freed = fmt_bytes(sum(e.bytes for e in removed))
    print(f"cache: {folder}: removed {plural(len(removed), 'entry', 'entries')} ({freed})")
    for path, why in kept:
        print(f"  kept {path.name}: {why}")
    return EXIT_FAILED if kept else EXIT_OK


def cmd_doctor(ns: argparse.Namespace) -> int:
    """Probe the target's device and print its verdict; exit 0 whenever a verdict was reached."""
    from harness.core.files import write_json_atomic
    from harness.targets import get_target

    if ns.json is not None:  # checked before the probe: a mistake costs no probe
        _check_json(ns.json, [])
    target = get_target(ns.target)
    what = f": {target.probe_summary}" if target.probe_summary else ""
    print(f"doctor: probing --target {ns.target} in a child process{what} (at most {ns.timeout:g} s)", file=sys.stderr)
    report = target.probe(ns.timeout)
    for line in report.lines():
        print(line)
    if ns.json is not None:
        write_json_atomic(ns.json, report.to_dict(), what="--json")
    return EXIT_OK


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        check_text_arguments(argv)
        if argv[:1] == ["report"]:  # its own parser, options included (--help too)
            from reports.cli import report_main

            return report_main(argv[1:], prog=f"{PROG} report")
        if not argv:  # no command: show the commands, not argparse's "arguments are required"
            print(commands_overview(), file=sys.stderr)
            return EXIT_USAGE
        ns = build_parser().parse_args(attach_dash_values(argv))
        check_bounds(ns)
        if ns.command == "bench":
            return cmd_bench(ns, argv)
        if ns.command == "capacity":
            return cmd_capacity(ns, argv)
        if ns.command == "cache":
            return cmd_cache(ns)
        if ns.command == "doctor":
            return cmd_doctor(ns)
        return cmd_run(ns, argv)
    except InputError as err:
        print(f"error: {err}", file=sys.stderr)
        return err.exit_code
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Exception as err:  # resource edges: one line, never a traceback
        return _failed(err)


def _failed(err: Exception) -> int:
    """A run that could not go on (`RunFailed`), or a resource error outside a run folder: one line, exit 1."""
    from harness.core.errors import ReportFailed, RunFailed
    from harness.runner.resources import describe

    if isinstance(err, ReportFailed):
        print(
            f"error: report failed: {err}; the run's results are in {err.out} as measured "
            f"(python -m harness report {err.out} renders them again)",
            file=sys.stderr,
        )
        return err.exit_code
    if isinstance(err, RunFailed):
        where = f"; what was measured before is in {err.out}" if err.out else ""
        print(f"error: run failed: {err}{where}", file=sys.stderr)
        return err.exit_code
    if isinstance(err, OSError) and err.errno == errno.ENAMETOOLONG:  # a path the user gave: an input error
        print(f"error: {err.filename or 'a path'}: name too long ({err.strerror})", file=sys.stderr)
        return EXIT_USAGE
    if isinstance(err, (OSError, MemoryError)):
        where = f" ({err.filename})" if getattr(err, "filename", None) else ""
        print(f"error: {describe(err, 'in the harness')}{where}", file=sys.stderr)
        return EXIT_FAILED
    raise err
