"""The Windows steps, one set for every Windows lane: the hosted workflows (windows-mapper.yml on
x64, windows-arm64.yml on ARM64) run them natively, the Wine lane (`.ci/wine_lane.py`) runs them on
Windows CPython under Wine on every Linux CI run. So the day a hosted Windows lane first runs, it
runs what CI runs every day.

    python .ci/windows_steps.py STEP [--out DIR] [step options]

Steps (each exits 0 when it passed, 1 when it failed; a usage error is 2):

- ``env``: the interpreter, the OS (and Wine's version under Wine), the packages' versions.
- ``mapper``: the mapper suites and every test written for Windows (the job object and the venv
  launcher: test_spawn.py; the peak watch's Windows reader and winmem: test_peakwatch.py,
  test_peak_latency.py), on the real kernel32 and psapi. ``-n N`` for pytest-xdist.
- ``collect``: ``pytest --collect-only`` of the whole suite: no module may fail at import on
  Windows.
- ``cpu-run``: the README's main job, ``python -m harness run`` (256 MiB, 4 processes; ``--model-size``
  and ``--processes`` change them) end to end with its report; passes when
  the run reached a verdict with every worker row, every output correct, the mapped workers on
  the mapped path of the Windows mapper, metadata.json saying Windows, its progress naming
  Windows (and Wine) before it starts and its results on their first line, and no figure that the
  OS refused (an empty figure must say why in the row's memory note). Extra arguments after
  ``--`` go to ``harness run`` (the ARM64 lane's private-bytes gates).
- ``qnn-doctor``: ``python -m harness doctor --target qnn --json DIR/doctor.json``: must reach a
  verdict (exit 0) and claim nothing from a log that was not captured.
- ``qnn-run``: a 4 MiB ``python -m harness run --target qnn``: exit 0 (ran), 1 (a worker or gate
  failed, recorded) or 2 (a one-line reason on stderr), never a traceback or a crash code.

Everything a step writes goes under ``--out`` (default ``windows-ci``): ``runs/cpu``,
``runs/qnn``, ``doctor.json``, ``qnn-run.stderr.txt``. Standard library only, so it runs before
anything is checked; it starts this interpreter (``sys.executable``) for pytest and the harness.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import platform
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: The tests written for Windows outside suites/mapper (run with the mapper suites).
WINDOWS_TESTS = [
    "suites/mapper",
    "suites/harness/test_spawn.py",
    "suites/harness/test_peakwatch.py",
    "suites/harness/test_peak_latency.py",
]
#: mapper: a test still running after this long has every thread's stack dumped (naming the test)
HUNG_TEST_S = 300
#: mapper: a session still running after this long has every thread of every pytest process dumped
HUNG_SESSION_S = 600
QNN_RUN = ["--target", "qnn", "--processes", "1", "--model-size", "4MiB", "--no-default-gates"]


def planned(args: argparse.Namespace) -> list[list[str]]:
    """The ``python`` argument lists ``args.step`` runs, in order: what the step does, read by
    suites/ci to replay a workflow's step (its harness and pytest options, its outputs)."""
    out = Path(args.out)
    pytest = ["-m", "pytest", "-p", "no:cacheprovider"]
    # cpu-run: the README's main job (`python -m harness run`, its defaults) unless told otherwise
    sizes = [*(["--model-size", args.model_size] if args.model_size else [])]
    sizes += ["--processes", args.processes] if args.processes else []
    return {
        "env": [["-c", ENV_CHECK], ["-c", QNN_CHECK]],
        "mapper": [[*pytest, *WINDOWS_TESTS, "-n", args.n, "-q", "-o", f"faulthandler_timeout={HUNG_TEST_S}"]],
        "collect": [[*pytest, "--collect-only", "-q", "suites"]],
        "cpu-run": [["-m", "harness", "run", *sizes, "--out", str(out / "runs" / "cpu"), *args.harness_args]],
        "qnn-doctor": [["-m", "harness", "doctor", "--target", "qnn", "--json", str(out / "doctor.json")]],
        "qnn-run": [["-m", "harness", "run", *QNN_RUN, "--out", str(out / "runs" / "qnn")]],
    }[args.step]


ENV_CHECK = (
    "import numpy, onnx, onnxruntime, psutil, pandas; print('numpy', numpy.__version__, 'onnx', onnx.__version__,"
    " 'onnxruntime', onnxruntime.__version__, 'psutil', psutil.__version__, 'pandas', pandas.__version__)"
)
QNN_CHECK = "import onnxruntime_qnn; print('onnxruntime-qnn', onnxruntime_qnn.__file__)"


