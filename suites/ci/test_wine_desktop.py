"""Why the Wine lane keeps one desktop user from boot to the end (`.ci/wine_lane.py`,
`keep_desktop`): Wine's desktop, restarted mid-run, holds the stderr of the process that
restarted it for as long as the desktop has any user, so a pipe read to its end waits for an
unrelated process. Real Wine, a real prefix booted as the lane boots it, a mingw-built desktop
user (`_wine_desktop.c`)."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from conftest import ROOT

pytestmark = [pytest.mark.slow, pytest.mark.skipif(not os.path.isdir("/proc"), reason="finds explorer.exe in /proc")]
#: The booted desktop closes about a second after its last user left; a loaded machine is slower.
CLOSED_WITHIN_S = 60.0
HELD_FOR_S = 5.0  # a pipe still open this long after its writer exited is held by someone else


def _lane():
    spec = importlib.util.spec_from_file_location("wine_lane", ROOT / ".ci" / "wine_lane.py")
    lane = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(lane)
    return lane


@pytest.fixture(scope="module")
def booted(tmp_path_factory):
    """(lane module, wine, env, folder, desktop user .exe): a fresh prefix booted as the lane boots it."""
    lane = _lane()
    wine = shutil.which("wine") or shutil.which("wine64")
    wineserver = shutil.which("wineserver") or shutil.which("wineserver64", path="/usr/lib/wine")
    gcc = shutil.which("x86_64-w64-mingw32-gcc")
    if not (wine and wineserver and gcc):
        pytest.skip("wine64 and gcc-mingw-w64-x86-64 needed (.ci/run installs them)")
    folder = tmp_path_factory.mktemp("wine-desktop")
    exe = folder / "desktop.exe"
    source = Path(__file__).with_name("_wine_desktop.c")
    subprocess.run([gcc, "-municode", "-O1", "-o", str(exe), str(source)], check=True, capture_output=True)
    (folder / "prefix").mkdir()
    env = lane.wine_env(folder / "prefix")
    try:
        lane.boot(wine, wineserver, env)
        yield lane, wine, env, folder, exe
    finally:
        subprocess.run([wineserver, "-k"], env=env, check=False)
        subprocess.run([wineserver, "-w"], env=env, check=False, timeout=120)


def _desktop_up(env: dict[str, str]) -> bool:
    """An explorer.exe of this prefix is running."""
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if b"explorer.exe" not in Path(f"/proc/{pid}/cmdline").read_bytes():
                continue
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if f"WINEPREFIX={env['WINEPREFIX']}".encode() in environ:
            return True
    return False


def _wait_for(condition, seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.1)


def _keep(booted, name: str) -> subprocess.Popen:
    lane, wine, env, folder, exe = booted
    return lane.keep_desktop([wine, str(exe), "keep"], env, folder / name)


def _first_user_with_a_pipe(booted) -> subprocess.Popen:
    """A process with pipes for its output that uses the desktop and exits at once."""
    _, wine, env, _, exe = booted
    user = subprocess.Popen(
        [wine, str(exe)], env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert user.wait(timeout=120) == 0
    return user


def _stop(keeper: subprocess.Popen) -> None:
    keeper.kill()
    keeper.wait(timeout=60)


def test_a_restarted_desktop_holds_its_first_users_stderr_while_another_user_lives(booted):
    """The hang the lane prevents: with the desktop down, a process that needs one restarts it
    and exits; while another desktop user lives its stderr pipe never reaches its end."""
    env = booted[2]
    _wait_for(lambda: not _desktop_up(env), CLOSED_WITHIN_S, "the booted desktop never closed on its own")
    user = _first_user_with_a_pipe(booted)
    other = _keep(booted, "other-ready")
    try:
        with pytest.raises(subprocess.TimeoutExpired):
            user.communicate(timeout=HELD_FOR_S)
    finally:
        _stop(other)
    user.communicate(timeout=CLOSED_WITHIN_S)  # the desktop's last user left: it closed, and the pipe with it


def test_with_the_lanes_desktop_keeper_no_pipe_is_held(booted):
    """The lane's fix: a keeper started before any step keeps the desktop up, so a desktop user
    started later (after the close delay) hands explorer.exe nothing: its pipe ends with it."""
    env = booted[2]
    _wait_for(lambda: not _desktop_up(env), CLOSED_WITHIN_S, "the booted desktop never closed on its own")
    keeper = _keep(booted, "keeper-ready")
    try:
        time.sleep(3)  # longer than the close delay: without a user the desktop would be down by now
        assert _desktop_up(env), "the keeper does not keep the desktop up"
        user = _first_user_with_a_pipe(booted)
        other = _keep(booted, "other-ready-2")
        try:
            user.communicate(timeout=HELD_FOR_S)
        finally:
            _stop(other)
    finally:
        _stop(keeper)
