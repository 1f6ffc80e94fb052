"""The host's filtering proxy: one event loop on a thread of its own, serving every confined
command whose network is an allowlist.

How a command reaches it: the launcher (``launcher.c``) makes the command a network namespace
of its own with loopback only, listens there on ``127.0.0.1:``:data:`PROXY_PORT`, and hands
that listening socket, with a pidfd of the command, to the host over a socketpair
(SCM_RIGHTS) before it executes the command. :meth:`NetworkProxy.attach` takes the host's end
of the pair: the proxy accepts on the command's listener (connections made before it did wait
in the backlog) and checks each against the command's allowlist (:mod:`._proxy`); when the
command exits (the pidfd) the listener and its connections are closed. No forwarder process
and no socket path: nothing else in the namespace leads out, and nothing outside it leads in.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
from collections.abc import Sequence

import anyio
import anyio.abc
from anyio.from_thread import BlockingPortal

from codemode.network._proxy import Connector, Refused, Resolver, connect, handle_client, resolve

__all__ = ["PROXY_PORT", "Channel", "NetworkProxy", "network_proxy", "proxy_env"]

#: The proxy's port on loopback inside every command's network namespace (each has its own,
#: so one fixed port serves all; ``launcher.c`` listens on the same number).
PROXY_PORT = 3128
#: Connections the proxy serves at once, every command together; more wait in their backlog.
MAX_CONNECTIONS = 256

log = logging.getLogger("codemode.network")


def proxy_env() -> dict[str, str]:
    """The variables that send a command's HTTP clients through the proxy (upper and lower case:
    curl reads only ``http_proxy`` in lower case). ``NO_PROXY`` is emptied so that nothing the
    host's environment names is tried directly (it would fail: only the proxy is reachable)."""
    url = f"http://127.0.0.1:{PROXY_PORT}"
    names = {"HTTP_PROXY": url, "HTTPS_PROXY": url, "ALL_PROXY": url, "NO_PROXY": ""}
    return {**names, **{key.lower(): value for key, value in names.items()}}


class Channel:
    """One command's way to the proxy: its allowlist and the refusals so far.

    Attributes:
        allow: The checked allowlist entries.
        refusals: One line per refused connection (``host:port (reason)``), appended by the
            proxy's thread while the command runs.
    """

    def __init__(self, allow: Sequence[str]) -> None:
        self.allow = tuple(allow)
        self.refusals: list[str] = []

    def refused(self, refusal: Refused) -> None:
        """Record one refusal (at most 100 kept)."""
        if len(self.refusals) < 100:
            self.refusals.append(refusal.text())


class NetworkProxy:
    """The filtering proxy's loop and the commands attached to it.

    Args:
        resolver: Looks names up (default: the system resolver, off the loop).
        connector: Connects to a checked address.
        max_connections: Connections served at once.
    """

    def __init__(
        self,
        *,
        resolver: Resolver = resolve,
        connector: Connector = connect,
        max_connections: int = MAX_CONNECTIONS,
    ) -> None:
        self._resolver = resolver
        self._connector = connector
        self._max = max_connections
        self._lock = threading.Lock()
        self._portal: BlockingPortal | None = None
        self._limit: anyio.Semaphore | None = None
        self._thread: threading.Thread | None = None
        self.active = 0  # connections being served
        self.peak = 0  # the most served at once (the load tests read it)

    def _started(self) -> BlockingPortal:
        with self._lock:
            if self._portal is not None:
                return self._portal
            ready = threading.Event()
            self._thread = threading.Thread(
                target=anyio.run, args=(self._main, ready), name="codemode-network-proxy", daemon=True
            )
            self._thread.start()
            ready.wait()
            assert self._portal is not None
            return self._portal

    async def _main(self, ready: threading.Event) -> None:
        self._limit = anyio.Semaphore(self._max)
        async with BlockingPortal() as portal:
            self._portal = portal
            ready.set()
            await portal.sleep_until_stopped()

    def attach(self, host_end: socket.socket, allow: Sequence[str]) -> Channel:
        """Serve the command at the other end of ``host_end`` (this proxy owns it from now on).

        Args:
            host_end: The host's end of the socketpair whose other end the launcher gets.
            allow: The command's checked allowlist entries.

        Returns:
            The command's channel (its refusals).
        """
        channel = Channel(allow)
        self._started().start_task_soon(self._serve, host_end, channel)
        return channel

    def close(self) -> None:
        """Stop the loop: every command's proxy connections end."""
        with self._lock:
            portal, self._portal = self._portal, None
            thread, self._thread = self._thread, None
        if portal is not None:
            with contextlib.suppress(RuntimeError):
                portal.call(portal.stop, True)
        if thread is not None:
            thread.join(timeout=10)

    async def _serve(self, host_end: socket.socket, channel: Channel) -> None:
        fds: list[int] = []
        with host_end:
            host_end.setblocking(False)
            while True:
                try:
                    await anyio.wait_readable(host_end)
                    _, fds, _, _ = socket.recv_fds(host_end, 16, 2)
                    break
                except BlockingIOError:
                    continue
                except OSError:
                    return
        if len(fds) != 2:  # the launcher stopped before it listened: nothing to serve
            for fd in fds:
                os.close(fd)
            return
        listener = socket.socket(fileno=fds[0])
        pidfd = fds[1]
        try:
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(self._accept, listener, channel)
                await anyio.wait_readable(pidfd)  # the command exited
                tasks.cancel_scope.cancel()
        finally:
            listener.close()
            os.close(pidfd)

    async def _accept(self, listener: socket.socket, channel: Channel) -> None:
        assert self._limit is not None
        listener.setblocking(False)
        async with anyio.create_task_group() as tasks:
            while True:
                await self._limit.acquire()
                try:
                    await anyio.wait_readable(listener)
                    client, _ = listener.accept()
                except BlockingIOError:
                    self._limit.release()
                    continue
                except BaseException:
                    self._limit.release()
                    raise
                tasks.start_soon(self._client, client, channel)

    async def _client(self, client: socket.socket, channel: Channel) -> None:
        assert self._limit is not None
        self.active += 1
        self.peak = max(self.peak, self.active)
        try:
            stream = await anyio.abc.SocketStream.from_socket(client)
            await handle_client(
                stream, channel.allow, channel.refused, resolver=self._resolver, connector=self._connector
            )
        except Exception:  # one connection's failure never stops the others
            log.exception("network proxy: a connection failed")
        finally:
            self.active -= 1
            self._limit.release()


_proxy: tuple[int, NetworkProxy] | None = None
_proxy_lock = threading.Lock()


def network_proxy() -> NetworkProxy:
    """This process's proxy (started on first use; a forked child starts its own)."""
    global _proxy
    with _proxy_lock:
        if _proxy is None or _proxy[0] != os.getpid():
            _proxy = (os.getpid(), NetworkProxy())
        return _proxy[1]
