"""Which addresses the proxy connects to: checked after it resolves a name itself, before it
connects.

* never: link-local addresses (the cloud metadata service, 169.254.169.254 and its IPv6 forms)
  and the host's own front (the MCP HTTP server's address and port, :func:`protect_front`);
* only for a name listed exactly (``localhost``, not under a wildcard): loopback, private and
  other non-global addresses, and the host's own addresses;
* every other (global) address: for any listed name.
"""

from __future__ import annotations

import contextlib
import fcntl
import ipaddress
import socket
import struct
import threading
import time

__all__ = ["Address", "own_addresses", "protect_front", "refusal", "release_front"]

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
#: Metadata services outside link-local space (AWS's IPv6 one, Alibaba's, Oracle's).
_METADATA = frozenset(ipaddress.ip_address(a) for a in ("fd00:ec2::254", "100.100.100.200", "192.0.0.192"))
_SIOCGIFADDR = 0x8915
_OWN_TTL = 10.0

_lock = threading.Lock()
_fronts: dict[tuple[str, int], int] = {}  # (bound address or "" for any, port) -> holders
_own: tuple[float, frozenset[Address]] = (0.0, frozenset())


def protect_front(host: str, port: int) -> None:
    """Keep the proxy from ever connecting to the host's front listening at ``host:port``
    (``0.0.0.0``/``::``/``""``: on every address of this machine). Call :func:`release_front`
    with the same arguments when it stops listening."""
    key = ("" if host in ("", "0.0.0.0", "::") else host, port)
    with _lock:
        _fronts[key] = _fronts.get(key, 0) + 1


def release_front(host: str, port: int) -> None:
    """Undo one :func:`protect_front`."""
    key = ("" if host in ("", "0.0.0.0", "::") else host, port)
    with _lock:
        left = _fronts.get(key, 0) - 1
        if left > 0:
            _fronts[key] = left
        else:
            _fronts.pop(key, None)


def _interface_addresses() -> set[Address]:
    found: set[Address] = set()
    with contextlib.suppress(OSError), socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        for _, name in socket.if_nameindex():
            with contextlib.suppress(OSError):
                packed = fcntl.ioctl(probe.fileno(), _SIOCGIFADDR, struct.pack("256s", name.encode()[:15]))
                found.add(ipaddress.IPv4Address(packed[20:24]))
    with contextlib.suppress(OSError), open("/proc/net/if_inet6") as table:
        for line in table:
            digits = line.split()[0]
            found.add(ipaddress.IPv6Address(bytes.fromhex(digits)))
    return found


def own_addresses() -> frozenset[Address]:
    """The addresses of this machine's interfaces (read again every ten seconds at most)."""
    global _own
    with _lock:
        stamp, cached = _own
    if time.monotonic() - stamp < _OWN_TTL:
        return cached
    found = frozenset(_interface_addresses())
    with _lock:
        _own = (time.monotonic(), found)
    return found


def _plain(address: Address) -> Address:
    """An IPv4-mapped or -compatible IPv6 address as the IPv4 address it reaches."""
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return address.ipv4_mapped
        if address.sixtofour is not None or address.teredo is not None:
            return address  # not global either: refused below unless listed exactly
    return address


def _is_front(address: Address, port: int) -> bool:
    with _lock:
        fronts = list(_fronts)
    for host, front_port in fronts:
        if front_port != port:
            continue
        if host == "":
            if address.is_loopback or address.is_unspecified or address in own_addresses():
                return True
            continue
        with contextlib.suppress(ValueError):
            bound = _plain(ipaddress.ip_address(host))
            if bound == address or (bound.is_unspecified and address.version == bound.version):
                return True
        if host == "localhost" and address.is_loopback:
            return True
    return False


def refusal(address: Address, port: int, *, exact: bool) -> str | None:
    """Why the proxy must not connect to ``address:port``, or None when it may.

    Args:
        address: An address a listed name resolved to (or the listed address itself).
        port: The port asked for.
        exact: Whether the name was listed exactly (not only under a wildcard).
    """
    address = _plain(address)
    if address.is_link_local or address in _METADATA:
        return f"{address} is link-local (the cloud metadata service lives there); never reachable"
    if address.is_multicast or address.is_unspecified:
        return f"{address} is not a host address"
    if _is_front(address, port):
        return f"{address}:{port} is this host's own front; never reachable"
    if exact:
        return None
    if address.is_loopback:
        return f"{address} is a loopback address; reachable only for a name listed exactly, not by a wildcard"
    if not address.is_global:
        return f"{address} is a private address; reachable only for a name listed exactly, not by a wildcard"
    if address in own_addresses():
        return f"{address} is this host's own address; reachable only for a name listed exactly"
    return None
