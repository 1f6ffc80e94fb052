"""Domain allowlists as data: which names a list allows, and whether one list is within another.

An entry is a host name (``pypi.org``: that name only), a wildcard (``*.githubusercontent.com``:
every name below it, not the name itself) or an IP address literal (that address, written
that way). Names are compared as written, lower-cased and without a trailing dot: allowing
``localhost`` does not allow ``127.0.0.1``, nor the other way round.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable

__all__ = ["allows", "check_entries", "check_entry", "covers", "listed_exactly", "normalize", "uncovered"]

_LABEL = re.compile(r"^[a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?$")
#: Most entries one list holds (a host's or a call's).
MAX_ENTRIES = 256


def normalize(name: str) -> str:
    """``name`` as lists compare it: lower case, no trailing dot, no IPv6 brackets."""
    name = name.strip().lower().rstrip(".")
    if name.startswith("[") and name.endswith("]"):
        name = name[1:-1]
    return name


def _is_address(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def check_entry(text: str) -> str:
    """One allowlist entry, normalized.

    Raises:
        ValueError: Not a host name, a ``*.`` wildcard over a name of two labels or more, or an
            IP address (a URL, a port, a bare ``*`` or ``*.com`` are refused, with the reason).
    """
    entry = normalize(text)
    if _is_address(entry):
        return entry
    name = entry[2:] if entry.startswith("*.") else entry
    labels = name.split(".")
    if not name or len(name) > 253 or not all(_LABEL.match(label) for label in labels):
        raise ValueError(
            f"{text!r} is not a domain: give a host name (pypi.org), a wildcard over its "
            "subdomains (*.githubusercontent.com) or an IP address; no scheme, port or path"
        )
    if entry.startswith("*.") and len(labels) < 2:
        raise ValueError(f"{text!r} is too wide: a wildcard needs a domain of two labels or more")
    return entry


def check_entries(entries: Iterable[str]) -> tuple[str, ...]:
    """Every entry checked and normalized, duplicates dropped, order kept.

    Raises:
        ValueError: An entry is not a domain, or there are more than :data:`MAX_ENTRIES`.
    """
    checked = tuple(dict.fromkeys(check_entry(entry) for entry in entries))
    if len(checked) > MAX_ENTRIES:
        raise ValueError(f"a network allowlist holds at most {MAX_ENTRIES} entries ({len(checked)} given)")
    return checked


def _matches(entry: str, name: str) -> bool:
    if entry.startswith("*."):
        return name.endswith(entry[1:]) and len(name) > len(entry) - 1
    return name == entry


def allows(entries: Iterable[str], name: str) -> bool:
    """Whether a list of checked entries allows the host ``name`` (as a client wrote it)."""
    name = normalize(name)
    return any(_matches(entry, name) for entry in entries)


def listed_exactly(entries: Iterable[str], name: str) -> bool:
    """Whether ``name`` itself is an entry (not only under a wildcard): only then may it reach a
    loopback, private or host address."""
    return normalize(name) in set(entries)


def covers(outer: Iterable[str], entry: str) -> bool:
    """Whether every name ``entry`` allows is allowed by ``outer`` too."""
    if entry.startswith("*."):
        # A wildcard is within a wildcard over its own domain or a parent of it.
        return any(o.startswith("*.") and (entry == o or entry.endswith(o[1:])) for o in outer)
    return allows(outer, entry)


def uncovered(outer: Iterable[str], inner: Iterable[str]) -> tuple[str, ...]:
    """The entries of ``inner`` that ``outer`` does not cover (empty: ``inner`` only narrows)."""
    held = tuple(outer)
    return tuple(entry for entry in inner if not covers(held, entry))
