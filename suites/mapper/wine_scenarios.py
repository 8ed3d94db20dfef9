"""The Windows scenarios of the fake kernel32, written once as data for two executors.

Executor A (`_wine_exec.py`) runs each scenario through the Python mapper
(`mapper_impl/_windows.py`, `_winapi.py`) over the fake kernel32 and records every kernel32
call it makes, with its flags, and every outcome (return, last error, bytes read). Executor B
(`_wine_probe.c replay`, compiled with mingw at test time) replays exactly those calls under
Wine's kernel32. `test_wine_differential.py` compares the two outcome by outcome; a
difference is either fixed in the fake or listed in `KNOWN_WINE_DEVIATIONS`, with the reason
and Microsoft's documentation.

A step is a tuple; names are files in the scenario's own folder. A name ``?:f`` is the
``\\\\?\\`` form of ``f``; ``raw:f`` is ``f``'s path as given, never prefixed (``open`` and
``other`` otherwise pass what the mapper would: `win32_path`).

- ``("granularity",)``: GetSystemInfo through `Kernel32`.
- ``("map", var, name)``, ``("identity", var, name)``: the mapper's own `map_file` /
  `identity_of_path`; ``("peek", var, offset, n)`` reads a view; ``("release", var)`` closes a
  mapping (UnmapViewOfFile).
- ``("open", var, name, share)``, ``("mapping", var, file)``, ``("view", var, mapping,
  offset, length)``, ``("unmap", view)``, ``("close", var)``, ``("read", file, offset, n)``,
  ``("file_id", file)``: one `Kernel32` method each, with the mapper's flags.
- ``("other", var, name, access, share)``, ``("truncate", file)``, ``("move", source,
  target)``, ``("delete", name)``: another process's calls (CreateFileW with its own flags,
  SetEndOfFile, MoveFileExW with MOVEFILE_REPLACE_EXISTING, DeleteFileW).

``expect`` is each step's result in executor A: ``ok``, the exception's class name, or
``err:<code>`` for a failed call of another process, as Microsoft documents it.
"""

from __future__ import annotations

from dataclasses import dataclass

READ, WRITE, DELETE = 0x80000000, 0x40000000, 0x00010000  # GENERIC_READ, GENERIC_WRITE, DELETE
SHARE_READ, SHARE_WRITE, SHARE_DELETE = 1, 2, 4
SIZE = 200_000  # > 3 * 64 KiB: offsets 64 Ki and 192 Ki fall inside, 256 Ki past the end
#: Over MAX_PATH (260 UTF-16 units) in any temporary folder, each part under NAME_MAX.
LONG = "d" * 100 + "/" + "e" * 100 + "/" + "f" * 80 + ".bin"
NON_ASCII = "modèle_ß_漢字_😀.bin"


@dataclass(frozen=True)
class Scenario:
    name: str
    topic: str  # what of the fake it checks
    steps: tuple[tuple, ...]
    expect: tuple[str, ...]
    files: tuple[tuple[str, int], ...] = (("f", SIZE),)
    links: tuple[tuple[str, str], ...] = ()  # (new name, existing name): hard links
    readonly: bool = False  # the folder and its files without write permission


