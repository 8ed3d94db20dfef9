"""Did the weights a group loaded stay the same until its end? A seal taken before the group and
checked when its workers are gone: identity, size, mtime and ctime, and a BLAKE2b of `SAMPLES`
blocks plus both edges (cheap on a 4 GiB file); a change fails every worker of the group."""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

SAMPLES = 256  #: Blocks sampled over the file, their size, and the size of each edge hashed whole.
BLOCK = 4096
EDGE = 64 * 1024


@dataclass(frozen=True)
class Seal:
    path: str
    device: int
    inode: int
    size: int
    mtime_ns: int
    ctime_ns: int
    sample: str  # BLAKE2b of the sampled blocks ("" when the file could not be read)


def _sample(handle, size: int) -> str:
    digest = hashlib.blake2b(digest_size=16)
    offsets = [0, max(0, size - EDGE)]
    step = max(BLOCK, size // SAMPLES)
    offsets += list(range(EDGE, max(EDGE, size - EDGE), step))
    for offset in offsets:
        handle.seek(offset)
        digest.update(handle.read(EDGE if offset in (0, max(0, size - EDGE)) else BLOCK))
    return digest.hexdigest()


def seal(path: Path | str) -> Seal:
    """The seal of one file as it is now (a file that cannot be read seals as missing)."""
    from harness.core.errors import InputError
    from harness.core.inputfiles import open_regular

    try:
        with open_regular(path, "weights") as handle:  # never blocks on a FIFO put in its place
            st = os.fstat(handle.fileno())
            sample = _sample(handle, st.st_size)
    except (OSError, InputError):
        return Seal(str(path), -1, -1, -1, -1, -1, "")
    return Seal(str(path), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns, sample)


def seals(paths: list[Path]) -> list[Seal]:
    return [seal(p) for p in dict.fromkeys(paths)]


def broken(before: list[Seal]) -> list[str]:
    """One reason per file whose seal no longer holds ("" files unchanged: an empty list)."""
    reasons = []
    for old in before:
        new = seal(old.path)
        name = Path(old.path).name
        if old.size < 0:
            reasons.append(f"{name} could not be read before the group: whether it changed cannot be told")
        elif new.size < 0:
            reasons.append(f"{name} is gone or unreadable")
        elif (new.device, new.inode) != (old.device, old.inode):
            reasons.append(f"{name} was replaced by another file")
        elif new.size != old.size:
            reasons.append(f"{name} changed size ({old.size} -> {new.size} bytes)")
        elif new.sample != old.sample:
            reasons.append(f"{name} changed content")
        elif (new.mtime_ns, new.ctime_ns) != (old.mtime_ns, old.ctime_ns):
            reasons.append(f"{name} was written to (its modification or status-change time moved)")
    return reasons
