"""The Windows memory container of `run --memory-limit` and `capacity`
(`harness.runner._jobmem`), checked against a real kernel32 (Wine's): a C probe
(`_wine_jobmem.c`, compiled with mingw at test time) makes the group's kill-on-close job with
`spawn.py`'s flags and the memory job with `_jobmem`'s limit class, flags and completion-port
class, starts a child suspended, assigns it to both in the order `group.py` does (the memory job
nests below the group's), lets it commit more than the limit, then drains the port as `_jobmem`
does (message id, process id) and queries the job.

What Wine 8 showed: every call `_jobmem` makes succeeds (the job, the limit, the port, the nested
assignment), the structure layouts equal `_jobmem`'s ctypes ones, and the port delivers the
job's messages with the child's pid in the overlapped pointer (JOB_OBJECT_MSG_NEW_PROCESS,
EXIT_PROCESS, ACTIVE_PROCESS_ZERO). But Wine does not enforce a job memory limit: the commit past
it succeeds, no JOB_OBJECT_MSG_JOB_MEMORY_LIMIT is posted, and QueryInformationJobObject returns
0 for the limit and the peak. Those are `KNOWN_WINE_DEVIATIONS`, with Microsoft's documentation;
a test fails once Wine stops showing one. The enforcement itself is checked on real Windows
(`test_jobmem_windows.py`, the Windows lanes). Skips, with the reason, where Wine or mingw is not
installed."""

from __future__ import annotations

import ctypes
from pathlib import Path

import _wine_fixtures
import pytest

from harness.runner import _jobmem
from mapper_impl import _winapi

mingw = _wine_fixtures.mingw  # the session fixture, for pytest
pytestmark = [
    pytest.mark.xdist_group("wine"),
    pytest.mark.skipif(ctypes.sizeof(ctypes.c_size_t) != 8, reason="the probe is x86_64: 64-bit layouts"),
]
SOURCE = Path(__file__).with_name("_wine_jobmem.c")
LIMIT_MIB, COMMIT_MIB = 64, 128  # the child commits twice the limit
MSG_NEW_PROCESS, MSG_EXIT_PROCESS, MSG_ACTIVE_PROCESS_ZERO = 6, 7, 4  # winnt.h JOB_OBJECT_MSG_*
#: Where Wine 8 differs from Microsoft's documentation of job memory limits
#: (learn.microsoft.com/windows/win32/api/winnt/ns-winnt-jobobject_extended_limit_information:
#: "If the LimitFlags member specifies JOB_OBJECT_LIMIT_JOB_MEMORY, this member specifies the
#: limit for the virtual memory that can be committed for the job"; .../ns-winnt-jobobject_
#: associate_completion_port: JOB_OBJECT_MSG_JOB_MEMORY_LIMIT "indicates that a process
#: associated with the job caused the job to exceed the job-wide memory limit").
KNOWN_WINE_DEVIATIONS = {
    "commit past the job memory limit succeeds": lambda child, drained: child["big"] is True,
    "no JOB_OBJECT_MSG_JOB_MEMORY_LIMIT is posted": lambda child, drained: (
        not any(m == _jobmem.MSG_JOB_MEMORY_LIMIT for m, _ in drained["messages"])
    ),
    "QueryInformationJobObject returns 0 for the limit and the peak": lambda child, drained: (
        drained["limit_back"] == 0 and drained["peak_job_memory"] == 0
    ),
}


@pytest.fixture(scope="session")
def jobmem(mingw, request):
    """``run(*args)``: the compiled probe under Wine, its JSON lines."""
    return _wine_fixtures._probe(mingw, request, SOURCE)[0]


def test_structures_have_the_layout_windows_headers_give(jobmem):
    (line,) = jobmem("sizes")
    sizes = line["sizes"]
    limit = _jobmem.EXTENDED_LIMIT_INFORMATION
    assert sizes["extended"] == ctypes.sizeof(limit)
    assert sizes["job_memory_limit_at"] == limit.JobMemoryLimit.offset
    assert sizes["peak_job_memory_at"] == limit.PeakJobMemoryUsed.offset
    assert sizes["port"] == ctypes.sizeof(_jobmem.ASSOCIATE_COMPLETION_PORT)
    assert sizes["port_handle_at"] == _jobmem.ASSOCIATE_COMPLETION_PORT.CompletionPort.offset


@pytest.fixture(scope="module")
def limited(jobmem):
    """(made, child, drained): one run of the limit sequence with `_jobmem`'s own constants."""
    made, child, drained = jobmem(
        "limit",
        str(_jobmem.EXTENDED_LIMIT_INFORMATION_CLASS),
        hex(_jobmem.LIMIT_FLAGS),
        str(_jobmem.ASSOCIATE_COMPLETION_PORT_INFORMATION),
        str(LIMIT_MIB),
        str(COMMIT_MIB),
        hex(_winapi.JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE),
    )
    return made, child, drained


def test_every_call_of_the_container_succeeds_nested_below_the_group_job(limited):
    made, child, _ = limited
    assert made["job"] and made["set"] and made["port"] and made["associated"], made
    assert made["in_outer"] and made["assigned"], made  # the group's kill-on-close job first, as group.py
    assert child["child"] == made["pid"] and child["small"] is True, child


def test_the_port_names_the_process_as_the_container_reads_it(limited):
    """Messages are (id, pid) as `_jobmem._drain` reads them: the job's own lifecycle messages
    carry the child's pid, so a JOB_MEMORY_LIMIT message would name the worker that hit it."""
    made, _, drained = limited
    messages = [tuple(m) for m in drained["messages"]]
    assert (MSG_NEW_PROCESS, made["pid"]) in messages and (MSG_EXIT_PROCESS, made["pid"]) in messages, messages
    assert drained["queried"] is True


@pytest.mark.parametrize("deviation", sorted(KNOWN_WINE_DEVIATIONS))
def test_known_wine_deviations_still_hold(limited, deviation):
    """Fails once Wine enforces job memory limits: then the enforcement can be checked here too."""
    _, child, drained = limited
    assert KNOWN_WINE_DEVIATIONS[deviation](child, drained), (deviation, child, drained)
