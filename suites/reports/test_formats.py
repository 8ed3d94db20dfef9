"""Format versions that migrate (issue 29, item 4).

A run folder says which format it was written in (metadata.json's ``format_version``); each
change of a file's shape bumps `schema.FORMAT_VERSION` with an ``update_to_N`` step in
`harness.core.migrate`, and an older folder is brought up to date when it is loaded, in memory.

TEST INPUT: ``data/run-a15ff72`` is a real run folder (cpu target, 16 MiB generated model,
N = 1, 2) written by the harness at commit a15ff72, the last commit of format version 1, text
files only. Tests copy it before use.
"""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import pytest
from report_fixtures import fake_results, metadata, write_run
from test_report_reads_only import fingerprint

from harness.core import migrate, schema
from harness.core.errors import InputError
from harness.core.rundata import load_run
from harness.core.schema import FORMAT_VERSION, OLDEST_FORMAT_VERSION, ResultRow, SummaryRow, columns
from harness.core.tables import read_rows
from harness.core.verdict import judge
from reports import report_main

A15FF72 = Path(__file__).parent / "data" / "run-a15ff72"
#: The columns of each table in format version 2, frozen: a change of the schema's columns is
#: a new format version (bump FORMAT_VERSION, declare the new columns ``since=`` it, add
#: ``update_to_N`` to harness/core/migrate.py, freeze its columns here and say it in
#: docs/results.md), never an edit of this list.
VERSION_2_COLUMNS = {
    "results.csv": (
        "target,mode,disable_file_mapped_weights,processes,sessions_per_process,repeat,worker,pid,path_taken,"
        "map_attempts,fallback_stage,ep_file_mapping,init_s,load_s,create_s,first_run_s,runs,latency_p50_s,"
        "latency_p90_s,latency_p99_s,warmup,concurrency,latency_mean_s,latency_stdev_s,latency_min_s,latency_p95_s,"
        "latency_max_s,inferences_per_s,page_cache,weights_resident_bytes,rss_bytes,uss_bytes,pss_bytes,"
        "private_bytes,peak_bytes,peak_private_bytes,peak_phase,peak_shared_bytes,peak_rss_bytes,peak_sample_hz,"
        "peak_sample_max_gap_s,weights_bytes,output_ok,error,memory_note,exit_code,map_errors,ep_log_tail,"
        "ep_sessions,ep_reason,ep_nodes,memory_ok,mapped_resident_bytes,copied_bytes,runtime_bytes,cpu_s,busy_s,"
        "load_avg,cpu_count,steal_s"
    ),
    "summary.csv": (
        "target,mode,processes,sessions_per_process,repeat,init_s_median,create_s_median,first_run_s_median,"
        "startup_s_median,latency_p50_s_median,latency_p90_s_median,latency_p99_s_median,latency_mean_s,"
        "latency_stdev_s,latency_min_s,latency_p95_s_median,latency_max_s,inferences_per_s,max_peak_private_bytes,"
        "sum_peak_private_bytes,peak_phase,system_min_available_bytes,system_max_committed_bytes,"
        "system_commit_limit_bytes,system_start_available_bytes,system_start_committed_bytes,overcommit_mode,"
        "page_cache,sum_rss_bytes,sum_uss_bytes,sum_pss_bytes,sum_private_bytes,system_delta_bytes,weights_bytes,"
        "ok_workers,failed_workers,fallback_workers,ep_file_mapping,unknown_sessions,retried_sessions,complete,"
        "system_noise_bytes,note,copied_bytes_median,mapped_resident_bytes_median,runtime_bytes,load_avg,"
        "cpu_share_min,contended"
    ),
}

