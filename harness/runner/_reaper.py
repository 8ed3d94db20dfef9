"""``python -m harness.runner._reaper PARENT TAG``: removes a harness's cgroups once it is gone,
SIGKILL included: in a session of its own, it waits for EOF on a pipe only the harness holds."""

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
