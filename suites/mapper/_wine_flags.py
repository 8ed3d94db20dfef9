"""The call sequence cannot drift: `_winapi.py`'s constants and structures checked against
mingw's windows.h, and the mapper's mapping calls against the probe's own statement of the
upstream sequence (`_wine_probe.c upstream`, written with windows.h's constants).

`header_check` turns a `_winapi` module (the real one or a changed copy) into C static
assertions: every constant the module defines equals the windows.h macro of the same name,
every structure has windows.h's size and field offsets. Compiling it with mingw needs no Wine
and fails, naming the constant, as soon as one value differs.
"""

from __future__ import annotations

import ast
import ctypes
import importlib.util
import subprocess
import types

#: `_winapi` names that are not windows.h macros: what they stand for there.
WINDOWS_NAMES = {
    "FILE_ID_INFO_CLASS": "FileIdInfo",
    "FILE_SHARE_ALL": "(FILE_SHARE_READ | FILE_SHARE_WRITE | FILE_SHARE_DELETE)",
    "INVALID_HANDLE_VALUE": "(ULONG_PTR)INVALID_HANDLE_VALUE",
    "JOB_OBJECT_EXTENDED_LIMIT_INFORMATION_CLASS": "JobObjectExtendedLimitInformation",
    "JOB_OBJECT_ASSOCIATE_COMPLETION_PORT_INFORMATION_CLASS": "JobObjectAssociateCompletionPortInformation",
}
#: What mingw's headers lack, declared as Microsoft documents it: PROCESS_MEMORY_COUNTERS_EX2
#: (learn.microsoft.com/windows/win32/api/psapi/ns-psapi-process_memory_counters_ex2).
PRELUDE = """#include <windows.h>
#include <stddef.h>
#include <psapi.h>
typedef struct {
    DWORD cb; DWORD PageFaultCount; SIZE_T PeakWorkingSetSize; SIZE_T WorkingSetSize;
    SIZE_T QuotaPeakPagedPoolUsage; SIZE_T QuotaPagedPoolUsage; SIZE_T QuotaPeakNonPagedPoolUsage;
    SIZE_T QuotaNonPagedPoolUsage; SIZE_T PagefileUsage; SIZE_T PeakPagefileUsage; SIZE_T PrivateUsage;
    SIZE_T PrivateWorkingSetSize; ULONG64 SharedCommitUsage;
} PROCESS_MEMORY_COUNTERS_EX2;"""
#: The calls of one mapping, in upstream's order: what the probe's "upstream" mode makes.
MAPPING_CALLS = ("CreateFileW", "CreateFileMappingW", "MapViewOfFile", "CloseHandle", "UnmapViewOfFile")
_KIND = {"CreateFileW": "file", "CreateFileMappingW": "mapping", "MapViewOfFile": "view"}


def load_copy(source: str, name: str = "mapper_impl._winapi_copy") -> types.ModuleType:
    """A module made from (changed) `_winapi` source, beside the real one: the source file is
    never edited."""
    module = importlib.util.module_from_spec(importlib.util.spec_from_loader(name, loader=None))
    module.__package__ = "mapper_impl"
    exec(compile(source, f"<{name}>", "exec"), module.__dict__)  # noqa: S102 - our own source
    return module


def _own_names(source: str) -> list[str]:
    """Names the module assigns at top level (not those it imports)."""
    names = []
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign):
            names += [t.id for t in node.targets if isinstance(t, ast.Name)]
        elif isinstance(node, ast.ClassDef):
            names.append(node.name)
    return names


def header_check(module: types.ModuleType, source: str) -> str:
    """C source of static assertions: `module`'s constants and structures equal windows.h's."""
    lines = [PRELUDE]
    for name in _own_names(source):
        value = getattr(module, name)
        if name.startswith("_"):  # private helpers (the FILETIME epoch) are not windows.h names
            continue
        if name.isupper() and isinstance(value, int) and not isinstance(value, bool):
            c_name = WINDOWS_NAMES.get(name, name)
            lines.append(
                f'_Static_assert((unsigned long long)({c_name}) == {value & 0xFFFFFFFFFFFFFFFF}ULL, "_winapi.{name} ='
                f' {value:#x}: windows.h differs");'
            )
        elif isinstance(value, type) and issubclass(value, ctypes.Structure):
            lines.append(
                f"_Static_assert(sizeof({name}) == {ctypes.sizeof(value)},"
                f' "_winapi.{name}: size differs from windows.h");'
            )
            for field, *_ in value._fields_:
                offset = getattr(value, field).offset
                lines.append(
                    f'_Static_assert(offsetof({name}, {field}) == {offset}, "_winapi.{name}.{field}: offset differs");'
                )
    return "\n".join(lines) + "\n"


def compile_check(gcc: str, c_source: str) -> subprocess.CompletedProcess:
    """mingw's verdict on the assertions (syntax only: nothing is built or run)."""
    return subprocess.run(
        [gcc, "-fsyntax-only", "-x", "c", "-"], input=c_source, capture_output=True, text=True, timeout=120
    )


def mapping_sequence(trace: list[str], outcomes: list[dict]) -> list[dict]:
    """The mapping calls of an executor-A trace, as the probe's "upstream" mode prints them:
    the call, its flags (handles named by what made them) and whether it succeeded."""
    kinds: dict[str, str] = {}
    sequence = []
    for line, outcome in zip(trace, outcomes, strict=True):
        index, call, *args = line.split("\t")
        if call in _KIND:
            kinds[index] = _KIND[call]
        if call not in MAPPING_CALLS:
            continue
        # CreateFileW: access, share, disposition, attributes (after the path); the mapping
        # calls: their flags and sizes (after the handle); CloseHandle, Unmap: what they close.
        flags = [int(x) for x in args[1:]] if call in _KIND else [kinds.get(args[0], "?")]
        sequence.append({"call": call, "args": flags, "ok": outcome["ok"], "err": outcome["err"]})
    return sequence
