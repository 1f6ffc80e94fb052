"""Network by domain: the host's filtering proxy (HTTP CONNECT and plain HTTP) that confined
commands with an allowlist reach through their own network namespace, and the allowlists as
data (which names an entry allows, whether one list narrows another)."""

from typing import TYPE_CHECKING

from codemode._lazy import lazy_exports

if TYPE_CHECKING:
    from codemode.network._addresses import own_addresses, protect_front, refusal, release_front
    from codemode.network._domains import (
        MAX_ENTRIES,
        allows,
        check_entries,
        check_entry,
        covers,
        listed_exactly,
        normalize,
        uncovered,
    )
    from codemode.network._proxy import MAX_HEAD, Refused, handle_client
    from codemode.network._service import PROXY_PORT, Channel, NetworkProxy, network_proxy, proxy_env

if not TYPE_CHECKING:  # each name loads its module at first use (codemode._lazy)
    __getattr__, __dir__ = lazy_exports(
        __name__,
        {
            "._addresses": (
                "own_addresses",
                "protect_front",
                "refusal",
                "release_front",
            ),
            "._domains": (
                "MAX_ENTRIES",
                "allows",
                "check_entries",
                "check_entry",
                "covers",
                "listed_exactly",
                "normalize",
                "uncovered",
            ),
            "._proxy": (
                "MAX_HEAD",
                "Refused",
                "handle_client",
            ),
            "._service": (
                "PROXY_PORT",
                "Channel",
                "NetworkProxy",
                "network_proxy",
                "proxy_env",
            ),
        },
    )

__all__ = [
    "MAX_ENTRIES",
    "MAX_HEAD",
    "PROXY_PORT",
    "Channel",
    "NetworkProxy",
    "Refused",
    "allows",
    "check_entries",
    "check_entry",
    "covers",
    "handle_client",
    "listed_exactly",
    "network_proxy",
    "normalize",
    "own_addresses",
    "protect_front",
    "proxy_env",
    "refusal",
    "release_front",
    "uncovered",
]
