"""The facts ``codemode doctor`` prints about a Host: engine, tokenizer, state dir, temp dirs
and the sandbox layers."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, NotRequired, TypedDict

from codemode._results import HostConfig
from codemode.budget import TokenCounter
from codemode.sandbox import SandboxPolicy, quota_report

if TYPE_CHECKING:
    from codemode.tools.bash import PackageManager
    from codemode.tools.upstream import McpServerReport

__all__ = ["DoctorReport", "doctor_report"]

EngineFacts = TypedDict(
    "EngineFacts",
    {"quickjs-ng": str, "codemode": str, "mode": str, "workers": "dict[str, object] | None"},
)
"""The engine: QuickJS's and codemode's versions, the engine mode, and for mode ``process``
how its workers are held (`codemode.engine.worker_report`)."""


class TokenizerFacts(TypedDict):
    """The encoding, whether counts are exact, and why not (``fallback``)."""

    encoding: str
    exact: bool
    fallback: str | None


class StateDirFacts(TypedDict):
    """The state directory: its path, whether it exists, its mode (octal) when it does."""

    path: str
    exists: bool
    mode: str | None


class OsFacts(TypedDict):
    """The distribution and the package manager installs use (``install``: its argv)."""

    name: str
    id: str | None
    package_manager: str | None
    install: list[str] | None


class LayerFacts(TypedDict):
    """One sandbox layer (`codemode.sandbox.Layer`)."""

    name: str
    state: str
    detail: str


class SandboxFacts(TypedDict):
    """The sandbox policy in force, what Landlock enforces here, and every layer's state."""

    mode: str
    network: bool
    network_allow: list[str] | None
    writable_roots: list[str]
    landlock_abi: int
    fs_rights: list[str]
    network_rules: bool
    net_rights: list[str]
    scopes: list[str]
    reason: str | None
    summary: list[str]
    layers: list[LayerFacts]


class DoctorReport(TypedDict):
    """`Host.doctor`'s facts (``temp_dirs``: `codemode.sandbox.quota_report`); ``codemode
    doctor`` adds ``mcp_servers`` (`Host.mcp_servers_report`)."""

    engine: EngineFacts
    tokenizer: TokenizerFacts
    state_dir: StateDirFacts
    temp_dirs: dict[str, object]
    os: OsFacts
    sandbox: SandboxFacts
    mcp_servers: NotRequired[list[McpServerReport]]


def doctor_report(
    config: HostConfig, counter: TokenCounter, policy: SandboxPolicy, state_dir: Path | None
) -> DoctorReport:
    """`Host.doctor`'s facts; ``state_dir`` is the open state directory, or None."""
    from codemode._version import __version__
    from codemode.engine import ENGINE_VERSION, worker_report
    from codemode.sandbox import landlock_status, sandbox_report
    from codemode.tools.bash import find_package_manager, os_release

    state = config.state_dir.expanduser()
    status = landlock_status()
    counter.count("x" * 4096)  # force the encoding to load (or fall back) now
    return {
        "engine": {
            "quickjs-ng": ENGINE_VERSION,
            "codemode": __version__,
            "mode": config.engine,
            "workers": worker_report() if config.engine == "process" else None,
        },
        "tokenizer": {
            "encoding": counter.encoding_name,
            "exact": counter.exact,
            "fallback": counter.fallback_reason,
        },
        "state_dir": {
            "path": str(state),
            "exists": state.is_dir(),
            "mode": oct(state.stat().st_mode & 0o777) if state.is_dir() else None,
        },
        "temp_dirs": (
            quota_report(state_dir / "tmp", config.tmp_quota_mb * 1024 * 1024)
            if state_dir is not None
            else {"form": "unknown", "quota_mb": config.tmp_quota_mb, "detail": "state dir not open"}
        ),
        "os": _os_facts(os_release(), find_package_manager),
        "sandbox": {
            "mode": policy.mode.value,
            "network": policy.network,
            "network_allow": None if policy.network_allow is None else list(policy.network_allow),
            "writable_roots": [str(r) for r in policy.writable_roots],
            "landlock_abi": status.abi,
            "fs_rights": list(status.fs_rights),
            "network_rules": status.network_rules,
            "net_rights": list(status.net_rights),
            "scopes": list(status.scopes),
            "reason": status.reason,
            "summary": status.describe(),
            "layers": [
                {"name": layer.name, "state": layer.state, "detail": layer.detail}
                for layer in sandbox_report(policy)
            ],
        },
    }


def _os_facts(release: dict[str, str], find: Callable[..., PackageManager | None]) -> OsFacts:
    """The distribution and the package manager installs use (bash's description names it)."""
    manager = find(release=release)
    return {
        "name": release.get("PRETTY_NAME") or release.get("NAME") or "unknown",
        "id": release.get("ID"),
        "package_manager": None if manager is None else manager.name,
        "install": None if manager is None else list(manager.argv),
    }
