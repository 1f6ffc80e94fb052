"""Sandbox policy (plain data) and the one launch path that applies every confinement layer."""

from codemode.sandbox._cgroup import (
    CgroupRoot,
    cgroup_empty,
    cgroup_kill,
    cgroup_members,
    cgroup_remove,
    cgroup_root,
)
from codemode.sandbox._enforce import (
    ENFORCEMENT_FAILED_EXIT,
    ENFORCEMENT_FAILED_MARKER,
    Confinement,
    LandlockStatus,
    LaunchSpec,
    Layer,
    check_policy,
    explain_denial,
    landlock_status,
    launch,
    prepare_confinement,
    sandbox_report,
)
from codemode.sandbox._policy import SandboxMode, SandboxPolicy
from codemode.sandbox._policy_json import policy_from_json, policy_to_json
from codemode.sandbox._spawn import Process

__all__ = [
    "ENFORCEMENT_FAILED_EXIT",
    "ENFORCEMENT_FAILED_MARKER",
    "CgroupRoot",
    "Confinement",
    "LandlockStatus",
    "LaunchSpec",
    "Layer",
    "Process",
    "SandboxMode",
    "SandboxPolicy",
    "cgroup_empty",
    "cgroup_kill",
    "cgroup_members",
    "cgroup_remove",
    "cgroup_root",
    "check_policy",
    "explain_denial",
    "landlock_status",
    "launch",
    "policy_from_json",
    "policy_to_json",
    "prepare_confinement",
    "sandbox_report",
]
