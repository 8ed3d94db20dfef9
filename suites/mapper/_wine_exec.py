"""Executor A of the Wine differential tests: the scenarios of `wine_scenarios` run through the
Python mapper (`mapper_impl/_windows.py`, `_winapi.py`) over the fake kernel32.

The fake's observer sees every kernel32 call with the arguments the Python code passed; it
records the outcome in the very shape the C probe prints (ok, last error, bytes read and their
digest, size, file id, granularity) and writes the call as a line of the probe's replay trace,
handles replaced by the index of the call that made them, paths in their Wine form (``Z:``).
Executor B (`_wine_probe.c replay`) then makes the same calls with the same flags, in the same
order, under Wine.
"""

from __future__ import annotations

import ctypes
import gc
import ntpath
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from _fake_kernel32 import EXTRA_SIGNATURES, INVALID, FakeKernel32, weights
from wine_scenarios import Scenario

from mapper_impl import _windows as win
from mapper_impl._common import MapperError
from mapper_impl._winapi import FILE_ATTRIBUTE_NORMAL
from mapper_impl._windows import Win32Error, WindowsFileMapper, win32_path

NO_SLOT = 4095  # a probe slot never written: a handle the fake never gave out is NULL there
_CREATES = ("CreateFileW", "CreateFileMappingW", "MapViewOfFile")


def fnv(data: bytes) -> str:
    """64-bit FNV-1a, as the probe computes it: equal digests, equal bytes."""
    h = 1469598103934665603
    for byte in data:
        h = ((h ^ byte) * 1099511628211) & 0xFFFFFFFFFFFFFFFF
    return f"{h:016x}"


def wine_path(path: str) -> str:
    """A POSIX path, or its ``\\\\?\\`` form, as Wine names it: through drive Z: (the root)."""
    if path.startswith("\\\\?\\"):
        return "\\\\?\\Z:" + path[4:]
    return "Z:" + path.replace("/", "\\")


@dataclass
class Run:
    """One scenario through executor A: each step's result, each call's outcome and trace."""

    scenario: Scenario
    results: list[str] = field(default_factory=list)
    outcomes: list[dict] = field(default_factory=list)
    trace: list[str] = field(default_factory=list)


def prepare(folder: Path, scenario: Scenario) -> Path:
    """The scenario's folder with its files (deterministic bytes), links and permissions,
    created afresh: both executors start from the same files."""
    base = folder / scenario.name
    if base.exists():
        unlock(base)
        shutil.rmtree(base)
    base.mkdir(parents=True)
    for seed, (name, size) in enumerate(scenario.files):
        path = base / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if size:
            weights(path, size, seed=seed)
        else:
            path.write_bytes(b"")
    for new, existing in scenario.links:
        os.link(base / existing, base / new)
    if scenario.readonly:
        for path in base.rglob("*"):
            path.chmod(0o444)
        base.chmod(0o555)
    return base


def unlock(base: Path) -> None:
    """Write permission back, so the folder can be cleaned."""
    base.chmod(0o755)
    for path in base.rglob("*"):
        path.chmod(0o755 if path.is_dir() else 0o644)


