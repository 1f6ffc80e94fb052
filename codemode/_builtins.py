"""What a `Host` sets up when it opens, beside its state: the built-in tools over a new process
manager, and the state directory made ready for this host (listed for every host of the user,
what a killed host left behind swept)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import anyio.to_thread

from codemode._results import HostConfig
from codemode.policy import CommandGuard
from codemode.sandbox import register_state_dir, sweep_stale_tmp, tmp_mounts
from codemode.state import Archive, SqlDatabase
from codemode.tools import ToolRegistry, builtin_extensions
from codemode.tools.bash import ProcessManager

__all__ = ["install_builtins", "ready_state_dir"]


def install_builtins(
    registry: ToolRegistry,
    archive: Archive,
    config: HostConfig,
    guard: CommandGuard,
    sessions: SqlDatabase | None = None,
) -> ProcessManager:
    """Register the built-in tools (files, archive, bash, monitor) over a new process manager,
    replacing those of a previous opening; the manager is returned. ``sessions``: the shared
    database that records held sessions (None: the state directory's)."""
    # The process manager pins the logs of completions not yet delivered (so they survive the
    # archive's compaction and expiry that follow the opening).
    processes = ProcessManager(
        archive,
        handoff_seconds=config.handoff_seconds,
        max_background_per_session=config.max_background_per_session,
        command_gate=guard,
        tmp_share_bytes=config.tmp_quota_mb * 1024 * 1024,
        sessions=sessions,
    )
    for name in ("files", "archive", "bash", "monitor"):
        registry.remove_extension(name)
    # Loaded at the first use of one of their tools. The monitor is on by default;
    # host.disable_extension("monitor") removes its tools and guidance.
    for extension in builtin_extensions(processes):
        registry.add_extension(extension)
    return processes


async def ready_state_dir(state_dir: Path, file_trash: Callable[[], object]) -> None:
    """List the state directory for every host of this user (their commands never read it) and
    sweep the session tmpfs a killed host left, filing what rm moved there first."""
    register_state_dir(state_dir)
    if tmp_mounts(state_dir / "tmp"):
        await anyio.to_thread.run_sync(file_trash)
        sweep_stale_tmp(state_dir / "tmp")
