"""Progress on stderr: model build bytes and every worker's state with its elapsed time; live
on a terminal, plain lines in a log; data printed verbatim in both."""

from __future__ import annotations

import io
import re
import time
from dataclasses import replace

from harness_support import group_spec

from harness.runner.group import GroupResult
from harness.runner.progress import Progress

GROUP = group_spec()


def plain() -> Progress:
    progress = Progress(live=False)
    progress.console.file = io.StringIO()
    return progress


def test_plain_lines_for_stages_bytes_and_workers():
    progress = plain()
    with progress.stage("building [model]"):
        for done in range(1, 5):
            progress.bytes_written(done * 64 * 1024**2, 256 * 1024**2)
    progress.group_started(0, 2, GROUP)
    progress.worker_event(0, "starting")
    progress.worker_event(1, "starting")
    progress.worker_event(0, "ready")
    progress.worker_event(1, "exited", "exit code 3")
    progress.worker_event(0, "sampled")
    progress.worker_event(0, "done", "exit code 0")
    progress.group_finished(0, 2, GROUP, GroupResult([], None))
    progress.close()
    text = progress.console.file.getvalue()
    assert "building [model]..." in text  # brackets from data are not markup
    assert re.search(r"building \[model\]: 64\.0 MiB / 256\.0 MiB \(25%\), [\d.]+ ms", text)
    assert "128.0 MiB / 256.0 MiB (50%)" in text and "192.0 MiB / 256.0 MiB (75%)" in text
    assert re.search(r"building \[model\]: done in [\d.]+ ms", text)
    assert re.search(r"worker 0 ready after [\d.]+ ms", text)
    assert re.search(r"worker 1 exited after [\d.]+ ms \(exit code 3\)", text)
    assert "[1/2] cpu mapped N=2 M=1 repeat=0: starting 2 worker(s)" in text
    assert "[1/2] done in" in text


def test_live_area_shows_worker_states_with_elapsed_time():
    from rich.console import Console

    progress = Progress(live=True)
    buffer = io.StringIO()
    progress.console = Console(file=buffer, force_terminal=True, width=160, markup=False, highlight=False)
    progress.group_started(0, 1, GROUP)
    progress.worker_event(0, "ready")
    progress.worker_event(1, "starting")
    rendered = progress._render().plain
    assert "[1/1] cpu mapped N=2 M=1 repeat=0" in rendered
    assert re.search(r"w0 ready [\d.]+ ms\s+w1 starting \(sessions \+ first inference\) [\d.]+ ms", rendered), rendered
    time.sleep(0.6)  # the live area refreshes 4 times a second
    progress.group_finished(0, 1, GROUP, GroupResult([], None))
    progress.close()
    assert "w0 ready" in buffer.getvalue()  # drawn on the terminal while the group ran


def test_lines_printed_above_the_live_area_never_deadlock_with_its_refresh(monkeypatch):
    """The live area's refresh thread holds rich's lock while it asks us for the text; a line
    printed above the area takes rich's lock too. `note` held our lock while printing: the two
    threads then waited for each other for good (at 1000 refreshes a second, within a few dozen
    lines; at the real 4 a second, now and then in a long run on a terminal)."""
    import threading

    import rich.live
    from rich.console import Console

    original = rich.live.Live.__init__

    def fast(self, *args, **kwargs):
        kwargs["refresh_per_second"] = 1000
        original(self, *args, **kwargs)

    monkeypatch.setattr(rich.live.Live, "__init__", fast)
    progress = Progress(live=True)
    progress.console = Console(file=io.StringIO(), force_terminal=True, force_interactive=True, width=120)
    progress.group_started(0, 1, GROUP)
    done = threading.Event()

    def lines() -> None:
        for i in range(500):
            progress.note(f"line {i}")
        done.set()

    threading.Thread(target=lines, daemon=True).start()
    finished = done.wait(30)
    if finished:
        progress.close()
    assert finished, "note() and the live refresh deadlocked"