class _Recorder:
    """The fake's observer: outcome and trace line of each call, as the probe has them."""

    def __init__(self, fake: FakeKernel32, run: Run) -> None:
        self.fake, self.run = fake, run
        self.refs: dict[int, int] = {}  # handle or view address -> index of the call made it

    def ref(self, value: object) -> str:
        return str(self.refs.get(value, NO_SLOT)) if value is not None else str(NO_SLOT)

    def __call__(self, name: str, values: list, result: object) -> None:
        index = len(self.run.outcomes)
        ok = result not in (None, 0, INVALID) if name in _CREATES else (name == "GetSystemInfo" or bool(result))
        outcome = {"i": index, "call": name, "ok": ok, "err": 0 if ok else self.fake.last_error}
        outcome.update(_extra(name, values, ok))
        self.run.outcomes.append(outcome)
        self.run.trace.append("\t".join([str(index), name, *self._args(name, values)]))
        if name in _CREATES and ok:
            self.refs[result] = index

    def peek(self, address: int, offset: int, n: int) -> None:
        """Not a kernel32 call: read a view's memory (the probe reads the same bytes)."""
        index = len(self.run.outcomes)
        data = ctypes.string_at(address + offset, n)
        self.run.outcomes.append({"i": index, "call": "PEEK", "ok": True, "err": 0, "n": n, "digest": fnv(data)})
        self.run.trace.append("\t".join([str(index), "PEEK", self.ref(address), str(offset), str(n)]))

    def _args(self, name: str, v: list) -> list[str]:
        ref = self.ref
        if name == "CreateFileW":  # path, access, share, security, disposition, flags, template
            return [wine_path(v[0]), str(v[1]), str(v[2]), str(v[4]), str(v[5])]
        if name == "GetFileInformationByHandleEx":
            return [ref(v[0]), str(v[1]), str(v[3])]
        if name == "ReadFile":
            overlapped = v[4]
            return [ref(v[0]), str(v[2]), str((overlapped.OffsetHigh << 32) | overlapped.Offset)]
        if name == "CreateFileMappingW":
            return [ref(v[0]), str(v[2]), str(v[3]), str(v[4])]
        if name == "MapViewOfFile":
            return [ref(v[0]), *(str(x) for x in v[1:])]
        if name == "MoveFileExW":
            return [wine_path(v[0]), wine_path(v[1]), str(v[2])]
        if name == "DeleteFileW":
            return [wine_path(v[0])]
        if name == "GetSystemInfo":
            return []
        return [ref(v[0])]  # GetFileSizeEx, GetFileInformationByHandle, Unmap, Close, SetEndOfFile


def _extra(name: str, v: list, ok: bool) -> dict:
    """The fields the probe prints beside ok and err for this call."""
    if name == "GetSystemInfo":
        return {"granularity": v[0].dwAllocationGranularity}
    if name == "GetFileSizeEx" and ok:
        return {"size": v[1].value}
    if name == "GetFileInformationByHandleEx" and ok:
        ids = win.FILE_ID_INFO.from_address(v[2])
        return {"id": f"{ids.VolumeSerialNumber:x}:{fnv(bytes(ids.FileId))}"}
    if name == "ReadFile":
        n = v[3].value if ok else 0
        return {"n": n, "digest": fnv(ctypes.string_at(v[1], n))}
    return {}


