"""The facts ``codemode doctor`` prints about a Host: engine, tokenizer, state dir, temp dirs
and the sandbox layers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from codemode._results import HostConfig
from codemode.budget import TokenCounter
from codemode.sandbox import SandboxPolicy, quota_report

__all__ = ["doctor_report"]


def doctor_report(
    config: HostConfig, counter: TokenCounter, policy: SandboxPolicy, state_dir: Path | None
) -> dict[str, Any]:
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
            "writable_roots": [str(r) for r in policy.writable_roots],
            "landlock_abi": status.abi,
            "fs_rights": list(status.fs_rights),
            "network_rules": status.network_rules,
            "net_rights": list(status.net_rights),
            "scopes": list(status.scopes),
            "reason": status.reason,
            "summary": status.describe(),
            "layers": [vars(layer) for layer in sandbox_report(policy)],
        },
    }


def _os_facts(release: dict[str, str], find: Any) -> dict[str, Any]:
    """The distribution and the package manager installs use (bash's description names it)."""
    manager = find(release=release)
    return {
        "name": release.get("PRETTY_NAME") or release.get("NAME") or "unknown",
        "id": release.get("ID"),
        "package_manager": None if manager is None else manager.name,
        "install": None if manager is None else list(manager.argv),
    }
