"""One client connection of the filtering proxy: HTTP CONNECT (tunnels, for https and anything
else) and plain HTTP requests in absolute form, checked against an allowlist.

For each request the proxy reads the head (at most :data:`MAX_HEAD` bytes), takes the host
and port from the request target (never from a ``Host`` header), refuses a name the list does
not allow, resolves an allowed name itself, checks every address it got
(:func:`._addresses.refusal`), and connects to the first one that passes, so the address it
checked is the address it reaches (a name that resolves again to something else later changes
nothing). Plain HTTP is sent on with the request line in origin form, the ``Proxy-*`` headers
dropped and ``Connection: close`` (one request per connection: a client's next request may
name another host). A refusal is answered ``403`` with a body that says why and how to allow
the name, recorded by the caller and logged.
"""

from __future__ import annotations

import ipaddress
import logging
import socket
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

import anyio
import anyio.abc

from codemode.network._addresses import Address, refusal
from codemode.network._domains import allows, listed_exactly, normalize

__all__ = ["MAX_HEAD", "Connector", "Refused", "Resolver", "handle_client"]

#: Most bytes of a request head (request line and headers) the proxy reads.
MAX_HEAD = 64 * 1024
#: Seconds a client has to send its request head; the proxy has to connect upstream.
HEAD_TIMEOUT = 30.0
CONNECT_TIMEOUT = 15.0
_CHUNK = 65536

log = logging.getLogger("codemode.network")

Resolver = Callable[[str, int], Awaitable[Sequence[Address]]]
"""Resolves a host name to addresses (the proxy's own lookup; tests pass a fake)."""
Connector = Callable[[Address, int], Awaitable[anyio.abc.ByteStream]]
"""Connects to one checked address (tests wrap it to see every attempt)."""


@dataclass(frozen=True)
class Refused:
    """A connection the proxy refused.

    Attributes:
        host: The name (or address) the client asked for, as it wrote it.
        port: The port.
        reason: Why.
    """

    host: str
    port: int
    reason: str

    def text(self) -> str:
        """One line: ``host:port (reason)``."""
        return f"{self.host}:{self.port} ({self.reason})"


async def resolve(host: str, port: int) -> list[Address]:
    """The system resolver's addresses of ``host`` for TCP, in its order."""
    found = await anyio.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return [ipaddress.ip_address(str(info[4][0]).split("%", 1)[0]) for info in found]


async def connect(address: Address, port: int) -> anyio.abc.ByteStream:
    """A TCP connection to exactly ``address`` (no lookup)."""
    return await anyio.connect_tcp(str(address), port)


class _BadRequest(Exception):
    pass


async def _read_head(stream: anyio.abc.ByteStream) -> tuple[bytes, bytes]:
    """The request head (through the blank line) and whatever the client sent after it."""
    data = b""
    while b"\r\n\r\n" not in data:
        if len(data) > MAX_HEAD:
            raise _BadRequest(f"request head over {MAX_HEAD} bytes")
        try:
            data += await stream.receive(_CHUNK)
        except anyio.EndOfStream:
            raise _BadRequest("the client closed before its request head ended") from None
    head, _, rest = data.partition(b"\r\n\r\n")
    return head, rest


def _host_port(authority: str, default: int | None) -> tuple[str, int]:
    if authority.startswith("["):
        host, _, tail = authority[1:].partition("]")
        port_text = tail[1:] if tail.startswith(":") else ""
    else:
        host, _, port_text = authority.rpartition(":") if ":" in authority else (authority, "", "")
    if not port_text:
        if default is None:
            raise _BadRequest("CONNECT needs host:port")
        return host, default
    if not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise _BadRequest(f"bad port {port_text!r}")
    return host, int(port_text)


@dataclass(frozen=True)
class _Request:
    method: str
    host: str
    port: int
    head: bytes  # what to send upstream (plain HTTP), empty for CONNECT


