"""Several processes, many threads in each, all mapping, reading and closing the same file at
the same moment (released together from a barrier). Expected: every byte right in every
thread, and in every process afterwards: clean mapper stats, no shared mapping left, and the
same number of open file descriptors as before the storm.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import textwrap

from conftest import ROOT, kill_unfinished

PROCESSES = 4
THREADS = 12
ITERATIONS = 150
SIZE = 1024 * 1024 + 4321  # not a multiple of any page size: the tail page is partial

CHILD = textwrap.dedent(
    """
    import gc, hashlib, json, os, random, sys, threading

    from mapper_impl import load_weights, shared_users, stats

    path, expected, threads, iterations = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    data = open(path, "rb").read()

    def fds():
        return len(os.listdir("/proc/self/fd"))

    # warm-up: first-use allocations (imports, the mapper instance) are not leaks
    for flag in ("0", "1"):
        with load_weights(path, disable_file_mapped_weights=flag) as w:
            w.region(0, 16)
    gc.collect()
    fd_before = fds()
    errors, paths = [], []
    barrier = threading.Barrier(threads + 1)  # + the main thread, released by the parent

    def work(index):
        rng = random.Random(index)
        held = None
        try:
            barrier.wait()
            for i in range(iterations):
                flag = "1" if (index + i) % 4 == 0 else "0"
                w = load_weights(path, disable_file_mapped_weights=flag)
                paths.append(w.path_taken)
                if i % 10 == 0 and hashlib.sha256(w.buffer).hexdigest() != expected:
                    errors.append(f"thread {index}: whole-file hash differs")
                offset = rng.randrange(0, len(data) - 1)
                size = rng.randrange(1, min(70000, len(data) - offset) + 1)
                if bytes(w.region(offset, size)) != data[offset:offset + size]:
                    errors.append(f"thread {index}: region ({offset}, {size}) differs")
                if bytes(w.buffer[-100:]) != data[-100:]:
                    errors.append(f"thread {index}: tail differs")
                if i % 7 == 3:  # keep one load open across iterations: closes interleave
                    held, w = w, held
                if w is not None:
                    w.close()
        except BaseException as err:
            errors.append(f"thread {index}: {type(err).__name__}: {err}")
        finally:
            if held is not None:
                held.close()

    pool = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
    for t in pool:
        t.start()
    sys.stdout.write("ready\\n")
    sys.stdout.flush()
    sys.stdin.readline()  # every process is ready: go all at once
    barrier.wait()
    for t in pool:
        t.join()
    gc.collect()
    print(json.dumps({"errors": errors[:5], "stats": stats().to_dict(), "clean": stats().is_clean(),
                      "users": shared_users(path), "fd_before": fd_before, "fd_after": fds(),
                      "mapped": paths.count("mapped"), "heap": paths.count("heap")}))
    """
)


def test_processes_and_threads_share_one_file(tmp_path):
    path = tmp_path / "shared weights.bin"
    data = os.urandom(SIZE)
    path.write_bytes(data)
    expected = hashlib.sha256(data).hexdigest()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p))
    children = [
        subprocess.Popen(
            [sys.executable, "-c", CHILD, str(path), expected, str(THREADS), str(ITERATIONS)],
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(PROCESSES)
    ]
    try:
        ready = [child.stdout.readline().strip() for child in children]
        assert ready == ["ready"] * PROCESSES, [c.stderr.read() for c in children if c.poll() is not None]
        for child in children:  # the cross-process barrier: release them together
            child.stdin.write("go\n")
            child.stdin.flush()
        results = [child.communicate(timeout=120) for child in children]
    finally:
        kill_unfinished(children)
    for child, (out, err) in zip(children, results, strict=True):
        assert child.returncode == 0, err
        report = json.loads(out.strip().splitlines()[-1])
        assert report["errors"] == [], report["errors"]
        assert report["clean"], report["stats"]
        assert report["users"] == 0
        assert report["fd_after"] == report["fd_before"], report
        assert report["mapped"] + report["heap"] == THREADS * ITERATIONS
        assert report["mapped"] > report["heap"] > 0
