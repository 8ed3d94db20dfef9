"""File checks before mapping: each unusable path raises its own FileCheckError subclass with
a clear message, is never retried and never falls back to the heap."""

from __future__ import annotations

import os
import stat

import pytest
from mapper_support import (  # noqa: F401 (stats_guard: autouse fixture)
    WINDOWS,
    CountingMapper,
    assert_clean,
    open_handle_count,
    run_child,
    stats_guard,
    symlink_or_skip,
    write_file,
)

import mapper_impl
from mapper_impl import (
    EmptyFileError,
    FileAccessError,
    FileCheckError,
    FileMissingError,
    FileTooLargeError,
    NotARegularFileError,
    load_weights,
    stats,
)
from mapper_impl import _common as common
from mapper_impl import _weights as weights_mod

IS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0


@pytest.fixture
def heap_reads(monkeypatch):
    """Count heap reads made by load_weights (a fallback would show up here)."""
    calls = []
    real = weights_mod.read_into_heap

    def counting(path, faults=None):
        calls.append(path)
        return real(path, faults)

    monkeypatch.setattr(weights_mod, "read_into_heap", counting)
    return calls


def make_missing(tmp_path):
    return tmp_path / "missing.bin"


def make_empty(tmp_path):
    path = tmp_path / "empty.bin"
    path.touch()
    return path


def make_directory(tmp_path):
    path = tmp_path / "a_directory.bin"
    path.mkdir()
    return path


def make_fifo(tmp_path):
    path = tmp_path / "fifo.bin"
    os.mkfifo(path)
    return path


def make_symlink_loop(tmp_path):
    a, b = tmp_path / "loop_a.bin", tmp_path / "loop_b.bin"
    symlink_or_skip(a, b)
    symlink_or_skip(b, a)
    return a


def make_dangling_symlink(tmp_path):
    path = tmp_path / "dangling.bin"
    symlink_or_skip(path, tmp_path / "nowhere.bin")
    return path


def make_not_a_directory(tmp_path):
    parent = tmp_path / "plain_file"
    parent.write_bytes(b"x")
    return parent / "child.bin"


no_fifo_on_windows = pytest.mark.skipif(WINDOWS, reason="os.mkfifo does not exist on Windows")

# On Windows os.stat reports a symlink loop as WinError 1921 (EINVAL: "cannot stat (...)") and
# a path under a plain file as WinError 3 (FileNotFoundError: "no such file"); glibc says
# ELOOP ("Too many levels of symbolic links") and ENOTDIR. The error class is the same.
LOOP_REASON = ("cannot stat", "no such file") if WINDOWS else ("symbolic links",)
NOT_A_DIRECTORY_REASON = ("cannot stat", "no such file") if WINDOWS else ("cannot stat",)

# (make, error, accepted reasons: the error's reason contains one of them)
CASES = [
    pytest.param(make_missing, FileMissingError, ("no such file",), id="missing"),
    pytest.param(make_empty, EmptyFileError, ("file is empty",), id="empty"),
    pytest.param(make_directory, NotARegularFileError, ("a directory",), id="directory"),
    pytest.param(make_fifo, NotARegularFileError, ("not a regular file",), id="fifo", marks=no_fifo_on_windows),
    pytest.param(make_symlink_loop, FileMissingError, LOOP_REASON, id="symlink-loop"),
    pytest.param(make_dangling_symlink, FileMissingError, ("no such file",), id="dangling-symlink"),
    pytest.param(make_not_a_directory, FileMissingError, NOT_A_DIRECTORY_REASON, id="not-a-directory"),
]


@pytest.mark.parametrize("flag", ["0", "1"], ids=["mapped", "heap"])
@pytest.mark.parametrize(("make", "error", "reasons"), CASES)
def test_unusable_path_raises_specific_error(tmp_path, make, error, reasons, flag):
    """Each unusable path raises its own FileCheckError subclass whose message names the
    reason and the path (on the mapped and the heap path alike)."""
    path = make(tmp_path)
    with pytest.raises(error) as info:
        load_weights(path, disable_file_mapped_weights=flag)
    err = info.value
    assert isinstance(err, FileCheckError)
    assert err.path == str(path)
    assert any(reason in err.reason for reason in reasons), err.reason
    assert str(err) == f"{err.reason}: {path}"
    assert_clean()


@pytest.mark.parametrize(("make", "error", "reasons"), CASES)
def test_file_check_errors_are_never_retried_nor_fall_back(tmp_path, heap_reads, make, error, reasons):
    """An input error is final: the mapper is asked once and the heap is never tried."""
    path = make(tmp_path)
    mapper = CountingMapper()
    with pytest.raises(error):
        load_weights(path, mapper=mapper, max_attempts=5)
    assert mapper.calls == 1
    assert heap_reads == []


@no_fifo_on_windows
def test_fifo_is_refused_without_blocking(tmp_path):
    """A FIFO is refused from its stat alone: opening it for reading would block forever."""
    path = make_fifo(tmp_path)
    assert stat.S_ISFIFO(os.stat(path).st_mode)
    with pytest.raises(NotARegularFileError, match="not a regular file"):
        load_weights(path)


def test_character_device_is_not_a_regular_file():
    """A character device (/dev/null; NUL on Windows, which os.stat reports as S_IFCHR) is
    not a weights file, on the mapped and the heap path."""
    for flag in ("0", "1"):
        with pytest.raises(NotARegularFileError, match="not a regular file"):
            load_weights(os.devnull, disable_file_mapped_weights=flag)


