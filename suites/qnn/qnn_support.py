"""Shared by the qnn suites: whether the real QNN EP can run here at all.

`qnn_skip_reason` is shared with the model suites, so it lives in the checkout's conftest
(the suite folders cannot import each other); the qnn suites import it from here.
"""

from __future__ import annotations

from conftest import qnn_skip_reason

__all__ = ["qnn_skip_reason"]
