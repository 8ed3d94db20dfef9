"""Honest figures where the OS refuses one (issue 33 item 2), checked on any OS: a figure the OS
will not give is "not measured: <the OS error>" and the sample keeps the others (under Wine
psutil's memory_full_info fails with WinError 87, and a cpu run used to end "run failed:
running the groups failed (Invalid parameter)"); a Windows PrivateUsage that differs from
PagefileUsage, which Microsoft documents as the same value, is not used."""

from __future__ import annotations

import os
from collections import namedtuple

import psutil
import pytest

from harness.runner import memory, winmem

Pmem = namedtuple("Pmem", "rss vms pagefile private")


def test_a_refused_uss_is_not_measured_and_the_sample_goes_on(monkeypatch):
    def refuse(self):
        err = OSError(22, "Invalid parameter")
        err.winerror = 87
        raise err

    monkeypatch.setattr(psutil.Process, "memory_full_info", refuse)
    sample = memory.sample_process(os.getpid())
    assert sample.rss_bytes and sample.rss_bytes > 0
    assert sample.uss_bytes is None and sample.pss_bytes is None
    assert "USS not measured: Invalid parameter (OS error 87)" in sample.note, sample.note


@pytest.mark.parametrize(
    "info, private, noted",
    [
        (Pmem(100, 50, 50, 50), 50, False),  # Windows: PrivateUsage == PagefileUsage
        (Pmem(100, 50, 50, 6 * 2**30), 50, True),  # Wine: PrivateUsage never written
        (Pmem(100, 50, None, None), None, False),  # no such figures (not Windows)
    ],
)
def test_private_usage_that_differs_from_pagefile_usage_is_not_used(info, private, noted):
    value, note = memory.windows_private(info)
    assert value == private
    assert ("implausible PrivateUsage" in note) is noted, note


def test_the_peak_watch_never_reads_an_unwritten_private_usage():
    """winmem marks PrivateUsage before the call: a kernel that leaves it unwritten (Wine) gives
    PagefileUsage as the private figure, never the 0 the structure held (the peak watch used to
    report a 0 B start-up peak under Wine)."""
    counters = winmem.blank(winmem.PROCESS_MEMORY_COUNTERS_EX)
    counters.PagefileUsage, counters.WorkingSetSize = 64 * 2**20, 80 * 2**20  # what Wine writes
    assert winmem.split(counters) == (64 * 2**20, None)
    counters.PrivateUsage = 65 * 2**20  # what Windows writes
    assert winmem.split(counters) == (65 * 2**20, None)
