"""Who may use the console, and from where.

- **Login.** ``POST /console/login`` takes the server's token (or a tenant's) in a JSON body and
  answers with two halves of a login, neither the token: a cookie holding a random login id
  (``HttpOnly``: no script reads it; ``SameSite=Strict``: no other site's page sends it;
  ``Path=/console``) and, in the reply, a random key the page keeps in its tab's storage and
  sends with every request (header `KEY_HEADER`; an event stream, which cannot send headers,
  as ``?key=``). Both are needed: a browser sends a cookie to *every port* of a host, so a page
  a confined command serves on another port of 127.0.0.1 would get the cookie, never the key
  (tab storage is per origin, port included). A login lasts `LOGIN_SECONDS`; each tenant keeps
  at most `LOGINS_PER_TENANT` (its oldest go first: no tenant can log another out).
- **Same origin only.** A request whose ``Sec-Fetch-Site`` is not ``same-origin`` (or ``none``:
  typed into the address bar) is refused, and so is one with an ``Origin`` other than the
  server's own (its host and port, either scheme): a page on another port of localhost is the same *site*
  but another origin. A ``POST`` must carry ``Content-Type: application/json`` (an HTML form
  cannot) and its ``Origin``. The ``Host`` must be one the MCP endpoint lets in (DNS rebinding).
- **Headers.** Every answer carries a strict Content-Security-Policy (no inline script, nothing
  from another origin, no framing), ``nosniff``, no referrer, and is not cached.
"""

from __future__ import annotations

import collections
import hmac
import secrets
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from starlette.requests import Request

from codemode.console._errors import ConsoleError

__all__ = ["COOKIE", "HEADERS", "KEY_HEADER", "LOGIN_SECONDS", "Guard", "Login"]

COOKIE = "codemode_console"
KEY_HEADER = "x-codemode-console"
LOGIN_SECONDS = 12 * 3600
LOGINS_PER_TENANT = 1000
# 'unsafe-inline' for styles only: xterm.js sets the terminal's colours and geometry in a
# <style> element it makes; no script runs inline.
_CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
    "font-src 'self'; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
HEADERS = {
    "Content-Security-Policy": _CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-store",
}
_FETCH_SITES = ("same-origin", "none")


@dataclass(frozen=True)
class Login:
    """A logged-in browser: its tenant, when the login ends, the key its page sends."""

    tenant: str
    expires: float
    key: str = ""


class Guard:
    """Logins and the checks of every console request (see the module's docstring).

    Args:
        tenant_of_token: The tenant a token belongs to, or None (compared in constant time).
        host_allowed: Whether a ``Host`` header is one the server answers to.
    """

    def __init__(
        self, tenant_of_token: Callable[[str], str | None], host_allowed: Callable[[str], bool]
    ) -> None:
        self._tenant_of_token = tenant_of_token
        self._host_allowed = host_allowed
        self._logins: collections.OrderedDict[str, Login] = collections.OrderedDict()

    def login(self, token: object) -> tuple[str, Login]:
        """A new login (its id, for the cookie; its key, for the page) for ``token``.

        Raises:
            ConsoleError: 401, the token is not one of the server's.
        """
        tenant = None
        if isinstance(token, str) and token and token.isprintable():
            try:
                tenant = self._tenant_of_token(token)
            except UnicodeError:  # (a lone surrogate: no token has one)
                tenant = None
        if tenant is None:
            raise ConsoleError(
                401, "that is not this server's token: use the one `codemode mcp --http` was started with"
            )
        login_id = secrets.token_urlsafe(32)
        login = Login(tenant, time.time() + LOGIN_SECONDS, secrets.token_urlsafe(32))
        self._logins[login_id] = login
        mine = [held_id for held_id, held in self._logins.items() if held.tenant == tenant]
        for old in mine[: max(0, len(mine) - LOGINS_PER_TENANT)]:
            del self._logins[old]
        return login_id, login

    def logout(self, request: Request) -> None:
        login_id = request.cookies.get(COOKIE)
        if login_id is not None:
            self._logins.pop(login_id, None)

    def check_origin(self, request: Request, *, post: bool) -> None:
        """Refuse what does not come from the console's own page (see the module's docstring).

        Raises:
            ConsoleError: 403 (or 400 for a POST that is not JSON), naming what was wrong.
        """
        headers = request.headers
        host = headers.get("host", "")
        if not self._host_allowed(host):
            raise ConsoleError(403, f"this server does not answer to the host name {host!r}")
        site = headers.get("sec-fetch-site")
        if site is not None and site not in _FETCH_SITES:
            raise ConsoleError(403, f"a {site} request is refused: use the console's own page")
        origin = headers.get("origin")
        # (either scheme: behind a proxy that ends TLS, the page is https and this hop http)
        if origin is not None and origin not in (f"http://{host}", f"https://{host}"):
            raise ConsoleError(403, f"requests from {origin} are refused: use the console's own page")
        if post:
            if origin is None:
                raise ConsoleError(
                    403, "a POST without an Origin header is refused: use the console's own page"
                )
            media_type = headers.get("content-type", "").split(";", 1)[0].strip().lower()
            if media_type != "application/json":
                raise ConsoleError(400, "send a JSON body (Content-Type: application/json)")

    def who(self, request: Request) -> Login:
        """The login of this request: its cookie's, when it also carries that login's key.

        Raises:
            ConsoleError: 401, no login cookie, one that is unknown or too old, or no key or the
                wrong one (compared in constant time).
        """
        login_id = request.cookies.get(COOKIE)
        login = self._logins.get(login_id) if login_id is not None else None
        if login is not None and login.expires < time.time():
            self._logins.pop(str(login_id), None)
            login = None
        key = request.headers.get(KEY_HEADER) or request.query_params.get("key") or ""
        if login is None or not hmac.compare_digest(key.encode("utf-8", "replace"), login.key.encode()):
            raise ConsoleError(401, "log in to the console first (with the server's token)")
        return login


def host_matcher(allowed: Sequence[str]) -> Callable[[str], bool]:
    """A ``Host`` check over the MCP endpoint's list (a ``:*`` suffix: any port)."""
    exact = set(allowed)
    names = {a[:-2] for a in allowed if a.endswith(":*")}

    def allowed_host(host: str) -> bool:
        name, _, port = host.rpartition(":")
        return host in exact or (name in names and port.isdigit())

    return allowed_host
