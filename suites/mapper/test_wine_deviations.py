"""Where Wine's Windows differs from Microsoft's, as the Python code meets it (the Wine lane runs
the suites on Windows CPython under Wine): each deviation is a skip, under Wine only, of the tests
it breaks, with what Windows does and the source; and here a test that fails the day Wine stops
deviating, so the skip cannot outlive its reason. (What the C probes meet is listed in
test_wine_differential.py and test_wine_winmem.py.) Elsewhere these tests skip.
"""

from __future__ import annotations

import os

import pytest
from mapper_support import SYMLINK_DEVIATION, WINE

pytestmark = pytest.mark.skipif(not WINE, reason="runs under Wine only (the Wine lane)")


def test_wine_still_creates_no_symlink(tmp_path):
    """symlink_or_skip skips under Wine because the link is never created: once Wine creates
    it, the symlink tests run there too and this test says so."""
    target = tmp_path / "target.bin"
    target.write_bytes(b"x")
    link = tmp_path / "link.bin"
    link.symlink_to(target)  # reports success
    assert not os.path.lexists(link), f"Wine {WINE} now creates symlinks: drop the skip ({SYMLINK_DEVIATION})"
