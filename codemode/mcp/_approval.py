"""Approvals over MCP: the client's user decides through elicitation.

When the host has no approval callback of its own, the MCP front installs `Elicitor`: a batch
of approval requests from a program becomes one ``elicitation/create`` to the client of the
request that ran it, a form with one choice per request (allow, allow for the session,
deny). A client without the elicitation capability, or a batch whose request is no longer
being served, gets the host's default (`Approvals.default_decisions`). A direct tool call's
own tool permission is not asked again: the MCP client approved calling that tool itself.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Awaitable, Callable, Iterator, Sequence
from typing import Any

from mcp.server.context import ServerRequestContext

from codemode.policy import ApprovalKind, ApprovalRequest, Approvals, Decision

__all__ = ["ClientApproved", "Elicitor", "direct_call"]

_DIRECT = contextvars.ContextVar("codemode_mcp_direct_call", default=False)
_CHOICES = {"allow": Decision.allow, "allow for this session": Decision.allow_session}


@contextlib.contextmanager
def direct_call(direct: bool) -> Iterator[None]:
    """While one MCP request runs: whether it is a direct tool call (its client approved calling
    that tool itself) rather than a program."""
    token = _DIRECT.set(direct)
    try:
        yield
    finally:
        _DIRECT.reset(token)


async def _beyond_the_client(
    ask: Callable[[list[ApprovalRequest]], Awaitable[Sequence[Decision]]], requests: list[ApprovalRequest]
) -> list[Decision]:
    """Decisions on ``requests``; in a direct call, its own tool permission is taken as given
    (the client approved calling that tool) and only what goes beyond it is asked."""
    if not _DIRECT.get():
        return list(await ask(requests))
    asked = [r for r in requests if r.kind is not ApprovalKind.TOOL]
    answers = iter(await ask(asked) if asked else [])
    return [Decision.allow() if r.kind is ApprovalKind.TOOL else next(answers) for r in requests]


class ClientApproved:
    """Another approval callback (the console's) under the rule elicitation follows: a direct
    call's own tool permission is not asked again.

    Args:
        inner: The callback asked about everything else.
    """

    def __init__(self, inner: Callable[[list[ApprovalRequest]], Awaitable[Sequence[Decision]]]) -> None:
        self.inner = inner

    async def __call__(self, requests: list[ApprovalRequest]) -> Sequence[Decision]:
        return await _beyond_the_client(self.inner, requests)


class Elicitor:
    """The host's approval callback while it serves MCP (see the module's docstring).

    Args:
        default_session: The codemode session of requests that name none.
    """

    def __init__(self, default_session: str) -> None:
        self._default = default_session
        self._serving: dict[str, list[ServerRequestContext[Any]]] = {}

    @contextlib.contextmanager
    def serving(self, session: str | None, ctx: ServerRequestContext[Any], *, direct: bool) -> Iterator[None]:
        """While one MCP request runs: its session's approvals go to its client."""
        key = session or self._default
        self._serving.setdefault(key, []).append(ctx)
        try:
            with direct_call(direct):
                yield
        finally:
            contexts = self._serving[key]
            contexts.remove(ctx)
            if not contexts:
                del self._serving[key]

    async def __call__(self, requests: list[ApprovalRequest]) -> Sequence[Decision]:
        return await _beyond_the_client(self._ask, requests)

    async def _ask(self, requests: list[ApprovalRequest]) -> list[Decision]:
        contexts = self._serving.get(requests[0].session_id)
        ctx = contexts[-1] if contexts else None
        capabilities = None if ctx is None else ctx.session.client_capabilities
        if ctx is None or capabilities is None or capabilities.elicitation is None:
            return Approvals.default_decisions(requests)
        properties = {
            f"r{i}": {
                "type": "string",
                "title": request.summary,
                # An escalation is asked every time: no choice would remember it.
                "enum": ["allow", "deny"] if request.kind is ApprovalKind.ESCALATION else [*_CHOICES, "deny"],
                "default": "deny",
            }
            for i, request in enumerate(requests)
        }
        lines = "\n".join(f"- {request.summary}" for request in requests)
        message = f"A codemode program asks to:\n{lines}"
        result = await ctx.session.elicit_form(
            message,
            {"type": "object", "properties": properties, "required": list(properties)},
            related_request_id=ctx.request_id,
        )
        if result.action != "accept" or not isinstance(result.content, dict):
            return [Decision.deny(f"the user answered {result.action!r}") for _ in requests]
        decisions = []
        for i in range(len(requests)):
            choice = result.content.get(f"r{i}")
            make = _CHOICES.get(choice) if isinstance(choice, str) else None
            decisions.append(make() if make is not None else Decision.deny("denied by the user"))
        return decisions