def _parse(head: bytes) -> _Request:
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/"):
        raise _BadRequest("not an HTTP request line")
    method, target, version = parts
    if method == "CONNECT":
        host, port = _host_port(target, None)
        return _Request(method, host, port, b"")
    if not target.lower().startswith("http://"):
        raise _BadRequest("a proxy request needs an absolute http:// URL (https goes through CONNECT)")
    rest = target[len("http://") :]
    authority, slash, path = rest.partition("/")
    authority = authority.rpartition("@")[2]  # user:password@ is not the host
    host, port = _host_port(authority, 80)
    kept = [
        line
        for line in lines[1:]
        if line and not line.lower().startswith(("proxy-", "connection:", "keep-alive:"))
    ]
    origin = slash + path or "/"
    upstream = "\r\n".join([f"{method} {origin} {version}", *kept, "Connection: close"])
    return _Request(method, host, port, (upstream + "\r\n\r\n").encode("latin-1"))


def _answer(status: str, text: str) -> bytes:
    body = (text + "\n").encode()
    return (
        f"HTTP/1.1 {status}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {len(body)}\r\n"
        "Connection: close\r\nX-Codemode-Proxy: refused\r\n\r\n"
    ).encode() + body


async def _target(
    host: str, port: int, allow: Sequence[str], resolver: Resolver
) -> tuple[Address | None, str | None]:
    """The checked address to connect to, or why not."""
    name = normalize(host)
    if not allows(allow, name):
        return None, "not on the allowlist"
    exact = listed_exactly(allow, name)
    try:
        addresses: Sequence[Address] = [ipaddress.ip_address(name)]
    except ValueError:
        try:
            addresses = await resolver(name, port)
        except OSError as exc:
            return None, f"the name does not resolve ({exc.strerror or exc})"
    reasons = []
    for address in addresses:
        why = refusal(address, port, exact=exact)
        if why is None:
            return address, None
        reasons.append(why)
    return None, reasons[0] if reasons else "the name has no address"


async def _relay(source: anyio.abc.ByteStream, sink: anyio.abc.ByteStream) -> None:
    try:
        async for chunk in source:
            await sink.send(chunk)
    except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
        pass
    finally:
        try:
            await sink.send_eof()
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            pass


async def handle_client(
    client: anyio.abc.ByteStream,
    allow: Sequence[str],
    on_refusal: Callable[[Refused], None],
    *,
    resolver: Resolver = resolve,
    connector: Connector = connect,
) -> None:
    """Serve one client connection to its end; ``client`` is closed on return.

    Args:
        client: The connection from a confined command.
        allow: The checked allowlist entries.
        on_refusal: Called with each refusal (before the client is answered).
        resolver: Looks names up.
        connector: Connects to a checked address.
    """
    async with client:
        try:
            with anyio.fail_after(HEAD_TIMEOUT):
                head, rest = await _read_head(client)
            request = _parse(head)
        except (_BadRequest, TimeoutError, anyio.BrokenResourceError, OSError) as exc:
            with anyio.move_on_after(5):
                await client.send(_answer("400 Bad Request", f"codemode proxy: {exc}"))
            return
        address, why = await _target(request.host, request.port, allow, resolver)
        if address is None:
            refused = Refused(request.host, request.port, why or "refused")
            log.warning("network proxy refused %s:%s: %s", request.host, request.port, refused.reason)
            on_refusal(refused)
            text = (
                f"codemode proxy refused {refused.text()}. To reach it, add {normalize(request.host)!r} "
                "to the call's network allowlist (network: {\"allow\": [...]}) or the host's (--network-allow)."
            )
            with anyio.move_on_after(5):
                await client.send(_answer("403 Forbidden", text))
            return
        try:
            with anyio.fail_after(CONNECT_TIMEOUT):
                upstream = await connector(address, request.port)
        except (OSError, TimeoutError) as exc:
            with anyio.move_on_after(5):
                await client.send(
                    _answer("502 Bad Gateway", f"codemode proxy: connecting to {address} failed ({exc})")
                )
            return
        async with upstream:
            if request.method == "CONNECT":
                await client.send(b"HTTP/1.1 200 Connection established\r\n\r\n")
            else:
                await upstream.send(request.head)
            if rest:
                await upstream.send(rest)
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(_relay, client, upstream)
                tasks.start_soon(_relay, upstream, client)
