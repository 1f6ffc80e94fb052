"""A stdio transport over a process started through the sandbox's launch path.

The SDK's ``stdio_client`` starts its process itself (``anyio.open_process``) and cannot take
one already started, so a confined server (``"sandbox": ...``) gets this one: the process is
started by `codemode.sandbox.launch` with pipes for stdin and stdout and the server's log as
stderr; two tasks move newline-delimited JSON-RPC messages between the pipes and the memory
streams a `ClientSession` reads and writes, as the SDK's transport does. Shutting down closes
stdin, gives the server two seconds to exit, then ends its process group (TERM, then KILL).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

import anyio
import anyio.to_thread
from mcp import types
from mcp.shared.message import SessionMessage

from codemode.sandbox import LaunchSpec, Process, SandboxPolicy, launch

__all__ = ["sandboxed_stdio"]

_GRACE_SECONDS = 2.0


def _parse(line: bytes) -> SessionMessage | Exception:
    try:
        return SessionMessage(types.jsonrpc_message_adapter.validate_json(line, by_name=False))
    except ValueError as exc:
        return exc


async def _stop(proc: Process) -> None:
    """Wait for the process to exit after its stdin closed; then TERM, then KILL its group."""
    for sig in (None, signal.SIGTERM, signal.SIGKILL):
        if sig is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, sig)
        try:
            await anyio.to_thread.run_sync(proc.wait, _GRACE_SECONDS)
            return
        except subprocess.TimeoutExpired:
            continue


@contextlib.asynccontextmanager
async def sandboxed_stdio(
    argv: Sequence[str], *, cwd: str, env: Mapping[str, str], policy: SandboxPolicy, stderr_fd: int
) -> AsyncIterator[tuple[Any, Any]]:
    """Start ``argv`` under ``policy`` and yield the (read, write) streams of its stdio.

    Raises:
        SandboxUnavailable: The policy's layers cannot be applied here; nothing ran.
        OSError: The program could not be started.
    """
    in_r, in_w = os.pipe()
    out_r, out_w = os.pipe()
    try:
        proc = launch(LaunchSpec(argv=argv, cwd=cwd, env=env, policy=policy, stdio=(in_r, out_w, stderr_fd)))
    except BaseException:
        for fd in (in_r, in_w, out_r, out_w):
            os.close(fd)
        raise
    os.close(in_r)
    os.close(out_w)
    os.set_blocking(in_w, False)
    os.set_blocking(out_r, False)
    read_send, read_recv = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    write_send, write_recv = anyio.create_memory_object_stream[SessionMessage](0)

    async def reader() -> None:
        pending = b""
        async with read_send:
            while True:
                await anyio.wait_readable(out_r)
                try:
                    chunk = os.read(out_r, 1 << 16)
                except BlockingIOError:
                    continue
                if not chunk:
                    return
                *lines, pending = (pending + chunk).split(b"\n")
                for line in lines:
                    if line.strip():
                        try:
                            await read_send.send(_parse(line))
                        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                            return

    async def writer() -> None:
        async with write_recv:
            async for message in write_recv:
                data = (message.message.model_dump_json(by_alias=True, exclude_unset=True) + "\n").encode()
                while data:
                    await anyio.wait_writable(in_w)
                    try:
                        data = data[os.write(in_w, data) :]
                    except BlockingIOError:
                        continue
                    except OSError:  # the server closed its stdin (it exited)
                        await read_send.aclose()
                        return

    async with anyio.create_task_group() as tg:
        tg.start_soon(reader)
        tg.start_soon(writer)
        try:
            yield read_recv, write_send
        finally:
            with anyio.CancelScope(shield=True):
                await write_send.aclose()
                anyio.notify_closing(in_w)
                os.close(in_w)
                await _stop(proc)
            tg.cancel_scope.cancel()
    anyio.notify_closing(out_r)
    os.close(out_r)
