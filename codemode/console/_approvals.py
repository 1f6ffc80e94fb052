"""Approvals in the browser (``--approvals console``): the host's approval callback holds each
request until a person answers it in the console.

A batch of requests waits for one answer per request; each is published (event ``approval``,
``state: pending``) to the consoles of the session's tenant and listed until it is answered,
or its program ends (its wait is cancelled: the request leaves the list, ``state: decided``).
A request nobody answers waits as long as its program may run (its wall limit ends it).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import anyio

from codemode.console._errors import ConsoleError
from codemode.policy import ApprovalKind, ApprovalRequest, Decision

__all__ = ["ConsoleApprovals", "Pending"]

_PATH_KEYS = ("path", "paths", "file", "files", "target", "source", "destination")
_REASON_KEYS = ("reason", "justification", "why")


@dataclass(eq=False)
class Pending:
    """One request waiting for a person."""

    request: ApprovalRequest
    tenant: str | None
    asked: float = field(default_factory=time.time)
    decision: Decision | None = None
    done: anyio.Event = field(default_factory=anyio.Event)

    def as_json(self) -> dict[str, object]:
        args = self.request.arguments
        command = args.get("command")
        cwd = args.get("cwd")
        return {
            "id": self.request.id,
            "session_id": self.request.session_id,
            "kind": self.request.kind.value,
            "tool": self.request.tool,
            "summary": self.request.summary,
            "rule": self.request.rule,
            "command": command if isinstance(command, str) else None,
            "cwd": cwd if isinstance(cwd, str) else None,
            "paths": _paths(args),
            "reason": next((args[k] for k in _REASON_KEYS if isinstance(args.get(k), str)), None),
            # An escalation is asked every time: no answer remembers it.
            "can_remember": self.request.kind is not ApprovalKind.ESCALATION,
            "asked": self.asked,
        }


class ConsoleApprovals:
    """The approval callback of ``--approvals console`` (see the module's docstring).

    Args:
        publish: Sends an event (name, data, tenant) to the console's streams.
        tenant_of: The tenant of a session.
    """

    def __init__(
        self, publish: Callable[[str, object, str | None], None], tenant_of: Callable[[str], str | None]
    ) -> None:
        self._publish = publish
        self._tenant_of = tenant_of
        self._pending: dict[str, Pending] = {}

    async def __call__(self, requests: list[ApprovalRequest]) -> Sequence[Decision]:
        waiting = [Pending(r, self._tenant_of(r.session_id)) for r in requests]
        for item in waiting:
            self._pending[item.request.id] = item
            self._publish("approval", {"state": "pending", **item.as_json()}, item.tenant)
        try:
            for item in waiting:
                await item.done.wait()
        finally:
            for item in waiting:
                if self._pending.pop(item.request.id, None) is not None and item.decision is None:
                    # the program ended first: the request is no longer asked
                    self._publish("approval", {"state": "decided", **item.as_json()}, item.tenant)
        return [item.decision or Decision.deny("no answer") for item in waiting]

    def pending(self, tenant: str | None) -> list[Pending]:
        """The requests waiting now, oldest first (of one tenant; None: all)."""
        return [p for p in self._pending.values() if tenant is None or p.tenant == tenant]

    def answer(self, approval_id: str, decision: Decision, tenant: str | None) -> Pending:
        """Answer a waiting request (on the loop).

        Raises:
            ConsoleError: No such request waits (for this tenant), or ``allow_session`` for an
                escalation, which is never remembered.
        """
        item = self._pending.get(approval_id)
        if item is None or (tenant is not None and item.tenant != tenant):
            raise ConsoleError(
                404, f"no approval {approval_id!r} is waiting (answered already, or its program ended)"
            )
        if decision.verdict == "allow_session" and item.request.kind is ApprovalKind.ESCALATION:
            raise ConsoleError(400, "an escalation is asked every time: answer allow or deny")
        del self._pending[approval_id]
        item.decision = decision
        item.done.set()
        self._publish(
            "approval", {"state": "decided", "verdict": decision.verdict, **item.as_json()}, item.tenant
        )
        return item


def _paths(args: dict[str, object]) -> list[str]:
    found: list[str] = []
    for key in _PATH_KEYS:
        value = args.get(key)
        if isinstance(value, str):
            found.append(value)
        elif isinstance(value, list):
            found.extend(v for v in value if isinstance(v, str))
    return found[:20]