#: Version 3: the timing pass's and the memory container's columns, the EP faults' counts.
VERSION_3_COLUMNS = {
    "results.csv": (
        "target,mode,disable_file_mapped_weights,processes,sessions_per_process,repeat,worker,pid,path_taken,"
        "map_attempts,fallback_stage,ep_file_mapping,init_s,load_s,create_s,first_run_s,runs,latency_p50_s,"
        "latency_p90_s,latency_p99_s,warmup,concurrency,latency_mean_s,latency_stdev_s,latency_min_s,"
        "latency_p95_s,latency_max_s,inferences_per_s,page_cache,weights_resident_bytes,rss_bytes,uss_bytes,"
        "pss_bytes,private_bytes,peak_bytes,peak_private_bytes,peak_phase,peak_shared_bytes,peak_rss_bytes,"
        "peak_sample_hz,peak_sample_max_gap_s,weights_bytes,output_ok,error,memory_note,exit_code,map_errors,"
        "ep_log_tail,ep_sessions,ep_reason,ep_nodes,memory_ok,mapped_resident_bytes,copied_bytes,runtime_bytes,"
        "stale_registrations,late_releases,cpu_s,busy_s,load_avg,cpu_count,steal_s,start,foreign_cpus,floor_s,"
        "memory_limit_bytes,oom_killed,container_peak_bytes"
    ),
    "summary.csv": (
        "target,mode,processes,sessions_per_process,repeat,init_s_median,create_s_median,first_run_s_median,"
        "startup_s_median,latency_p50_s_median,latency_p90_s_median,latency_p99_s_median,latency_mean_s,"
        "latency_stdev_s,latency_min_s,latency_p95_s_median,latency_max_s,inferences_per_s,"
        "max_peak_private_bytes,sum_peak_private_bytes,peak_phase,system_min_available_bytes,"
        "system_max_committed_bytes,system_commit_limit_bytes,system_start_available_bytes,"
        "system_start_committed_bytes,overcommit_mode,page_cache,sum_rss_bytes,sum_uss_bytes,sum_pss_bytes,"
        "sum_private_bytes,system_delta_bytes,weights_bytes,ok_workers,failed_workers,fallback_workers,"
        "ep_file_mapping,unknown_sessions,retried_sessions,complete,system_noise_bytes,note,copied_bytes_median,"
        "mapped_resident_bytes_median,runtime_bytes,load_avg,cpu_share_min,contended,start,foreign_cpus_max,"
        "floor_s_median,memory_limit_bytes,oom_workers,container_peak_bytes"
    ),
}
#: Version 4: the generate workload's columns.
VERSION_4_COLUMNS = {
    "results.csv": VERSION_3_COLUMNS["results.csv"]
    + ",ttft_s,decode_tokens_per_s,token_latency_p50_s,token_latency_p90_s,token_latency_p99_s,kv_cache_bytes,"
    "prefill_private_bytes,last_token_private_bytes,generated_tokens,tokens_ok",
    "summary.csv": VERSION_3_COLUMNS["summary.csv"]
    + ",ttft_s_median,decode_tokens_per_s_median,token_latency_p50_s_median,token_latency_p99_s_median,"
    "sum_kv_cache_bytes",
}
#: Every version's columns, frozen.
FROZEN = {2: VERSION_2_COLUMNS, 3: VERSION_3_COLUMNS, 4: VERSION_4_COLUMNS}


def header(path: Path) -> list[str]:
    with open(path, newline="", encoding="utf-8") as handle:
        return next(csv.reader(handle))


def rewrite_table(path: Path, keep) -> None:
    """Keep only the columns ``keep(name)`` accepts (an older harness's table)."""
    with open(path, newline="", encoding="utf-8") as handle:
        rows = list(csv.reader(handle))
    kept = [i for i, name in enumerate(rows[0]) if keep(name)]
    with open(path, "w", newline="", encoding="utf-8") as handle:
        csv.writer(handle, lineterminator="\n").writerows([[row[i] for i in kept] for row in rows])


def set_version(folder: Path, version: object) -> None:
    meta = json.loads((folder / "metadata.json").read_text())
    meta["format_version"] = version
    (folder / "metadata.json").write_text(json.dumps(meta, indent=1))