SCENARIOS: tuple[Scenario, ...] = (
    Scenario(
        "map_whole_file",
        "the upstream sequence: open, mapping, one whole view, both handles closed",
        (
            ("granularity",),
            ("map", "m", "f"),
            ("peek", "m", 0, 4096),
            ("peek", "m", SIZE - 1000, 1000),
            ("release", "m"),
        ),
        ("ok",) * 5,
    ),
    Scenario(
        "identity_read",
        "FILE_ID_INFO, size, last write, edges: through a fully shared handle",
        (("identity", "i", "f"),),
        ("ok",),
    ),
    Scenario(
        "reader_shares_read",
        "open/share modes: another reader with FILE_SHARE_READ does not stop a mapping",
        (("other", "o", "f", READ, SHARE_READ), ("map", "m", "f"), ("release", "m"), ("close", "o")),
        ("ok",) * 4,
    ),
    Scenario(
        "locked_file",
        "a locked file: another handle without FILE_SHARE_READ refuses our open (32)",
        (("other", "o", "f", READ, 0), ("map", "m", "f"), ("identity", "i", "f"), ("close", "o")),
        ("ok", "FileAccessError", "FileAccessError", "ok"),
    ),
    Scenario(
        "writer_refused",
        "open/share modes: our FILE_SHARE_READ refuses a writer's handle; the identity read does not",
        (
            ("other", "o", "f", READ | WRITE, SHARE_READ | SHARE_WRITE),
            ("map", "m", "f"),
            ("identity", "i", "f"),
            ("close", "o"),
        ),
        ("ok", "FileAccessError", "ok", "ok"),
    ),
    Scenario(
        "writer_after_mapping",
        "handles closed after mapping: a writer may open the file, even without sharing",
        (
            ("map", "m", "f"),
            ("other", "o", "f", READ | WRITE, 0),
            ("peek", "m", 0, 100),
            ("close", "o"),
            ("release", "m"),
        ),
        ("ok",) * 5,
    ),
    Scenario(
        "truncate_while_mapped",
        "a file truncated while mapped: SetEndOfFile fails with 1224, the view still reads",
        (
            ("map", "m", "f"),
            ("other", "o", "f", READ | WRITE, SHARE_READ | SHARE_WRITE | SHARE_DELETE),
            ("truncate", "o"),
            ("close", "o"),
            ("peek", "m", SIZE - 100, 100),
            ("release", "m"),
        ),
        ("ok", "ok", "err:1224", "ok", "ok", "ok"),
    ),
    Scenario(
        "replace_while_mapped",
        "a file replaced while mapped: MoveFileExW over it fails with 5 until the view is gone",
        (("map", "m", "f"), ("move", "g", "f"), ("peek", "m", 0, 100), ("release", "m"), ("move", "g", "f")),
        ("ok", "err:5", "ok", "ok", "ok"),
        files=(("f", SIZE), ("g", 70_000)),
    ),
    Scenario(
        "delete_while_mapped",
        "a file deleted while mapped: Windows refuses (5); Wine allows it (a known deviation)",
        (("map", "m", "f"), ("delete", "f"), ("release", "m")),
        ("ok", "err:5", "ok"),
    ),
    Scenario(
        "view_offsets",
        "offsets against the 64 KiB granularity, views past EOF, double unmap, file closed first",
        (
            ("open", "h", "f", SHARE_READ),
            ("mapping", "s", "h"),
            ("close", "h"),  # the file first: the mapping keeps the file alive
            ("view", "v", "s", 65536, 0),
            ("peek", "v", 0, 100),
            ("view", "w", "s", 4096, 0),
            ("view", "w", "s", 262144, 0),
            ("view", "w", "s", 0, SIZE + 1),
            ("view", "t", "s", 196608, 0),
            ("peek", "t", 0, SIZE - 196608),
            ("unmap", "v"),
            ("unmap", "v"),
            ("unmap", "t"),
            ("close", "s"),
        ),
        ("ok",) * 5 + ("Win32Error",) * 3 + ("ok", "ok", "ok", "false", "ok", "ok"),
    ),
    Scenario(
        "mapping_closed_before_use",
        "handle close order: mapping and file closed, the view still reads",
        (
            ("open", "h", "f", SHARE_READ),
            ("mapping", "s", "h"),
            ("view", "v", "s", 0, 0),
            ("close", "s"),
            ("close", "h"),
            ("peek", "v", 0, 4096),
            ("unmap", "v"),
        ),
        ("ok",) * 7,
    ),
    Scenario(
        "read_at_eof",
        "positional ReadFile: a short read, then ERROR_HANDLE_EOF (38)",
        (("open", "h", "f", SHARE_READ), ("read", "h", SIZE - 10, 100), ("read", "h", SIZE + 100, 10), ("close", "h")),
        ("ok",) * 4,
    ),
    Scenario(
        "zero_byte_file",
        "a zero-byte file: the mapper refuses it first; CreateFileMappingW fails with 1006",
        (("map", "m", "z"), ("open", "h", "z", SHARE_READ), ("mapping", "s", "h"), ("close", "h")),
        ("EmptyFileError", "ok", "Win32Error", "ok"),
        files=(("z", 0),),
    ),
    Scenario(
        "missing_file",
        "CreateFileW errors: no such file (2), no such folder (3)",
        (("open", "h", "nofile", SHARE_READ), ("open", "h", "nodir/f", SHARE_READ)),
        ("Win32Error", "Win32Error"),
    ),
    Scenario(
        "long_path",
        "a path over 260 UTF-16 units: the mapper passes its \\\\?\\ form",
        (("map", "m", LONG), ("peek", "m", 0, 4096), ("release", "m"), ("identity", "i", LONG)),
        ("ok",) * 4,
        files=((LONG, SIZE),),
    ),
    Scenario(
        "long_path_unprefixed",
        "the same path without the prefix: Windows refuses it (3); Wine opens it (a known deviation)",
        (("other", "o", "raw:" + LONG, READ, SHARE_READ),),  # last: Wine's handle is left to its exit
        ("err:3",),
        files=((LONG, SIZE),),
    ),
    Scenario(
        "non_ascii_name",
        "a non-ASCII name (Latin, CJK, an emoji: two UTF-16 units) reaches CreateFileW whole",
        (("map", "m", NON_ASCII), ("peek", "m", 1000, 1000), ("release", "m"), ("identity", "i", NON_ASCII)),
        ("ok",) * 4,
        files=((NON_ASCII, SIZE),),
    ),
    Scenario(
        "file_id_two_paths",
        "FILE_ID_INFO identity: one file through a hard link and the \\\\?\\ form, another file apart",
        (
            ("open", "a", "f", SHARE_READ),
            ("open", "b", "link", SHARE_READ),
            ("open", "c", "?:f", SHARE_READ),
            ("open", "d", "g", SHARE_READ),
            ("file_id", "a"),
            ("file_id", "b"),
            ("file_id", "c"),
            ("file_id", "d"),
            ("close", "a"),
            ("close", "b"),
            ("close", "c"),
            ("close", "d"),
        ),
        ("ok",) * 12,
        files=(("f", SIZE), ("g", SIZE)),
        links=(("link", "f"),),
    ),
    Scenario(
        "read_only_folder",
        "a read-only folder and file: a read-only mapping needs no write permission",
        (("map", "m", "f"), ("peek", "m", 0, 100), ("release", "m"), ("identity", "i", "f")),
        ("ok",) * 4,
        readonly=True,
    ),
)


