"""Sandbox policy (plain data) and its Landlock enforcement."""

from codemode.sandbox._enforce import (
    Confinement,
    LandlockStatus,
    explain_denial,
    landlock_status,
    prepare_confinement,
)
from codemode.sandbox._policy import SandboxMode, SandboxPolicy

__all__ = [
    "Confinement",
    "LandlockStatus",
    "SandboxMode",
    "SandboxPolicy",
    "explain_denial",
    "landlock_status",
    "prepare_confinement",
]
