"""Which ``--session-config`` keys this ORT can read: one in no library's strings cannot be (ORT accepts any key)."""

from __future__ import annotations

import mmap
from functools import cache
from pathlib import Path

_LIBRARY_SUFFIXES = (".so", ".dll", ".dylib")  #: Native library suffixes (Linux, Windows, macOS).


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
    """The native libraries of onnxruntime and of every installed ``onnxruntime_*`` package."""
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
    """The keys no library of this ORT names; [] when the libraries cannot be found (no keys: no search)."""
    if not keys:
        return []
    libraries = runtime_libraries()
    if not libraries:
        return []
    return [key for key in keys if not _named_in(key, libraries)]