class _Executor:
    """Runs one scenario's steps; each step's result is ``ok``, ``false`` (a False return),
    ``err:<code>`` (another process's failed call) or the exception's class name."""

    def __init__(self, base: Path, run: Run) -> None:
        self.base, self.run = base, run
        self.fake = FakeKernel32()
        for name, (argtypes, restype) in EXTRA_SIGNATURES.items():
            function = getattr(self.fake, name)
            function.argtypes, function.restype = argtypes, restype
        self.recorder = _Recorder(self.fake, run)
        self.fake.observer = self.recorder
        self.vars: dict[str, object] = {}
        self.mapper: WindowsFileMapper | None = None
        self.api = None

    def native(self, name: str, prefixed: bool = True) -> str:
        """The path a Windows program passes for ``name`` (see `wine_scenarios`)."""
        if name.startswith("raw:"):
            return str(self.base / name[4:])
        if name.startswith("?:"):
            return "\\\\?\\" + ntpath.abspath(str(self.base / name[2:]))
        return win32_path(str(self.base / name)) if prefixed else str(self.base / name)

    def step(self, op: str, *args: object) -> str:
        if self.mapper is None:  # its constructor's GetSystemInfo is the scenario's first call
            self.mapper = WindowsFileMapper(kernel32=self.fake, get_last_error=self.fake.get_last_error)
            self.api = self.mapper._api
        try:
            result = getattr(self, "_" + op)(*args)
        except (Win32Error, MapperError) as err:
            return type(err).__name__
        return "ok" if result in (None, True) else result

    def _granularity(self) -> None:
        self.api.allocation_granularity()

    def _map(self, var: str, name: str) -> None:
        self.vars[var] = self.mapper.map_file(self.native(name, prefixed=False))

    def _identity(self, var: str, name: str) -> None:
        self.vars[var] = self.mapper.identity_of_path(self.native(name, prefixed=False))

    def _peek(self, var: str, offset: int, n: int) -> None:
        target = self.vars[var]
        self.recorder.peek(getattr(target, "base_address", target), offset, n)

    def _release(self, var: str) -> bool | str:
        return self.vars.pop(var).close() or "false"

    def _open(self, var: str, name: str, share: int) -> None:
        self.vars[var] = self.api.open_file(self.native(name), share)

    def _mapping(self, var: str, file: str) -> None:
        self.vars[var] = self.api.create_mapping(self.vars[file])

    def _view(self, var: str, mapping: str, offset: int, length: int) -> None:
        self.vars[var] = self.api.map_view(self.vars[mapping], offset, length)

    def _unmap(self, var: str) -> bool | str:
        return self.api.unmap(self.vars[var]) or "false"

    def _close(self, var: str) -> bool | str:
        return self.api.close(self.vars[var]) or "false"

    def _read(self, file: str, offset: int, n: int) -> None:
        self.api.read_at(self.vars[file], offset, n)

    def _file_id(self, file: str) -> None:
        self.api.file_id_info(self.vars[file])

    def _other(self, var: str, name: str, access: int, share: int) -> str | None:
        handle = self.fake.CreateFileW(
            self.native(name), access, share, None, win.OPEN_EXISTING, FILE_ATTRIBUTE_NORMAL, None
        )
        self.vars[var] = handle
        return self._failed() if handle in (None, INVALID) else None

    def _truncate(self, file: str) -> str | None:
        return None if self.fake.SetEndOfFile(self.vars[file]) else self._failed()

    def _move(self, source: str, target: str) -> str | None:
        ok = self.fake.MoveFileExW(self.native(source), self.native(target), 1)  # MOVEFILE_REPLACE_EXISTING
        return None if ok else self._failed()

    def _delete(self, name: str) -> str | None:
        return None if self.fake.DeleteFileW(self.native(name)) else self._failed()

    def _failed(self) -> str:
        return f"err:{self.fake.last_error}"

    def finish(self) -> None:
        """Close what the scenario left open; every handle and view of the fake must be gone."""
        for value in self.vars.values():
            if hasattr(value, "close") and not getattr(value, "closed", True):
                value.close()
        self.vars.clear()
        gc.collect()
        self.fake.observer = None
        for view in [*self.fake.unmapped, *self.fake.views.values()]:
            view.close()
        self.fake.assert_all_closed()


def run_scenario(folder: Path, scenario: Scenario) -> Run:
    """Executor A for one scenario, in ``folder/<name>`` (prepared afresh)."""
    run = Run(scenario)
    base = prepare(folder, scenario)
    executor = _Executor(base, run)
    try:
        for op, *args in scenario.steps:
            run.results.append(executor.step(op, *args))
    finally:
        executor.finish()
    return run


def trace_text(runs: list[Run]) -> str:
    """The probe's replay input: a SCENARIO line, then one line per call."""
    lines = []
    for run in runs:
        lines.append(f"SCENARIO\t{run.scenario.name}")
        lines.extend(run.trace)
    return "\n".join(lines) + "\n"


def group_by_scenario(lines: list[dict]) -> dict[str, list[dict]]:
    """The probe's JSON lines, per scenario."""
    grouped: dict[str, list[dict]] = {}
    current: list[dict] = []
    for line in lines:
        if "scenario" in line:
            current = grouped.setdefault(line["scenario"], [])
        else:
            current.append(line)
    return grouped


def normalised(outcomes: list[dict]) -> list[dict]:
    """File ids replaced by labels in order of appearance: the fake's ids (st_dev, st_ino) and
    Wine's differ in value; which calls see the same file is what must agree."""
    labels: dict[str, str] = {}
    out = []
    for outcome in outcomes:
        outcome = dict(outcome)
        if "id" in outcome:
            outcome["id"] = labels.setdefault(outcome["id"], f"file{len(labels)}")
        out.append(outcome)
    return out