@pytest.fixture
def a15ff72(tmp_path) -> Path:
    folder = tmp_path / "run-a15ff72"
    shutil.copytree(A15FF72, folder)
    return folder


def test_the_fixture_is_what_a15ff72_wrote():
    """The committed folder is version 1 with every column the schema had then: the columns of
    version 2 (the bump changed no column, it made them all required)."""
    assert json.loads((A15FF72 / "metadata.json").read_text())["format_version"] == 1
    assert json.loads((A15FF72 / "metadata.json").read_text())["env"]["git_commit"].startswith("a15ff72")
    for name, expected in VERSION_2_COLUMNS.items():
        assert ",".join(header(A15FF72 / name)) == expected, name


def test_a_run_folder_written_by_a15ff72_reports_after_the_bump(a15ff72, tmp_path, capsys):
    """The done-when of item 4: version 1 is read, migrated in memory, judged as its own run
    judged itself (its headline.json is checked against the recomputed figures), reported, and
    left as it was written."""
    before = fingerprint(a15ff72)
    assert report_main([str(a15ff72)]) == 0, capsys.readouterr().out
    assert "[houseB-a15] verdict: PASS" in capsys.readouterr().out
    assert set(fingerprint(a15ff72)) - set(before) == {"report.html"}
    assert {k: v for k, v in fingerprint(a15ff72).items() if k != "report.html"} == before
    run = load_run(a15ff72)
    assert run.written_in == 1 and run.meta["format_version"] == FORMAT_VERSION == 4
    # a15ff72 wrote every column of version 2: only those of versions 3 and 4 are added
    later = {c for v in (3, 4) for t in (ResultRow, SummaryRow) for c in schema.columns_since(t, v)}
    added = {c.strip() for m in run.migrated for c in m.split(" lacked ", 1)[1].split(",")}
    assert added == later, run.migrated
    assert json.loads((a15ff72 / "metadata.json").read_text())["format_version"] == 1  # never rewritten
    assert len(run.results) == 6 and all(r.output_ok and r.memory_ok for r in run.results)
    headline = json.loads((a15ff72 / "headline.json").read_text())
    assert judge(run).verdict == headline["verdict"] == "pass"


def test_an_older_version_1_folder_gets_its_missing_columns_empty_and_says_so(a15ff72, capsys):
    """Version 1 as an older harness wrote it: without the columns added during version 1
    (``since=2``). They come back empty (not measured), completeness is recomputed from the
    workers' rows, and the report says the folder was migrated."""
    later = set(schema.columns_since(ResultRow, 2)) | set(schema.columns_since(SummaryRow, 2))
    assert {"memory_ok", "complete", "peak_private_bytes", "cpu_s"} <= later
    rewrite_table(a15ff72 / "results.csv", lambda name: name not in later)
    rewrite_table(a15ff72 / "summary.csv", lambda name: name not in later)
    (a15ff72 / "headline.json").unlink()  # an older harness wrote none
    run = load_run(a15ff72)
    assert run.written_in == 1
    assert all(r.memory_ok is None and r.peak_private_bytes is None for r in run.results)
    assert len(run.summary) == 4 and all(s.complete is not None for s in run.summary)  # recomputed, never assumed
    assert [m.split(" lacked")[0] for m in run.migrated] == ["results.csv", "summary.csv"] * 3  # to 2, 3, then 4
    assert "memory_ok" in run.migrated[0] and "complete" in run.migrated[1]
    notes = [n for n in judge(run).notes if n.title == "Older run folder"]
    assert (
        len(notes) == 1 and f"format version 1 by an older harness, read as version {FORMAT_VERSION}" in notes[0].text
    )
    assert notes[0].details == run.migrated
    assert report_main([str(a15ff72)]) in (0, 1)  # judged on what it has
    assert "Older run folder" in (a15ff72 / "report.html").read_text()
    capsys.readouterr()


