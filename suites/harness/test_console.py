"""What the command line prints is plain text: brackets in data are never rich markup.

Before: a run id such as "[r1]" vanished from gate lines, and a worker error holding "[/path]"
raised rich's MarkupError in the middle of a run.
"""

from __future__ import annotations

import io
from dataclasses import replace

from harness_support import group_spec

from harness.console import make_console, print_judgement
from harness.core.rundata import RunData
from harness.core.schema import ResultRow
from harness.core.summary import summarize
from harness.core.verdict import judge
from harness.runner.group import GroupResult
from harness.runner.progress import Progress

ERROR = "OSError: cannot read [/tmp/models[v2]/weights.bin] ([bold]x[/])"


def _rows() -> list[ResultRow]:
    base = ResultRow(
        target="cpu",
        mode="mapped",
        disable_file_mapped_weights="0",
        processes=1,
        sessions_per_process=1,
        repeat=0,
        worker=0,
        pid=1,
        path_taken="mapped",
        output_ok=True,
        init_s=0.01,
        load_s=0.001,
        create_s=0.009,
        rss_bytes=10,
        uss_bytes=5,
        pss_bytes=7,
        private_bytes=5,
        weights_bytes=4,
        ep_file_mapping="n/a",
        error="",
    )
    heap = replace(base, mode="heap", disable_file_mapped_weights="1", path_taken="heap", error=ERROR, output_ok=False)
    return [base, heap]


def test_run_id_and_errors_with_brackets_or_emoji_codes_are_printed_verbatim(tmp_path):
    rows = _rows()
    meta = {
        "status": "complete",
        "run": {"run_id": "[r1]:llama:", "target": "cpu"},
        "gates": ["failed_workers==0"],
        "default_gates": [],
    }
    run = RunData(folder=tmp_path / "[r1]:llama:", meta=meta, results=rows, summary=summarize(rows))
    buffer = io.StringIO()
    console = make_console()
    console.file = buffer
    print_judgement(console, judge(run))
    text = buffer.getvalue()
    assert "FAIL [[r1]:llama:] failed_workers==0" in text  # no markup, no emoji code (generated:llama:...)
    assert ERROR in text  # the failed-worker note quotes the error as it is


def test_emoji_codes_in_model_names_are_printed_verbatim():
    """The generated decoder is ``generated:llama:5x1024...``: rich's emoji codes turned it into a llama."""
    console = make_console()
    console.file = io.StringIO()
    console.print("note: the generated decoder (generated:llama:5x1024xfp32) :smile:")
    assert "generated:llama:5x1024xfp32) :smile:" in console.file.getvalue()


def test_progress_prints_worker_errors_verbatim(capsys):
    progress = Progress()
    progress.console.file = io.StringIO()
    result = GroupResult(_rows(), None)
    progress.group_started(0, 1, group_spec("heap"))
    progress.group_finished(0, 1, group_spec("heap"), result)
    text = progress.console.file.getvalue()
    assert ERROR in text and "1 failed" in text and "[1/1]" in text
