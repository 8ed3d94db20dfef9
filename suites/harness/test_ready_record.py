"""A worker is ready once its ready record can be read (issue 44 item 4): under Wine on a busy
machine (load 26 on 2 cores) a worker whose ready file existed but did not read at that moment
was taken as ready with no record, never sampled, and its row had no memory figures and no
reason (the lane's cpu-run and a mapper-step test failed). Here a real child makes its ready
file unreadable first, a readable record later: the parent waits for the record."""

from __future__ import annotations

import subprocess
import sys
import time

from harness.contract.spec import WorkerSpec
from harness.runner.group import _wait_until_ready, _Worker

CHILD = """
import json, os, sys, time
path = sys.argv[1]
with open(path + ".tmp", "w") as f:
    f.write('{"pid": ')  # a record that does not read yet
os.replace(path + ".tmp", path)
time.sleep(1.0)
with open(path + ".tmp", "w") as f:
    json.dump({"pid": os.getpid(), "path_taken": "mapped"}, f)
os.replace(path + ".tmp", path)
sys.stdin.readline()
"""


def test_a_ready_file_that_does_not_read_yet_is_waited_for(tmp_path):
    ready = tmp_path / "w0.ready.json"
    spec = WorkerSpec(target="cpu", mode="mapped", model_folder=str(tmp_path), ready_path=str(ready))
    proc = subprocess.Popen([sys.executable, "-c", CHILD, str(ready)], stdin=subprocess.PIPE)
    worker = _Worker(index=0, spec=spec, proc=proc, log_file=None)
    try:
        begun = time.monotonic()
        _wait_until_ready([worker], timeout_s=60)
        assert not worker.timed_out, f"not ready after {time.monotonic() - begun:.1f} s"
        assert worker.ready is not None and worker.ready.pid == proc.pid, worker.ready
    finally:
        proc.kill()
        proc.wait()
