"""Network by domain: the host's filtering proxy (HTTP CONNECT and plain HTTP) that confined
commands with an allowlist reach through their own network namespace, and the allowlists as
data (which names an entry allows, whether one list narrows another)."""

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
