"""Stress: many threads and several processes loading, reading and closing one file at once."""

from __future__ import annotations

import hashlib
import random
import subprocess
import threading

import numpy as np
from mapper_support import (  # noqa: F401 (stats_guard: autouse fixture)
    GRANULARITY,
    WINDOWS,
    assert_clean,
    child_command,
    child_env,
    is_refused_while_mapped,
    open_handle_count,
    stats_guard,
    write_file,
)

from conftest import kill_unfinished, line_from
from mapper_impl import FileAccessError, RegionError, load_weights, shared_users

SIZE = 16 * GRANULARITY + 1234
THREADS = 16
ITERATIONS = 200


def run_threads(worker, count: int) -> list[BaseException]:
    """Start ``count`` threads on ``worker(index, barrier)`` together; return their errors."""
    barrier = threading.Barrier(count)
    errors: list[BaseException] = []

    def guarded(index: int) -> None:
        try:
            worker(index, barrier)
        except BaseException as err:  # every failure is reported below
            errors.append(err)

    threads = [threading.Thread(target=guarded, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not any(t.is_alive() for t in threads), "a worker thread hung"
    return errors


def test_threads_load_read_and_close_one_file(tmp_path):
    """16 threads x 200 iterations of mapped and heap loads, random region requests (valid
    and invalid), numpy pins and closes: no exception, every byte right, and at the end no
    mapping, view, buffer or descriptor left."""
    path = tmp_path / "shared_qnn.bin"
    data = write_file(path, SIZE, seed=11)
    load_weights(path).close()  # warm-up, so first-use allocations are not counted
    handles_before = open_handle_count()

    def worker(index: int, barrier: threading.Barrier) -> None:
        rng = random.Random(index)
        barrier.wait()
        for _ in range(ITERATIONS):
            flag = "1" if rng.random() < 0.3 else "0"
            weights = load_weights(path, disable_file_mapped_weights=flag)
            try:
                offset = rng.randrange(SIZE)
                size = rng.randrange(1, 3 * GRANULARITY)
                if offset + size > SIZE:
                    try:
                        weights.region(offset, size)
                    except RegionError:
                        pass
                    else:
                        raise AssertionError(f"past-end region ({offset}, {size}) accepted")
                    size = SIZE - offset
                region = weights.region(offset, size)
                assert bytes(region) == data[offset : offset + size]
                probe = rng.randrange(SIZE)
                assert weights.buffer[probe] == data[probe]
                pinned = np.frombuffer(region, dtype=np.uint8) if rng.random() < 0.2 else None
            finally:
                weights.close()
            if pinned is not None:  # read after close: the deferred unmap keeps it valid
                assert pinned.tobytes() == data[offset : offset + size]
            del region, pinned

    errors = run_threads(worker, THREADS)
    assert not errors, f"{len(errors)} thread errors, first: {errors[0]!r}"
    assert shared_users(str(path)) == 0
    assert_clean()
    assert open_handle_count() == handles_before


def test_threads_see_whole_versions_while_the_file_is_replaced(tmp_path):
    """While a writer keeps replacing the file (os.replace) with one of two versions, every
    load in 8 reader threads sees exactly one version in full, never a mix, and nothing
    leaks once they are done.

    Windows: a replace is refused (PermissionError) while any reader has the file mapped or
    open, and a load racing with a replace that does go through can meet the rename's own
    handle (sharing violation / delete pending: FileAccessError). Both are counted, not
    errors; every load that succeeds must still see one whole version."""
    path = tmp_path / "swapped.bin"
    versions = {}
    for seed in (21, 22):
        staged = tmp_path / f"v{seed}.bin"
        versions[seed] = write_file(staged, SIZE, seed=seed)
    digests = {hashlib.sha256(v).hexdigest(): seed for seed, v in versions.items()}
    path.write_bytes(versions[21])
    stop = threading.Event()
    writer_errors: list[BaseException] = []
    counts = {"replaced": 0, "refused": 0, "loads": 0, "busy": 0}
    counts_lock = threading.Lock()

    def count(key: str) -> None:
        with counts_lock:
            counts[key] += 1

    def writer() -> None:
        seed = 21
        staging = None
        try:
            while not stop.is_set():
                if staging is None:  # the next version, staged once per replace
                    seed = 43 - seed
                    staging = tmp_path / f"staging-{seed}.bin"
                    staging.write_bytes(versions[seed])
                try:
                    staging.replace(path)
                except OSError as err:
                    if not (WINDOWS and is_refused_while_mapped(err)):
                        raise
                    count("refused")  # a reader holds the file: try the same staging again,
                    stop.wait(0.001)  # without starving the readers of the GIL
                else:
                    count("replaced")
                    staging = None
        except BaseException as err:  # reported below
            writer_errors.append(err)

    def reader(index: int, barrier: threading.Barrier) -> None:
        rng = random.Random(100 + index)
        barrier.wait()
        for _ in range(60):
            flag = "1" if rng.random() < 0.25 else "0"
            try:
                weights = load_weights(path, disable_file_mapped_weights=flag)
            except FileAccessError:
                if not WINDOWS:
                    raise
                count("busy")
                continue
            with weights:
                digest = hashlib.sha256(weights.buffer).hexdigest()
                assert digest in digests, "a load saw a mix of two versions"
                offset = rng.randrange(SIZE - 100)
                expected = versions[digests[digest]][offset : offset + 100]
                assert bytes(weights.region(offset, 100)) == expected
            count("loads")

    writer_thread = threading.Thread(target=writer)
    writer_thread.start()
    try:
        errors = run_threads(reader, 8)
    finally:
        stop.set()
        writer_thread.join(timeout=30)
    assert not writer_thread.is_alive(), "the writer thread hung"
    assert not errors, f"{len(errors)} thread errors, first: {errors[0]!r}"
    assert not writer_errors, f"writer failed: {writer_errors[0]!r}"
    assert counts["loads"] > 0, counts
    if not WINDOWS:  # POSIX never refuses a rename and never fails a load
        assert counts["replaced"] > 0 and counts["refused"] == counts["busy"] == 0, counts
        assert counts["loads"] == 8 * 60, counts
    assert_clean()


PROCESS_CHILD = """
    import hashlib, sys
    import mapper_impl as m
    path, expected, flag = sys.argv[1], sys.argv[2], sys.argv[3]
    w = m.load_weights(path, disable_file_mapped_weights=flag)
    assert hashlib.sha256(w.buffer).hexdigest() == expected, "bad bytes"
    print("ready", w.path_taken, flush=True)
    sys.stdin.readline()            # every sibling holds its load now
    region = w.region(12345, 4096)
    assert bytes(region) == bytes(w.buffer[12345:12345 + 4096])
    del region
    w.close()
    assert m.stats().is_clean(), m.stats()
    print("ok", flush=True)
"""


def test_several_processes_map_one_file_at_once(tmp_path):
    """Four processes (three mapped, one heap) hold loads of the same file at the same
    moment, each sees the right bytes and each ends with clean stats."""
    path = tmp_path / "multi.bin"
    data = write_file(path, SIZE, seed=12)
    expected = hashlib.sha256(data).hexdigest()
    flags = ["0", "0", "0", "1"]
    children = [
        subprocess.Popen(
            [*child_command(PROCESS_CHILD), str(path), expected, flag],
            env=child_env(),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for flag in flags
    ]
    try:
        ready = [line_from(child, "ready line").split() for child in children]
        assert ready == [["ready", "heap" if f == "1" else "mapped"] for f in flags], [
            child.stderr.read() for child in children if child.poll() is not None
        ]
        results = [child.communicate(input="go\n", timeout=30) for child in children]
    finally:
        kill_unfinished(children)
    for child, (out, err) in zip(children, results, strict=True):
        assert child.returncode == 0, err
        assert out.strip() == "ok"
