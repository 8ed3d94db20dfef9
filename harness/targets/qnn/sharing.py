"""The list path's provider options (``--resource-sharing``); the Linux simulator refuses them (NOT_SUPPORTED)."""

from __future__ import annotations

import re

#: --resource-sharing value -> the provider option it sets to "1"
SHARING_OPTIONS = {
    "vtcm-backup-buffer": "enable_vtcm_backup_buffer_sharing",
    "htp-share-resource": "htp_share_resource_optimization",
}
RESOURCE_SHARING_CHOICES = ("none", *SHARING_OPTIONS)
_NOT_SUPPORTED = re.compile(r"SetupBackend failed[^\n]*?(QNN_COMMON_ERROR_NOT_SUPPORTED[^\n,]*)")


def parse_resource_sharing(text: str) -> str:
    if text not in RESOURCE_SHARING_CHOICES:
        raise ValueError(f"choices are {', '.join(RESOURCE_SHARING_CHOICES)}")
    return text


def sharing_provider_options(choice: str) -> dict[str, str]:
    """The provider options a --resource-sharing choice sets ({} for "none")."""
    return {SHARING_OPTIONS[choice]: "1"} if choice in SHARING_OPTIONS else {}


def refusal(log_text: str, provider_options: dict | None) -> str | None:
    """The backend's NOT_SUPPORTED refusal of a shared-resource option, in words, or None."""
    given = [key for key in SHARING_OPTIONS.values() if (provider_options or {}).get(key) == "1"]
    m = _NOT_SUPPORTED.search(log_text or "")
    if not given or m is None:
        return None
    return (
        f"the QNN backend refused {', '.join(f'{k}=1' for k in given)}: SetupBackend failed with "
        f"{m.group(1).strip()} (not supported by this backend on this platform: the shared-resource "
        "list path cannot be exercised here)"
    )
