"""The file-mapping strings of onnxruntime-qnn's provider library, one fixture per release and
platform (`harness/targets/qnn/data`), so `eplog.PATTERNS` cannot drift from the real messages
unnoticed: a release that rewords one would turn a verdict into "unknown". Refresh: ``--fetch``.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import re
import shlex
import subprocess
import sys
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from harness.core.errors import RegistryUnreachable, StringsError
from harness.targets.qnn.eplog import IGNORED, LINUX, PATTERNS, WIN, WIN_X64, LogPattern
from harness.targets.qnn.epselect import MIN_LEN, SELECT_TERMS, select, select_library, strings_at

__all__ = ["MIN_LEN", "SELECT_TERMS", "select", "strings_at"]  # re-exported: the selection rule lives in epselect

LIBRARY_NAMES = {
    WIN: "onnxruntime_providers_qnn.dll",
    LINUX: "libonnxruntime_providers_qnn.so",
    WIN_X64: "onnxruntime_providers_qnn.dll",
}
#: the pip platform tag of each Windows wheel
WHEEL_PLATFORMS = {WIN: "win_arm64", WIN_X64: "win_amd64"}
PROVENANCE_KEYS = ("platform", "version", "qnn-sdk", "source", "source-sha256", "library", "library-sha256")
FIXTURE_DIR = Path(__file__).resolve().parent / "data"  # inside the package: an installed harness has no suites/
_NETWORK_ERRORS = re.compile(
    r"NewConnectionError|Max retries exceeded|Temporary failure in name resolution|"
    r"Network is unreachable|Connection refused|ConnectTimeout|ReadTimeout|"
    r"timed out|Could not fetch URL|ProxyError|SSLError|No route to host",
    re.I,
)


@dataclass
class StringsList:
    """The selected strings of one provider library, with where they came from."""

    platform: str  # WIN or LINUX
    strings: list[str]
    header: dict[str, str] = field(default_factory=dict)  # provenance, written as '# key: value'


def printable_strings(data: bytes, min_len: int = MIN_LEN) -> list[str]:
    """Runs of >= min_len printable ASCII characters or tabs: GNU ``strings -a -n 8``."""
    return [text for _, text in strings_at(data, min_len)]


def _platform_of(name: str) -> str:
    if "win_amd64" in name:
        return WIN_X64
    if name.endswith(".dll") or "win_arm64" in name:
        return WIN
    if name.endswith(".so") or "linux_x86_64" in name:
        return LINUX
    raise StringsError(f"{name}: neither a win_arm64, win_amd64 nor a linux x86_64 onnxruntime-qnn wheel or library")


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _wheel_version(name: str) -> str:
    parts = name.split("-")
    return parts[1] if len(parts) > 2 else ""


def extract(path: Path) -> StringsList:
    """Read a wheel (zip) or a provider library file and select its file-mapping strings."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as err:
        raise StringsError(f"cannot read {path}: {err.strerror}") from err
    if path.suffix == ".whl":
        return _from_wheel(path, raw)
    platform = _platform_of(path.name)
    header = {
        "platform": platform,
        "source": path.name,
        **_installed_provenance(path),
        "library": path.name,
        "library-sha256": _sha256(raw),
    }
    return StringsList(platform, select_library(raw), header)


def _from_wheel(path: Path, raw: bytes) -> StringsList:
    platform = _platform_of(path.name)
    try:
        with zipfile.ZipFile(io.BytesIO(raw)) as z:
            members = [n for n in z.namelist() if n.rsplit("/", 1)[-1] == LIBRARY_NAMES[platform]]
            if not members:
                raise StringsError(f"{path.name}: no {LIBRARY_NAMES[platform]} inside")
            lib = z.read(members[0])
            info = [n for n in z.namelist() if n.endswith("onnxruntime_qnn/build_and_package_info.py")]
            sdk = _qnn_sdk(z.read(info[0]).decode("utf-8", "replace")) if info else ""
    except zipfile.BadZipFile as err:
        raise StringsError(f"{path.name} is not a wheel (zip): {err}") from err
    header = {
        "platform": platform,
        "version": _wheel_version(path.name),
        "qnn-sdk": sdk,
        "source": path.name,
        "source-sha256": _sha256(raw),
        "library": members[0],
        "library-sha256": _sha256(lib),
    }
    return StringsList(platform, select_library(lib), header)


def _qnn_sdk(build_info: str) -> str:
    m = re.search(r"qnn_version\s*=\s*['\"]([^'\"]+)", build_info)
    return m.group(1) if m else ""


