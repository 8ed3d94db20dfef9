"""The shared-resource (list) path of the QNN EP: ``enable_vtcm_backup_buffer_sharing`` and
``htp_share_resource_optimization``.

With either provider option the EP creates the contexts of several context binaries from one
list (2.7.0: ``CreateContextVtcmBackupBufferSharingEnabled``) and, if anything fails with file
mapping on, the mapping step included, retries the whole list once with the feature disabled
("Failed to create context with file mapping enabled. Error: <e>, Code: <n>. Retrying with
feature disabled."). `mapper_impl.load_context_list` models it; this module lets the qnn target
set the options (``--resource-sharing``) and names the backend's refusal for what it is: on the
Linux x86_64 HTP simulator (onnxruntime-qnn 2.7.0, QNN SDK 2.51) SetupBackend fails with
QNN_COMMON_ERROR_NOT_SUPPORTED as soon as one of them is set, so the list path cannot be
exercised there.
"""

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