def test_file_larger_than_size_t_is_refused(tmp_path, monkeypatch):
    """A file bigger than the address space (size_t) raises FileTooLargeError (simulated by
    lowering the limit: such a file cannot be made here)."""
    path = tmp_path / "big.bin"
    write_file(path, 1001)
    monkeypatch.setattr(common, "MAX_MAPPABLE", 1000)
    for flag in ("0", "1"):
        with pytest.raises(FileTooLargeError, match="1001 bytes does not fit in size_t"):
            load_weights(path, disable_file_mapped_weights=flag)


@pytest.mark.skipif(
    WINDOWS,
    reason="os.chmod on Windows only toggles the read-only attribute, the "
    "file stays readable (see test_file_open_for_writing_is_refused_on_windows)",
)
@pytest.mark.skipif(
    IS_ROOT, reason="root bypasses file permissions (CI runs as root: see test_unreadable_file_as_unprivileged_child)"
)
def test_unreadable_file_raises_file_access_error(tmp_path):
    """A file without read permission raises FileAccessError on both paths."""
    path = tmp_path / "secret.bin"
    write_file(path, 100)
    path.chmod(0)
    for flag in ("0", "1"):
        with pytest.raises(FileAccessError, match="permission denied"):
            load_weights(path, disable_file_mapped_weights=flag)


CHILD_ACCESS = """
    import os, sys
    import mapper_impl as m
    uid = int(sys.argv[1])
    os.chdir(sys.argv[2])
    os.setgroups([])
    os.setgid(uid)
    os.setuid(uid)
    for label, path in (("open", "secret.bin"), ("stat", sys.argv[3])):
        for flag in ("0", "1"):
            try:
                m.load_weights(path, disable_file_mapped_weights=flag)
            except m.FileAccessError as err:
                print(label, flag, type(err).__name__, err.reason, sep="|")
            except Exception as err:
                print(label, flag, "UNEXPECTED", type(err).__name__, err, sep="|")
            else:
                print(label, flag, "LOADED", sep="|")
    print("clean", m.stats().is_clean(), sep="|")
"""


@pytest.mark.skipif(WINDOWS, reason="POSIX uids, setuid() and mode bits: no Windows equivalent")
@pytest.mark.skipif(not IS_ROOT, reason="needs root to drop to an unprivileged user")
def test_unreadable_file_as_unprivileged_child(tmp_path):
    """As root, prove FileAccessError for real in a child that drops to 'nobody': an unreadable
    file in a searchable directory fails at open(); one behind an unsearchable directory
    fails at stat(). Neither loads by any path."""
    import pwd  # POSIX only: imported here so the module collects on Windows

    try:
        nobody = pwd.getpwnam("nobody").pw_uid
    except KeyError:
        pytest.skip("no 'nobody' user")
    (tmp_path / "secret.bin").write_bytes(b"\x01" * 100)
    (tmp_path / "secret.bin").chmod(0o600)
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    write_file(private / "hidden.bin", 100)
    tmp_path.chmod(0o711)  # searchable (not listable) by others: the child can stat, not open
    result = run_child(CHILD_ACCESS, str(nobody), str(tmp_path), str(private / "hidden.bin"))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines == [
        "open|0|FileAccessError|permission denied",
        "open|1|FileAccessError|permission denied",
        "stat|0|FileAccessError|permission denied",
        "stat|1|FileAccessError|permission denied",
        "clean|True",
    ]


def test_path_with_spaces_and_non_ascii_characters(tmp_path):
    """Spaces and non-ASCII characters in directory and file names work on both paths
    (upstream converts Windows paths byte by byte and breaks here)."""
    folder = tmp_path / "my models" / "Ünïcødé 模型 ☃"
    folder.mkdir(parents=True)
    path = folder / "wéights qnn — ctx.bin"
    data = write_file(path, 9000, seed=3)
    with (
        load_weights(path) as mapped,
        load_weights(str(path), disable_file_mapped_weights=True) as heap,
    ):
        assert mapped.path_taken == "mapped"
        assert bytes(mapped.buffer) == bytes(heap.buffer) == data
        assert mapper_impl.shared_users(str(path)) == 1
        assert bytes(mapped.region(4097, 100)) == data[4097:4197]


@pytest.mark.skipif(not WINDOWS, reason="Windows share modes (POSIX has no mandatory locks)")
def test_file_open_for_writing_is_refused_on_windows(tmp_path, heap_reads):
    """Windows: while another handle has the file open for writing, CreateFileW with
    FILE_SHARE_READ fails with a sharing violation: the mapped load raises FileAccessError
    (an input error: asked once, no retry, no heap fallback). The heap path's plain open
    shares writing, so it still reads the file."""
    path = tmp_path / "being_written.bin"
    data = write_file(path, 5000, seed=9)
    mapper = CountingMapper()
    with open(path, "r+b"):
        with pytest.raises(FileAccessError, match="open for writing by another process") as info:
            load_weights(path, mapper=mapper, max_attempts=5)
        assert "Windows error 32" in info.value.reason
        assert mapper.calls == 1
        assert heap_reads == []
        with load_weights(path, disable_file_mapped_weights="1") as heap:
            assert bytes(heap.buffer) == data
    with load_weights(path, mapper=mapper) as mapped:  # the writer is gone: it maps
        assert mapped.path_taken == "mapped"
        assert bytes(mapped.buffer) == data
    assert_clean()


def test_file_check_error_leaves_no_fd_or_mapping(tmp_path):
    """A refused file leaves no open descriptor (Windows: handle) and nothing in the stats."""
    empty = make_empty(tmp_path)
    before = open_handle_count()
    for _ in range(50):
        with pytest.raises(EmptyFileError):
            load_weights(empty)
    assert open_handle_count() == before
    assert stats().is_clean()