def test_heartbeat_in_plain_mode(monkeypatch):
    monkeypatch.setattr("harness.runner.progress.HEARTBEAT_S", 0.05)
    progress = plain()
    with progress.stage("compiling"):
        time.sleep(0.3)
    progress.close()
    assert "still busy: compiling:" in progress.console.file.getvalue()


def test_a_starting_worker_and_a_stage_step_count_on_while_they_last(monkeypatch):
    """A first inference of minutes on the QNN simulator showed "w0 starting 7.4 ms", frozen:
    a worker still starting shows the time so far, and a stage says what it is doing."""
    monkeypatch.setattr("harness.runner.progress.HEARTBEAT_S", 0.05)
    progress = plain()
    progress.group_started(0, 1, GROUP)
    progress.worker_event(0, "starting")
    first = progress._group.text()
    time.sleep(0.3)
    later = progress._group.text()
    assert first != later and re.search(r"w0 starting \(sessions \+ first inference\) [\d.]+ ms", later), later
    progress.group_finished(0, 1, GROUP, GroupResult([], None))
    with progress.stage("preparing the qnn model"):
        progress.step("compiling m.onnx for QNN")
        time.sleep(0.3)
    progress.close()
    text = progress.console.file.getvalue()
    assert "preparing the qnn model: compiling m.onnx for QNN" in text
    assert re.search(r"still busy: preparing the qnn model: compiling m.onnx for QNN, [\d.]+ ms", text), text
    assert re.search(r"still busy: \[1/1\].*w0 starting \(sessions \+ first inference\)", text), text


def test_quiet_prints_nothing():
    progress = Progress(quiet=True)
    progress.console.file = io.StringIO()
    with progress.stage("x"):
        progress.bytes_written(1, 2)
    progress.group_started(0, 1, GROUP)
    progress.worker_event(0, "ready")
    progress.close()
    assert progress.console.file.getvalue() == ""


def test_a_real_run_reports_build_bytes_and_worker_states(run_harness, tmp_path):
    outcome = run_harness(
        "run", "--model-size", "24MiB", "--processes", "2", env={"HARNESS_CACHE_DIR": str(tmp_path / "fresh-cache")}
    )
    assert outcome.returncode == 0, outcome.stderr
    err = outcome.stderr
    assert re.search(r"preparing the cpu model .*: \d+\.\d MiB / 24\.0 MiB \(\d+%\)", err), err
    for worker in (0, 1):
        assert re.search(rf"worker {worker} ready after [\d.]+ m?s", err), err
    assert "verdict:" not in err and "verdict:" in outcome.stdout  # the judgement stays on stdout


def test_worker_errors_are_printed_verbatim():
    from harness.core.schema import ResultRow

    progress = plain()
    row = ResultRow(
        target="cpu",
        mode="heap",
        processes=1,
        sessions_per_process=1,
        repeat=0,
        worker=0,
        output_ok=False,
        error="OSError: [/tmp/x[v2]] ([bold]y[/])",
    )
    progress.group_started(0, 1, GROUP)
    progress.group_finished(0, 1, GROUP, GroupResult([replace(row)], None))
    assert "OSError: [/tmp/x[v2]] ([bold]y[/])" in progress.console.file.getvalue()


def test_the_heartbeat_counts_from_the_group_start_not_the_run_start(monkeypatch):
    """A group that started 0.7 beat into the run hears no "still busy" before it has been busy
    a whole beat itself (the beat used to be anchored to the run's first stage)."""
    beat = 1.0
    monkeypatch.setattr("harness.runner.progress.HEARTBEAT_S", beat)
    progress = plain()
    heard: list[tuple[float, str]] = []
    note = progress.note
    monkeypatch.setattr(progress, "note", lambda message: (heard.append((time.monotonic(), message)), note(message)))
    with progress.stage("compiling"):
        time.sleep(0.7 * beat)
    started = time.monotonic()
    progress.group_started(0, 1, GROUP)
    time.sleep(1.6 * beat)
    progress.close()
    busy = [at - started for at, message in heard if "still busy" in message and "N=" in message]
    assert busy, heard  # the group was busy for more than a beat: it said so
    assert min(busy) >= beat - 0.05, busy
