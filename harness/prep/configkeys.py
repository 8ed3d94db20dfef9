"""Which ``--session-config`` keys this ONNX Runtime can read at all.

Why: ORT's ``SessionOptions.add_session_config_entry`` accepts ANY key (checked with ORT 1.32:
``bogus.key`` is stored and returned) and each part of ORT reads only the keys it knows, so a
typo (``session.disable_prepackng=1``) is silently ignored while the run records it as if it
had been applied. No ORT API lists the keys. What does list them is the libraries themselves:
every key a part of ORT reads is a string constant in its binary. So a key that occurs as a
NUL-terminated string in none of the libraries of onnxruntime (and of the installed packages
named ``onnxruntime_*``: a plugin EP reads keys of its own, such as ``ep.share_ep_contexts``)
cannot be read by this build: the run
notes it as unverified ("no evidence it was applied"), in the terminal and the report. A key
found there is read by some part of ORT (whether by the part this run uses is not provable
from the binary: that is said too).
"""

from __future__ import annotations

import mmap
from functools import cache
from pathlib import Path

#: File names of native libraries a package may ship (Linux, Windows, macOS).
_LIBRARY_SUFFIXES = (".so", ".dll", ".dylib")


def _package_libraries(package: str) -> list[Path]:
    import importlib.util

    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return []
    found = []
    for folder in spec.submodule_search_locations:
        for path in Path(folder).rglob("*"):
            if path.is_file() and (path.suffix in _LIBRARY_SUFFIXES or ".so." in path.name):
                found.append(path)
    return sorted(found)


@cache
def runtime_libraries() -> tuple[Path, ...]:
    """The native libraries of onnxruntime and of every installed ``onnxruntime_*`` package
    (plugin EPs ship as such packages)."""
    import pkgutil

    names = sorted(m.name for m in pkgutil.iter_modules() if m.name.startswith("onnxruntime_") and m.ispkg)
    return tuple(path for name in ("onnxruntime", *names) for path in _package_libraries(name))


def _named_in(key: str, libraries: tuple[Path, ...]) -> bool:
    needle = b"\0" + key.encode("utf-8") + b"\0"
    for path in libraries:
        try:
            with open(path, "rb") as handle, mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as data:
                if data.find(needle) >= 0:
                    return True
        except (OSError, ValueError):  # an empty or unreadable file names nothing
            continue
    return False


def unread_keys(keys: list[str]) -> list[str]:
    """The keys no library of this ONNX Runtime names (so none can read them); [] when the
    libraries cannot be found (nothing is claimed either way then). No keys, no search: finding
    the libraries lists every installed package (40 ms, in every run's metadata)."""
    if not keys:
        return []
    libraries = runtime_libraries()
    if not libraries:
        return []
    return [key for key in keys if not _named_in(key, libraries)]
