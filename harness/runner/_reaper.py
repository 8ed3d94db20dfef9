"""``python -m harness.runner._reaper PARENT TAG``: removes a harness's memory cgroups once the
harness is gone, however it went.

Why a process of its own: a harness killed with SIGKILL (or by the OOM killer) runs no cleanup,
and its group's cgroup would stay behind. The reaper is started with the run's first cgroup, in
a session of its own (Ctrl-C on the terminal and signals to the harness's process group do not
reach it), with its stdin the read end of a pipe only the harness holds. It blocks on that pipe;
EOF comes when the harness closes it (its normal end, having removed its cgroups itself) or when
the kernel closes it (the harness died). Then it removes every cgroup under PARENT whose name
starts with TAG (killing what is left in them: the dead harness's workers) and exits.
"""

from __future__ import annotations

import signal
import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    for name in ("SIGINT", "SIGHUP", "SIGTERM"):
        signal.signal(getattr(signal, name), signal.SIG_IGN)  # only the pipe ends the wait
    from harness.runner import _cgroup

    if len(argv) != 2 or not argv[1].startswith(_cgroup.PREFIX):
        return 2
    parent, tag = Path(argv[0]), argv[1]
    try:
        while sys.stdin.buffer.read(4096):
            pass
    except OSError:
        pass
    left = [path for path in _cgroup.ours(parent, tag) if not _cgroup.remove(path)]
    return 1 if left else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