def _installed_provenance(lib: Path) -> dict[str, str]:
    """For a library inside an installed onnxruntime-qnn: its version, QNN SDK and wheel tag."""
    try:
        sdk = _qnn_sdk((lib.parent / "build_and_package_info.py").read_text(encoding="utf-8"))
    except OSError:
        sdk = ""
    for info in sorted(lib.parent.parent.glob("onnxruntime_qnn-*.dist-info")):
        try:
            tags = [
                ln.split(":", 1)[1].strip() for ln in (info / "WHEEL").read_text().splitlines() if ln.startswith("Tag:")
            ]
        except OSError:
            continue
        version = info.name[len("onnxruntime_qnn-") : -len(".dist-info")]
        return {
            "version": version,
            "qnn-sdk": sdk,
            "source": f"installed onnxruntime-qnn {version} (wheel tag {', '.join(tags)})",
        }
    return {}


# ----------------------------------------------------------------------------- fixtures


def fixture_name(version: str, platform: str) -> str:
    """harness/targets/qnn/data file name: the win_arm64 list keeps the reference's name (the
    others name their platform)."""
    return (
        f"onnxruntime-qnn-{version}-ep-strings.txt"
        if platform == WIN
        else f"onnxruntime-qnn-{version}-{platform}-ep-strings.txt"
    )


def find_fixture(version: str, platform: str, folder: Path = FIXTURE_DIR) -> Path | None:
    path = Path(folder) / fixture_name(version, platform)
    return path if path.is_file() else None


def missing_fixture_message(version: str, platform: str) -> str:
    """What a new onnxruntime-qnn release needs before its verdicts can be trusted."""
    return (
        f"no strings fixture for onnxruntime-qnn {version} ({platform}): {fixture_name(version, platform)} "
        f"is missing in harness/targets/qnn/data. Generate it (on Linux x86_64 with onnxruntime-qnn=={version} "
        f"installed, network to the package index): python -m harness.targets.qnn.epstrings --fetch "
        f"--version {version}; then fix eplog.PATTERNS / eplog.IGNORED until the strings tests pass and "
        f"commit the fixture(s)"
    )


def _reproduce(lst: StringsList) -> list[str]:
    version = lst.header.get("version", "VERSION")
    if lst.platform in WHEEL_PLATFORMS:
        return [
            f"pip download --no-deps --only-binary=:all: --platform {WHEEL_PLATFORMS[lst.platform]} "
            f"--python-version 3.11 onnxruntime-qnn=={version} -d DIR",
            f"python -m harness.targets.qnn.epstrings --extract-strings DIR/{lst.header.get('source', 'WHEEL')} "
            f"--out FILE",
        ]
    return [
        f"pip install onnxruntime-qnn=={version}  (Linux x86_64)",
        "python -m harness.targets.qnn.epstrings --extract-strings "
        "SITE_PACKAGES/onnxruntime_qnn/libonnxruntime_providers_qnn.so --out FILE",
    ]


def render_fixture(lst: StringsList) -> str:
    lib = lst.header.get("library", LIBRARY_NAMES[lst.platform])
    lines = [
        f"# File-mapping strings of {lib} ({lst.header.get('source', '?')}).",
        *(f"# {k}: {lst.header[k]}" for k in PROVENANCE_KEYS if k in lst.header),
        f"# selection: printable ASCII runs of >= {MIN_LEN} characters (strings -a -n {MIN_LEN}) containing, "
        f"case-insensitively, any of: {', '.join(repr(t) for t in SELECT_TERMS)}; plus, in a Windows DLL, the "
        "literal pools of the mapper and DMA functions by position (harness/targets/qnn/epselect.py)",
        *(f"# reproduce: {cmd}" for cmd in _reproduce(lst)),
        "# Every line after this header is one string, verbatim (leading/trailing spaces included).",
    ]
    return "\n".join(lines + lst.strings) + "\n"


def write_fixture(lst: StringsList, out: Path) -> Path:
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    from harness.core.files import write_text_atomic

    render_fixture(lst).encode("ascii")  # the fixture is ASCII: refused here, not half written
    write_text_atomic(out, render_fixture(lst), newline="\n", what="--out")  # never through a link
    return out


def read_fixture(path: Path) -> StringsList:
    lines = Path(path).read_text(encoding="ascii").split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    n = 0
    header: dict[str, str] = {}
    while n < len(lines) and lines[n].startswith("#"):
        key, sep, value = lines[n][1:].strip().partition(": ")
        if sep and " " not in key:
            header[key] = value
        n += 1
    if header.get("platform") not in LIBRARY_NAMES:
        raise StringsError(f"{path}: no '# platform: {'|'.join(LIBRARY_NAMES)}' header line")
    return StringsList(header["platform"], lines[n:], header)


# ----------------------------------------------------------------------------- checks


def _ignored(s: str) -> str | None:
    return next((reason for rx, reason in IGNORED if re.fullmatch(rx, s)), None)


