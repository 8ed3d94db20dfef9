"""No verdict without evidence: states that mean "it worked" come from something seen.

- ort-native: ORT decides by itself whether to map its external data, so a mapped-mode worker is
  "mapped" only when its own memory maps show the weights file, "unknown" otherwise.
- a pytest session report: its tests badge is "pass" only when a test passed.
"""

from __future__ import annotations

import mmap

from harness.targets.ort_native import mapped_by_ort
from reports.html import _tests_summary


def test_ort_native_is_mapped_only_when_the_maps_show_the_file(tmp_path):
    mapped, unmapped = tmp_path / "mapped.bin", tmp_path / "copied.bin"
    for path in (mapped, unmapped):
        path.write_bytes(b"w" * 65536)
    with open(mapped, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as view:
        assert view[0] == ord("w")
        assert mapped_by_ort([mapped]) == "mapped"
        assert mapped_by_ort([mapped, unmapped]) == "unknown"
    assert mapped_by_ort([mapped]) == "unknown"


def test_a_session_of_skips_shows_no_pass_badge():
    assert _tests_summary([], {"skipped": 3})["badge"] == "incomplete"
    assert _tests_summary([], {"passed": 2, "skipped": 1})["badge"] == "pass"
    assert _tests_summary([], {"passed": 2, "failed": 1})["badge"] == "fail"