def test_a_version_2_folder_must_have_every_column(a15ff72):
    """From version 2 a missing column is a damaged table, not an older one."""
    set_version(a15ff72, 2)
    assert all(" lacked " in m for m in load_run(a15ff72).migrated)  # only version 3's columns are added
    rewrite_table(a15ff72 / "results.csv", lambda name: name != "memory_ok")
    with pytest.raises(
        InputError,
        match=r"results\.csv: not a results table of this harness: missing column\(s\) "
        r"memory_ok \(format version 2",
    ):
        load_run(a15ff72)
    rows = read_rows(a15ff72 / "results.csv", ResultRow, version=1)  # the same table is a version-1 table
    assert len(rows) == 6 and all(r.memory_ok is None for r in rows)


@pytest.mark.parametrize(
    ("version", "words"),
    [
        (
            FORMAT_VERSION + 1,
            f"format_version {FORMAT_VERSION + 1} was written by a newer harness; this harness "
            f"reads {OLDEST_FORMAT_VERSION}..{FORMAT_VERSION}: update it",
        ),
        (0, "format_version 0 is not a format of this harness"),
        ("2", "format_version a str is not a format of this harness"),
        (True, "format_version True is not a format of this harness"),
        (None, "format_version None is not a format of this harness"),
    ],
)
def test_a_version_this_harness_cannot_read_is_one_line(a15ff72, version, words, capsys):
    set_version(a15ff72, version)
    with pytest.raises(InputError, match="metadata.json: " + words.replace(".", r"\.")):
        load_run(a15ff72)
    assert report_main([str(a15ff72)]) == 2
    assert words in capsys.readouterr().err


def test_every_version_has_its_migration_and_the_columns_are_frozen():
    """A change of the schema's columns without a new version fails here, and says what to do."""
    assert OLDEST_FORMAT_VERSION == 1 and sorted(migrate.MIGRATIONS) == list(range(2, FORMAT_VERSION + 1))
    since = {f.metadata["since"] for row_type in (ResultRow, SummaryRow) for f in schema.fields(row_type)}
    assert since <= set(range(OLDEST_FORMAT_VERSION, FORMAT_VERSION + 1))
    frozen = {"results.csv": columns(ResultRow), "summary.csv": columns(SummaryRow)}
    assert FORMAT_VERSION in FROZEN, "a new format version: freeze its columns here (VERSION_N_COLUMNS)"
    for version, tables in FROZEN.items():  # each version's columns: those declared since it or before
        for name, row_type in (("results.csv", ResultRow), ("summary.csv", SummaryRow)):
            upto = [f.name for f in schema.fields(row_type) if f.metadata["since"] <= version]
            assert ",".join(upto) == tables[name], (version, name)
    for name, now in frozen.items():
        assert ",".join(now) == FROZEN[FORMAT_VERSION][name], (
            f"{name}'s columns changed in format version {FORMAT_VERSION}: bump FORMAT_VERSION, declare the new "
            "columns since= it, add update_to_N in harness/core/migrate.py and describe it in docs/results.md"
        )


def test_the_runner_writes_the_current_version(tmp_path):
    """What the runner's writer leaves is read as current: nothing to migrate."""
    folder = write_run(tmp_path / "now", fake_results(processes=(1,)), metadata(processes=[1]))
    assert json.loads((folder / "metadata.json").read_text())["format_version"] == FORMAT_VERSION
    run = load_run(folder)
    assert run.written_in == FORMAT_VERSION and run.migrated == []


def test_migrating_changes_nothing_on_disk_and_is_idempotent_in_memory(a15ff72):
    before = fingerprint(a15ff72)
    first, second = load_run(a15ff72), load_run(a15ff72)
    assert first.results == second.results and first.summary == second.summary
    assert fingerprint(a15ff72) == before