def check(lst: StringsList, patterns: Sequence[LogPattern] = PATTERNS) -> list[str]:
    """Problems of eplog against one library's strings: a pattern's literal part that is not one
    of them, a string no pattern reads and IGNORED does not list (empty list: all good)."""
    have = set(lst.strings)
    problems = [
        f"pattern {p.name!r}: {frag!r} is not a string of {lst.platform} {lst.header.get('source', '')}"
        for p in patterns
        if lst.platform in p.platforms
        for frag in p.fragments
        if frag not in have
    ]
    fragments = {frag for p in patterns for frag in p.fragments}
    problems += [
        f"string {s!r} of {lst.platform} is neither read by a pattern nor listed in eplog.IGNORED"
        for s in lst.strings
        if s not in fragments and _ignored(s) is None
    ]
    return problems


def unused_ignored(lists: Sequence[StringsList]) -> list[str]:
    """IGNORED entries that match no string of any of the lists (stale after a release)."""
    strings = [s for lst in lists for s in lst.strings]
    return [rx for rx, _ in IGNORED if not any(re.fullmatch(rx, s) for s in strings)]


# ----------------------------------------------------------------------------- download


def installed_version() -> str | None:
    from importlib import metadata

    try:
        return metadata.version("onnxruntime-qnn")
    except metadata.PackageNotFoundError:
        return None


def installed_library() -> Path | None:
    """The provider library of the installed onnxruntime-qnn, found without importing it."""
    from importlib import util

    spec = util.find_spec("onnxruntime_qnn")
    if spec is None or not spec.submodule_search_locations:
        return None
    for folder in spec.submodule_search_locations:
        for name in LIBRARY_NAMES.values():
            if (Path(folder) / name).is_file():
                return Path(folder) / name
    return None


def download_command(version: str, dest: Path, platform: str = WIN) -> list[str]:
    options = f"--no-deps --only-binary=:all: --platform {WHEEL_PLATFORMS[platform]} --python-version 3.11"
    pip = [sys.executable, "-m", "pip", "download", *options.split(), f"onnxruntime-qnn=={version}"]
    return [*pip, "-d", str(dest), "--disable-pip-version-check", "--quiet"]


def download_wheel(version: str, dest: Path, *, timeout_s: float = 300.0, platform: str = WIN) -> Path:
    """The win_arm64 (or win_amd64) wheel of `version`, through pip (its index, proxy and cache
    settings)."""
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    cmd = download_command(version, dest, platform)
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as err:
        raise RegistryUnreachable(f"pip download did not finish in {timeout_s:.0f} s") from err
    wheels = sorted(dest.glob(f"onnxruntime_qnn-{version}-*{WHEEL_PLATFORMS[platform]}.whl"))
    if proc.returncode == 0 and wheels:
        return wheels[0]
    tail = " | ".join((proc.stderr or proc.stdout).strip().splitlines()[-3:])
    if _NETWORK_ERRORS.search(proc.stderr or ""):
        raise RegistryUnreachable(f"package index unreachable: {tail}")
    raise StringsError(f"{shlex.join(cmd[1:])} failed (exit {proc.returncode}): {tail}")


def fetch(version: str, out_dir: Path, work: Path) -> list[Path]:
    """Write the fixtures of `version`: the downloaded win_arm64 and win_amd64 DLLs and, when it
    is the installed version on Linux x86_64, the installed library."""
    written = [
        write_fixture(extract(download_wheel(version, work, platform=p)), out_dir / fixture_name(version, p))
        for p in WHEEL_PLATFORMS
    ]
    lib = installed_library()
    if lib is not None and lib.suffix == ".so" and installed_version() == version:
        lst = extract(lib)
        written.append(write_fixture(lst, out_dir / fixture_name(version, LINUX)))
    return written


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m harness.targets.qnn.epstrings",
        description="file-mapping strings of onnxruntime-qnn's provider library",
    )
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument("--extract-strings", metavar="WHEEL_OR_LIBRARY", type=Path)
    what.add_argument("--fetch", action="store_true", help="download the Windows wheels and write every fixture")
    parser.add_argument("--out", type=Path, help="fixture file to write (default: stdout)")
    parser.add_argument("--out-dir", type=Path, default=FIXTURE_DIR, help="--fetch: where the fixtures go")
    parser.add_argument("--version", help="--fetch: onnxruntime-qnn version (default: the installed one)")
    args = parser.parse_args(argv)
    try:
        if args.extract_strings:
            lst = extract(args.extract_strings)
            problems = check(lst)
            if args.out:
                print(write_fixture(lst, args.out))
            else:
                sys.stdout.write(render_fixture(lst))
        else:
            import tempfile

            version = args.version or installed_version()
            if not version:
                print("error: onnxruntime-qnn is not installed: pass --version", file=sys.stderr)
                return 2
            with tempfile.TemporaryDirectory() as work:
                paths = fetch(version, args.out_dir, Path(work))
            print("\n".join(map(str, paths)))
            problems = [p for path in paths for p in check(read_fixture(path))]
    except StringsError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    for p in problems:
        print(f"warning: {p}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