def python(args: list[str], **kwargs) -> subprocess.CompletedProcess:
    """This interpreter with ``args``, from the checkout, standard input closed."""
    cmd = [sys.executable, *args]
    print("+", subprocess.list2cmdline(cmd), flush=True)
    return subprocess.run(cmd, cwd=ROOT, stdin=subprocess.DEVNULL, **kwargs)


def wine_version() -> str | None:
    """Wine's version when this Windows runs under Wine, else None."""
    from mapper_impl._winapi import wine_version as version

    return version()


def step_env(args: argparse.Namespace) -> int:
    print(f"python {sys.version} ({sys.executable})")
    print(f"platform {platform.platform()} machine {platform.machine()}")
    wine = wine_version()
    print(f"wine {wine}" if wine else "wine: no (native Windows)" if sys.platform == "win32" else "not Windows")
    done, _ = (python(cmd) for cmd in planned(args))
    return 0 if sys.platform == "win32" and done.returncode == 0 else 1


def step_mapper(args: argparse.Namespace) -> int:
    # the session past this, every thread of the controller and the workers is dumped (conftest.py)
    env = dict(os.environ, QNN_FMW_HUNG_SESSION_S=str(HUNG_SESSION_S))
    return python(planned(args)[0], env=env).returncode


def step_collect(args: argparse.Namespace) -> int:
    done = python(planned(args)[0], capture_output=True, text=True)
    lines = done.stdout.strip().splitlines()
    print("\n".join(lines[-15:]))
    if done.returncode != 0:
        print(done.stderr[-4000:])
        print(f"collect: pytest --collect-only exited {done.returncode}: a module fails at import on Windows")
        return 1
    return 0


#: The memory figures of a worker row: each is a number or empty with its reason in memory_note.
FIGURES = ("rss_bytes", "uss_bytes", "private_bytes", "peak_private_bytes", "peak_rss_bytes")


def check_cpu_run(out: Path, expected_rows: int) -> list[str]:
    """What is wrong with the cpu run in ``out`` (empty: nothing)."""
    problems = []
    meta = json.loads((out / "metadata.json").read_text(encoding="utf-8"))
    if meta.get("env", {}).get("system") != "Windows":
        problems.append(f"metadata.json says system {meta.get('env', {}).get('system')!r}, not Windows")
    if meta.get("env", {}).get("wine") != wine_version():
        problems.append(f"metadata.json says wine {meta.get('env', {}).get('wine')!r}, this is {wine_version()!r}")
    headline = json.loads((out / "headline.json").read_text(encoding="utf-8"))
    if not headline.get("verdict"):
        problems.append("headline.json has no verdict")
    if not (out / "report.html").is_file():
        problems.append("no report.html")
    with (out / "results.csv").open(newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    if len(rows) != expected_rows:
        problems.append(f"{len(rows)} worker rows, expected {expected_rows}")
    for row in rows:
        who = f"{row['mode']} worker {row['worker']} (N={row['processes']})"
        if row["output_ok"] != "True" or row["exit_code"] != "0" or row["error"]:
            problems.append(f"{who}: output_ok {row['output_ok']}, exit {row['exit_code']}, error {row['error']!r}")
        if row["path_taken"] != row["mode"]:
            problems.append(f"{who}: path_taken {row['path_taken']!r}")
        for figure in FIGURES:
            name = figure.removesuffix("_bytes").replace("_", " ")
            if (
                not row.get(figure)
                and "not measured" not in row["memory_note"]
                and "implausible" not in row["memory_note"]
            ):
                problems.append(f"{who}: {name} empty and the memory note does not say why: {row['memory_note']!r}")
    return problems


def platform_named() -> str:
    """How a run here names its platform first: "Windows under Wine 8.0" or "Windows"."""
    wine = wine_version()
    return f"Windows under Wine {wine}" if wine else "Windows"


def unnamed_platform(progress: str, results: str) -> list[str]:
    """What does not name this platform first: the results' first line, or the progress before it
    prepares the model (a library's import-time warning may come earlier: not the harness's)."""
    named = f"platform: {platform_named()}"
    problems = []
    first = next((line for line in results.splitlines() if line.strip()), "")
    if not first.startswith(named):
        problems.append(f"the first line of its results (stdout) does not name the platform: {first!r}")
    lines = progress.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith("preparing the ")), len(lines))
    if not any(line.startswith(named) for line in lines[:start]):
        problems.append(f"its progress (stderr) does not name the platform before it starts: {lines[:start][-3:]!r}")
    return problems