@dataclass(frozen=True)
class Deviation:
    """A call where Wine's kernel32 is known to differ from Windows (the fake follows Windows)."""

    scenario: str
    call: str
    windows: tuple[bool, int]  # (ok, error) on Windows, as the fake gives it
    wine: tuple[bool, int]  # (ok, error) under Wine
    reason: str
    source: str


KNOWN_WINE_DEVIATIONS: tuple[Deviation, ...] = (
    Deviation(
        "delete_while_mapped",
        "DeleteFileW",
        (False, 5),
        (True, 0),
        "Windows cannot delete a file that has a mapped view (the section holds it); Wine unlinks the"
        " Unix file at once and the view keeps reading the old inode, POSIX-style.",
        "https://learn.microsoft.com/dotnet/api/system.io.fileinfo.delete (IOException: 'The target"
        " file is open or memory-mapped on a computer running Microsoft Windows NT');"
        " https://learn.microsoft.com/previous-versions/windows/embedded/ms923961(v=msdn.10)"
        " ('DeleteFile fails if an application attempts to delete a file that is open ... as a"
        " memory-mapped file')",
    ),
    Deviation(
        "long_path_unprefixed",
        "CreateFileW",
        (False, 3),
        (True, 0),
        "Without the \\\\?\\ prefix (and without the opt-in long-path manifest and registry key) the"
        " Win32 path parser refuses a path of MAX_PATH characters or more; Wine passes it to the"
        " Unix file system, which allows 4096 bytes.",
        "https://learn.microsoft.com/windows/win32/fileio/maximum-file-path-limitation;"
        " https://learn.microsoft.com/windows/win32/api/fileapi/nf-fileapi-createfilew ('By default,"
        " the name is limited to MAX_PATH characters. To extend this limit to 32,767 wide"
        " characters, prepend \\\\?\\ to the path')",
    ),
)
