"""Who may use the HTTP front: one bearer token, or one per tenant.

A tenants file names each tenant and its token, one per line (``NAME TOKEN``; blank lines and
lines starting with ``#`` are skipped). A request is let in by the tenant whose token it
carries (every token compared in constant time); an MCP session belongs to the tenant that
opened it, and a request of another tenant naming it is answered as if it did not exist.
"""

from __future__ import annotations

import hmac
import re
from collections.abc import Mapping

from codemode.errors import UserError

__all__ = ["MIN_TOKEN_CHARS", "ONE_TENANT", "Tenants", "parse_tenants"]

MIN_TOKEN_CHARS = 16
#: The tenant of the front's one token (no tenants file).
ONE_TENANT = "codemode"
_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")
_MAX_TENANTS = 10_000


class Tenants:
    """The tokens the front accepts, each naming its tenant.

    Args:
        by_name: Tenant name -> token (at least one).

    Raises:
        UserError: A name that is not 1-64 of ``A-Za-z0-9_.-``, a token shorter than
            `MIN_TOKEN_CHARS` or with white space, or one token given to two tenants.
    """

    def __init__(self, by_name: Mapping[str, str]) -> None:
        if not by_name:
            raise UserError("no tenant is named: give each a line `NAME TOKEN`")
        if len(by_name) > _MAX_TENANTS:
            raise UserError(f"{len(by_name)} tenants: at most {_MAX_TENANTS}")
        seen: dict[str, str] = {}
        for name, token in by_name.items():
            if not _NAME.fullmatch(name):
                raise UserError(f"tenant name {name!r}: use 1-64 letters, digits, '_', '.' or '-'")
            if len(token) < MIN_TOKEN_CHARS or any(c.isspace() for c in token):
                raise UserError(
                    f"the token of tenant {name!r} must be one word of at least {MIN_TOKEN_CHARS} characters "
                    f"(this one has {len(token)}); make one with `openssl rand -hex 32`"
                )
            if token in seen:
                raise UserError(
                    f"tenants {seen[token]!r} and {name!r} have the same token: give each its own"
                )
            seen[token] = name
        self._tokens = [(token.encode(), name) for token, name in seen.items()]

    @classmethod
    def one(cls, token: str) -> Tenants:
        """The front's one token (tenant `ONE_TENANT`).

        Raises:
            UserError: It is shorter than `MIN_TOKEN_CHARS`.
        """
        if len(token) < MIN_TOKEN_CHARS:
            raise UserError(
                f"the HTTP front's bearer token must be at least {MIN_TOKEN_CHARS} characters (this one has "
                f"{len(token)}); make one with `openssl rand -hex 32`"
            )
        return cls({ONE_TENANT: token})

    @property
    def several(self) -> bool:
        """Whether more than the one token's tenant is named (sessions are then kept apart)."""
        return len(self._tokens) > 1 or self._tokens[0][1] != ONE_TENANT

    def tenant_of(self, token: str) -> str | None:
        """The tenant whose token this is, or None. Every token is compared, each in constant
        time, whichever matches: the time taken says nothing of which one did."""
        presented = token.encode()
        found: str | None = None
        for known, name in self._tokens:
            if hmac.compare_digest(presented, known):
                found = name
        return found


def parse_tenants(text: str, where: str) -> Tenants:
    """A tenants file's text (``NAME TOKEN`` per line) as `Tenants`.

    Raises:
        UserError: A line that is not two words, a name given twice, or what `Tenants` refuses
            (each message names ``where`` and the line).
    """
    by_name: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        words = line.split()
        if len(words) != 2:
            raise UserError(
                f"{where}, line {number}: expected `NAME TOKEN` (two words), got {len(words)} words"
            )
        name, token = words
        if name in by_name:
            raise UserError(f"{where}, line {number}: tenant {name!r} is named twice")
        by_name[name] = token
    try:
        return Tenants(by_name)
    except UserError as exc:
        raise UserError(f"{where}: {exc}") from None