WHICH_MAPPER = "from mapper_impl._platform import create_mapper; print(type(create_mapper()).__name__)"


def step_cpu_run(args: argparse.Namespace) -> int:
    out = Path(args.out) / "runs" / "cpu"
    mapper = python(["-c", WHICH_MAPPER], capture_output=True, text=True)
    if mapper.stdout.strip() != "WindowsFileMapper":
        print(f"cpu-run: mapper_impl's mapper is {mapper.stdout.strip() or mapper.stderr!r}, not WindowsFileMapper")
        return 1
    done = python(planned(args)[0], capture_output=True, text=True, errors="replace")
    print(done.stderr + done.stdout, end="", flush=True)
    code = done.returncode
    if not (out / "results.csv").is_file():
        print(f"cpu-run: harness run exited {code} with no results.csv")
        return 1
    processes = json.loads((out / "metadata.json").read_text(encoding="utf-8"))["run"]["processes"]
    problems = [*unnamed_platform(done.stderr, done.stdout), *check_cpu_run(out, 2 * sum(processes))]
    for problem in problems:
        print(f"cpu-run: {problem}")
    if code != 0:
        print(f"cpu-run: harness run exited {code}")
    return 0 if code == 0 and not problems else 1


def step_qnn_doctor(args: argparse.Namespace) -> int:
    code = python(planned(args)[0]).returncode
    if code != 0:
        print(f"qnn-doctor: harness doctor exited {code}: it must reach a verdict (exit 0) on any machine")
        return 1
    return 0


def judge_qnn_run(code: int, stderr: str) -> str | None:
    """Why a tiny qnn run did not end with a verdict (None: it did). Exit 0 (ran), 1 (a worker
    or gate failed, recorded in the run folder) or 2 (a one-line reason) are verdicts; a
    traceback, a crash code (a negative NTSTATUS) or a failure without a reason are not."""
    reason = next((line for line in reversed(stderr.splitlines()) if line.strip()), "")
    if code not in (0, 1, 2):
        return f"harness run --target qnn exited {code}: expected 0, 1 or 2"
    if "Traceback" in stderr:
        return f"harness run --target qnn printed a traceback (exit {code})"
    if code != 0 and not reason:
        return f"harness run --target qnn exited {code} without a reason on stderr"
    return None


def step_qnn_run(args: argparse.Namespace) -> int:
    done = python(planned(args)[0], capture_output=True, text=True, encoding="utf-8", errors="replace")
    print(done.stdout[-4000:])
    print(done.stderr[-4000:])
    (Path(args.out) / "qnn-run.stderr.txt").write_text(done.stderr, encoding="utf-8")
    problem = judge_qnn_run(done.returncode, done.stderr)
    reason = next((line for line in reversed(done.stderr.splitlines()) if line.strip()), "")
    print(
        f"qnn-run: {problem}"
        if problem
        else f"qnn-run: exit {done.returncode}" + (f": {reason}" if done.returncode else "")
    )
    return 1 if problem else 0


STEPS = {
    "env": step_env,
    "mapper": step_mapper,
    "collect": step_collect,
    "cpu-run": step_cpu_run,
    "qnn-doctor": step_qnn_doctor,
    "qnn-run": step_qnn_run,
}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python .ci/windows_steps.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("step", choices=list(STEPS))
    parser.add_argument(
        "--out", default="windows-ci", help="folder for run folders and doctor.json (default windows-ci)"
    )
    parser.add_argument("-n", default="auto", help="mapper: pytest-xdist workers (default auto)")
    parser.add_argument("--model-size", help="cpu-run: --model-size (default: harness run's, 256MiB)")
    parser.add_argument("--processes", help="cpu-run: --processes (default: harness run's, 4)")
    argv = list(sys.argv[1:] if argv is None else argv)
    extra = argv[argv.index("--") + 1 :] if "--" in argv else []
    args = parser.parse_args(argv[: len(argv) - len(extra) - 1] if "--" in argv else argv)
    args.harness_args = extra  # cpu-run: more `harness run` arguments, after --
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    Path(args.out).mkdir(parents=True, exist_ok=True)
    args.out = str(Path(args.out).resolve())
    return STEPS[args.step](args)


if __name__ == "__main__":
    sys.exit(main())
