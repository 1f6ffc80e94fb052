"""``codemode.run_code``: one program run synchronously on a temporary `Host`."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import anyio

from codemode.errors import UserError

if TYPE_CHECKING:
    from codemode._results import RunResult

__all__ = ["run_code"]


def run_code(source: str, **options: Any) -> RunResult:
    """Run one program synchronously on a temporary `Host` (for scripts and REPLs).

    Args:
        source: The program.
        **options: `HostConfig` fields, plus ``session_id``/``call_id``/``max_output_tokens``/
            ``timeout_seconds`` for the run. ``preload_tokenizer`` defaults to False here.

    Raises:
        UserError: Called inside a running event loop (use ``await host.run_code`` there).
    """
    _start_zygote_early(options)
    from codemode.host import Host  # the Host imports this module (it re-exports run_code)

    try:
        import asyncio

        asyncio.get_running_loop()
    except RuntimeError:
        pass
    else:
        raise UserError(
            "codemode.run_code() cannot run inside a running event loop; "
            "use `async with Host(...) as host: await host.run_code(...)`"
        )
    run_keys = ("session_id", "call_id", "max_output_tokens", "timeout_seconds")
    run_options = {k: options.pop(k) for k in run_keys if k in options}
    if "config" not in options:
        # One program: the tokenizer loads only if its output comes near the budget (its
        # usage then counts bytes, an upper bound; see HostConfig.preload_tokenizer).
        options.setdefault("preload_tokenizer", False)

    async def main() -> RunResult:
        async with Host(**options) as host:
            return await host.run_code(source, **run_options)

    return anyio.run(main)


def _start_zygote_early(options: Mapping[str, object]) -> None:
    """In engine mode process, start the engine's zygote before the host's modules import (the
    first call in a process imports them: ~150 ms), so that it boots meanwhile on another CPU.
    Only the mode is read here; a bad one is refused by the Host as usual."""
    config = options.get("config")
    mode = options.get("engine") or getattr(config, "engine", None)
    if mode is None:
        mode = os.environ.get("CODEMODE_ENGINE", "").strip() or "process"
    if mode == "process":
        from codemode import _zygote_start

        _zygote_start.launch_early()
