"""A request whose client went away before its answer: the calls it carried are cancelled.

Without an event store no client can resume a response stream, so a call whose stream is
gone can never deliver its answer: it is cancelled as a client's cancellation would cancel it
(its program ends ``cancelled``; a command it runs is stopped, or promoted when its program's
time had run out: the host's rule for a cancelled call). The HTTP front puts a `Disconnect`
in each request's ASGI scope; the tool handler runs the call inside `Disconnect.calls`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import anyio

__all__ = ["SCOPE_KEY", "Disconnect", "of_request"]

SCOPE_KEY = "codemode.disconnect"


class Disconnect:
    """The calls of one HTTP request, cancelled when its client goes away first."""

    def __init__(self) -> None:
        self.gone = False
        self._scopes: set[anyio.CancelScope] = set()

    def client_gone(self) -> None:
        """The client disconnected before the answer: cancel the request's calls."""
        self.gone = True
        for scope in list(self._scopes):
            scope.cancel()

    @contextlib.contextmanager
    def calls(self) -> Iterator[anyio.CancelScope]:
        """A cancel scope for one call, cancelled if the client goes away (at once if it has)."""
        with anyio.CancelScope() as scope:
            if self.gone:
                scope.cancel()
            self._scopes.add(scope)
            try:
                yield scope
            finally:
                self._scopes.discard(scope)


def of_request(request: object) -> Disconnect | None:
    """The `Disconnect` the HTTP front put in the scope of a request (the SDK hands handlers the
    Starlette request as ``ctx.request``); None over stdio."""
    scope = getattr(request, "scope", None)
    found = scope.get(SCOPE_KEY) if isinstance(scope, dict) else None
    return found if isinstance(found, Disconnect) else None
