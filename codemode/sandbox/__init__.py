"""Sandbox policy (plain data) and its Landlock enforcement."""

from codemode.sandbox._enforce import (
    ENFORCEMENT_FAILED_EXIT,
    ENFORCEMENT_FAILED_MARKER,
    Confinement,
    LandlockStatus,
    SpawnedProcess,
    check_policy,
    explain_denial,
    landlock_status,
    prepare_confinement,
)
from codemode.sandbox._policy import SandboxMode, SandboxPolicy
from codemode.sandbox._policy_json import policy_from_json, policy_to_json

__all__ = [
    "ENFORCEMENT_FAILED_EXIT",
    "ENFORCEMENT_FAILED_MARKER",
    "Confinement",
    "LandlockStatus",
    "SandboxMode",
    "SandboxPolicy",
    "SpawnedProcess",
    "check_policy",
    "explain_denial",
    "landlock_status",
    "policy_from_json",
    "policy_to_json",
    "prepare_confinement",
]
