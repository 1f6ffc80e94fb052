"""INTERFACE STUB — being implemented by the sandbox engineer. Signatures are the contract."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from codemode.sandbox._policy import SandboxPolicy


@dataclass(frozen=True)
class LandlockStatus:
    """What this kernel offers (for `codemode doctor` and fail-closed checks)."""

    abi: int  # 0 when Landlock is unavailable
    fs_rights: tuple[str, ...]
    network_rules: bool
    reason: str | None = None  # why unavailable / simulated


@dataclass(frozen=True)
class Confinement:
    """How to start one child process under a policy.

    ``preexec`` runs in the child between fork and exec (pass it as ``preexec_fn`` to
    subprocess.Popen / ptyprocess); it does only async-signal-safe-ish syscalls (the ruleset
    is built in the parent). ``env`` holds variables to add (TMPDIR). ``None`` preexec means
    unconfined (full-access).
    """

    preexec: Callable[[], None] | None
    env: dict[str, str] = field(default_factory=dict)
    description: str = ""


def landlock_status() -> LandlockStatus:
    raise NotImplementedError


def prepare_confinement(policy: SandboxPolicy) -> Confinement:
    """Raises SandboxUnavailable when a confined mode cannot be enforced (fail closed)."""
    raise NotImplementedError


def explain_denial(output: str, policy: SandboxPolicy) -> str | None:
    """One line naming what the sandbox denied, or None."""
    raise NotImplementedError
