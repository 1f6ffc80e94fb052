"""Approvals: which calls need a decision, asking the host's callback in batches, and the
session's standing decisions.

A call needs approval when its tool's permission is ``ask`` (per tool: allow / ask / deny;
by default read-only tools are allowed and tools that declare they change things ask), or
when it asks for a capability beyond the host's defaults (``network: true`` on a bash run while
the host keeps the network off or to a list of domains; a ``network: {"allow": [...]}`` entry
the host's list does not cover; ``write_paths``). Calls a program starts together (one drain
of its queue: ``Promise.all``) reach the callback as one batch; each gets its own decision.
``allow_session`` turns a decision into a standing rule for the session (the tool, the command's
first words, or the capability), so the same request is not asked again.

Everything here is plain data plus one class, `Approvals`, that the host owns.
"""

from __future__ import annotations

import enum
import json
import secrets
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import anyio.to_thread
import pydantic

from codemode._trace import Attributes, current
from codemode.network import check_entries, uncovered
from codemode.state import ApprovalLog
from codemode.tools import Tool

__all__ = [
    "ApprovalKind",
    "ApprovalRequest",
    "Approvals",
    "ApproveCallback",
    "CommandAsk",
    "CommandsHook",
    "Decision",
    "ToolPermission",
    "record_approval",
]


class ApprovalKind(enum.StrEnum):
    """What a request asks to allow."""

    COMMAND = "command"
    """A command the command policy marks as needing approval."""
    TOOL = "tool"
    """A call of a tool whose permission is ``ask``."""
    CAPABILITY = "capability"
    """A per-call capability beyond the host's defaults (network, extra writable paths)."""
    ESCALATION = "escalation"
    """A run outside the sandbox (``sandbox: false``, argv ``["sudo", ...]``): asked on every
    call, never remembered; with no one to ask it does not run."""


class ToolPermission(enum.StrEnum):
    """A tool's permission: run its calls, ask first, or refuse them."""

    ALLOW = "allow"
    ASK = "ask"
    DENY = "deny"


class ApprovalRequest(pydantic.BaseModel):
    """One thing a call needs allowed before it runs.

    Attributes:
        id: Unique per request (audit records name it).
        kind: command, tool or capability.
        tool: The tool called.
        arguments: The call's arguments (redacted).
        summary: One line for a person: what would happen.
        session_id: The calling session.
        rule: What an ``allow_session`` decision would allow from now on in this session:
            the tool's name, a command's first words, or the capability's name.
    """

    model_config = pydantic.ConfigDict(frozen=True)

    id: str
    kind: ApprovalKind
    tool: str
    arguments: dict[str, object]
    summary: str
    session_id: str
    rule: str


class Decision(pydantic.BaseModel):
    """The answer to one `ApprovalRequest`. Make one with `allow`, `allow_session` or `deny`."""

    model_config = pydantic.ConfigDict(frozen=True)

    verdict: Literal["allow", "allow_session", "deny"]
    reason: str | None = None

    @classmethod
    def allow(cls) -> Decision:
        """Allow this call once."""
        return cls(verdict="allow")

    @classmethod
    def allow_session(cls) -> Decision:
        """Allow this call, and requests with the same rule for the rest of the session."""
        return cls(verdict="allow_session")

    @classmethod
    def deny(cls, reason: str = "denied by the user") -> Decision:
        """Refuse the call; the program's call rejects with code ``denied`` and this reason."""
        return cls(verdict="deny", reason=reason)

    @property
    def allowed(self) -> bool:
        """Whether the call may run."""
        return self.verdict != "deny"


ApproveCallback = Callable[[list[ApprovalRequest]], Awaitable[Sequence[Decision]]]
"""The host's approval callback: one decision per request, in order."""


def _short(value: Any, limit: int = 160) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


@dataclass(frozen=True)
class CommandAsk:
    """One decision a call's commands need: a command off the read-only list (``command``: its
    command line) or a run outside the sandbox (``escalation``: ``sudo: …``/``unsandboxed: …``)."""

    kind: Literal["command", "escalation"]
    text: str


_NO_ONE_TO_ASK = {
    ApprovalKind.CAPABILITY: "the host does not allow this, and there is no one to ask for approval",
    ApprovalKind.ESCALATION: "a person must allow each run outside the sandbox, and none can be asked here",
}


class CommandsHook(Protocol):
    """Names a call's commands that need a decision (the command policy's ``ask``, escalations).

    Calling it may read files a command wrote (script files): never on the event loop.
    """

    def applies(self, tool: Tool, arguments: Mapping[str, Any]) -> bool:
        """Whether calling the hook for this call has work to do; cheap, reads nothing."""
        ...

    def __call__(self, tool: Tool, arguments: Mapping[str, Any]) -> Sequence[CommandAsk]: ...


@dataclass
class _Session:
    rules: set[tuple[str, str]] = field(default_factory=set)  # (kind, rule) allowed for the session


class Approvals:
    """The host's approvals: permissions per tool, the callback, the session rules, the audit.

    Args:
        callback: Asks for decisions (a person, a policy service). Without one nothing asks:
            ``ask`` means allow, and a capability beyond the host's defaults is refused.
        permissions: Per-tool permission overrides, by tool name.
        network_default: Whether commands get the network by default; when not, a call's
            ``network: true`` is a capability request.
        network_allow: The host's network allowlist (None: the whole network, when on): a
            call's ``network: true`` widens it, and so does an entry of a call's list it does
            not cover (a capability request naming those domains); a list within it narrows.
        redact: Redacts arguments and summaries before a request leaves the host.
        audit: Called with each request and its decision (the host keeps them in the state dir).
        commands: The commands of a call that need approval (the command policy's verdicts);
            `requests` calls it, so a call for which `reads_files` says so is asked about off
            the event loop.
    """

    def __init__(
        self,
        callback: ApproveCallback | None = None,
        *,
        permissions: Mapping[str, ToolPermission | str] | None = None,
        network_default: bool = True,
        network_allow: Sequence[str] | None = None,
        redact: Callable[[str], str] = lambda text: text,
        audit: Callable[[ApprovalRequest, Decision], None] | None = None,
        commands: CommandsHook | None = None,
    ) -> None:
        self._commands = commands
        self.callback = callback
        self.permissions = {name: ToolPermission(value) for name, value in (permissions or {}).items()}
        self.network_default = network_default
        self.network_allow = None if network_allow is None else tuple(network_allow)
        self._redact = redact
        self._audit = audit
        self._sessions: dict[str, _Session] = {}

    @property
    def batches(self) -> bool:
        """Whether a callback is asked: then a program's calls made together (``Promise.all``)
        reach it as one batch (the engine's `CallGate`)."""
        return self.callback is not None

    def permission(self, tool: Tool) -> ToolPermission:
        """The tool's permission: the host's override, else from its annotations (read-only
        and undeclared tools allowed; tools that declare they change things ask, except bash,
        whose commands the command policy judges one by one)."""
        override = self.permissions.get(tool.name)
        if override is not None:
            return override
        if tool.read_only or tool.destructive is not True or tool.name == "bash":
            return ToolPermission.ALLOW
        return ToolPermission.ASK

    def reads_files(self, tool: Tool, arguments: Mapping[str, Any]) -> bool:
        """Whether `requests` for this call runs the command policy, which may read files a
        command wrote: then it is called in a worker thread, never on the event loop.
        Cheap, reads nothing."""
        return self._commands is not None and self._commands.applies(tool, arguments)

    def requests(
        self, tool: Tool, arguments: Mapping[str, Any], session_id: str
    ) -> list[ApprovalRequest] | str:
        """What this call needs approved (empty: it may run), or why it is refused outright.

        Args:
            tool: The tool called.
            arguments: Its arguments, as JSON.
            session_id: The calling session.

        Returns:
            The requests not already allowed for the session, or a refusal message (a tool
            whose permission is ``deny``).
        """
        permission = self.permission(tool)
        if permission is ToolPermission.DENY:
            return f"{tool.name} is not allowed on this host (its permission is deny)"
        asks = self._commands(tool, arguments) if self._commands is not None else ()
        escalations = [a.text for a in asks if a.kind == "escalation"]
        # An escalation is asked alone: outside the sandbox the network and write paths do not
        # apply, and the command is shown whole.
        commands = [] if escalations else [a.text for a in asks if a.kind == "command"]
        # Per-call capabilities: network only while the host keeps it off; write_paths always.
        capabilities: list[tuple[str, str, Any]] = []
        if not escalations:
            capabilities += self._network_capability(arguments.get("network"))
        if arguments.get("write_paths") and not escalations:
            capabilities.append(("write_paths", "write to", arguments["write_paths"]))
        if permission is ToolPermission.ALLOW and not commands and not capabilities and not escalations:
            return []  # the common case, without a look at the arguments' text
        shown = json.loads(self._redact(json.dumps(dict(arguments), ensure_ascii=False)))
        wanted: list[tuple[ApprovalKind, str, str]] = []
        if permission is ToolPermission.ASK:
            wanted.append((ApprovalKind.TOOL, tool.name, f"{tool.name}({_short(shown)})"))
        for command in commands:
            words = command.split()
            rule = " ".join(words[:2]) if words else command
            wanted.append((ApprovalKind.COMMAND, rule, f"run `{_short(self._redact(command))}`"))
        for capability, verb, value in capabilities:
            what = verb if value is True else f"{verb} {_short(value)}"
            rule = (
                f"network {' '.join(value)}" if capability == "network" and value is not True else capability
            )
            wanted.append((ApprovalKind.CAPABILITY, rule, f"{tool.name}: {what}"))
        for text in escalations:
            summary = _short(self._redact(text), 300)
            wanted.append((ApprovalKind.ESCALATION, summary.split(":", 1)[0], summary))
        rules = self._sessions.get(session_id, _Session()).rules
        return [
            ApprovalRequest(
                id="ap_" + secrets.token_hex(6),
                kind=kind,
                tool=tool.name,
                arguments=shown,
                summary=summary,
                session_id=session_id,
                rule=rule,
            )
            for kind, rule, summary in wanted
            # No standing rule covers an escalation: it is asked on every call.
            if kind is ApprovalKind.ESCALATION or (kind.value, rule) not in rules
        ]

    def _network_capability(self, network: Any) -> list[tuple[str, str, Any]]:
        """What a call's ``network`` argument asks beyond the host's network: the whole network
        (``True``), or the entries of its allowlist the host's list does not cover."""
        whole = self.network_default and self.network_allow is None
        if network is True:
            return [] if whole else [("network", "reach the network", True)]
        if not isinstance(network, Mapping) or whole:
            return []
        try:
            entries = check_entries(network.get("allow") or ())
        except (ValueError, TypeError):
            return []  # the tool's own validation refuses it
        wider = uncovered(self.network_allow or (), entries) if self.network_default else entries
        return [("network", "reach", list(wider))] if wider else []

    async def decide(self, requests: list[ApprovalRequest]) -> list[Decision]:
        """Ask the callback about a batch; one decision per request, in order.

        A callback that fails, or answers with the wrong number of decisions, denies the
        whole batch (with a reason naming the problem): approvals fail closed.

        Traced, the wait is a span (``codemode.approval``): the requests' kinds and tools, the
        decisions and the milliseconds waited; no summary or argument.
        """
        if not requests:
            return []
        trace = current()
        if trace is None:
            return await self._decide(requests)
        attributes: Attributes = {
            "codemode.approval.kinds": [request.kind.value for request in requests],
            "codemode.approval.tools": [request.tool for request in requests],
            "codemode.approval.asked": self.callback is not None,
        }
        with trace.span("codemode.approval", attributes) as span:
            started = time.perf_counter()
            decisions = await self._decide(requests)
            span.set_attributes(
                {
                    "codemode.approval.decisions": [decision.verdict for decision in decisions],
                    "codemode.approval.waited_ms": (time.perf_counter() - started) * 1000,
                }
            )
        return decisions

    async def _decide(self, requests: list[ApprovalRequest]) -> list[Decision]:
        if self.callback is None:
            decisions = self.default_decisions(requests)
        else:
            try:
                answered = list(await self.callback(list(requests)))
            except Exception as exc:  # the callback's bug must not run anything unapproved
                answered = [
                    Decision.deny(f"the approval callback failed ({type(exc).__name__}: {exc})")
                ] * len(requests)
            if len(answered) != len(requests) or not all(isinstance(d, Decision) for d in answered):
                answered = [
                    Decision.deny(
                        f"the approval callback returned {len(answered)} answers for {len(requests)} requests"
                    )
                ] * len(requests)
            decisions = answered
        for request, decision in zip(requests, decisions, strict=True):
            if decision.verdict == "allow_session" and request.kind is not ApprovalKind.ESCALATION:
                self._sessions.setdefault(request.session_id, _Session()).rules.add(
                    (request.kind.value, request.rule)
                )
            if self._audit is not None:
                self._audit(request, decision)
        return decisions

    @staticmethod
    def default_decisions(requests: Sequence[ApprovalRequest]) -> list[Decision]:
        """The decisions when there is no one to ask: a tool's ``ask`` and the command
        policy's marks mean allow, but no call gets more than the host allows (a capability
        or an escalation request is denied: fail closed)."""
        return [
            Decision.deny(_NO_ONE_TO_ASK[request.kind])
            if request.kind in _NO_ONE_TO_ASK
            else Decision.allow()
            for request in requests
        ]

    @staticmethod
    def refusal(requests: Sequence[ApprovalRequest], decisions: Sequence[Decision]) -> str | None:
        """The message for a call one of whose requests was denied, or None when all allowed."""
        for request, decision in zip(requests, decisions, strict=True):
            if not decision.allowed and request.kind is ApprovalKind.ESCALATION:
                return f"`{request.summary}` was not run: {decision.reason or 'denied'}; do it another way or ask the user"
            if not decision.allowed:
                what = {
                    ApprovalKind.TOOL: f"the call of {request.tool}",
                    ApprovalKind.COMMAND: f"the command `{request.rule}…`",
                    ApprovalKind.CAPABILITY: f"the capability {request.rule!r}",
                }[request.kind]
                return f"{what} was denied: {decision.reason or 'denied'}; do something else or ask the user"
        return None

    async def approve_call(self, tool: Tool, arguments: Mapping[str, Any], session_id: str) -> str | None:
        """Ask about one direct call (a batch of one), its arguments valid for the tool: why it
        is refused, or None when it may run. The command check runs in a worker thread when
        `reads_files` says it may read a file a command wrote."""
        if self.reads_files(tool, arguments):
            needs = await anyio.to_thread.run_sync(lambda: self.requests(tool, arguments, session_id))
        else:
            needs = self.requests(tool, arguments, session_id)
        if isinstance(needs, str):
            return needs
        if not needs:
            return None
        return self.refusal(needs, await self.decide(needs))

    def forget_session(self, session_id: str) -> None:
        """Drop a session's standing decisions (its end)."""
        self._sessions.pop(session_id, None)


def record_approval(log: ApprovalLog, request: ApprovalRequest, decision: Decision) -> None:
    """Keep an approval request and its decision in the state dir (the audit records)."""
    log.record(
        request_id=request.id,
        session_id=request.session_id,
        kind=request.kind.value,
        tool=request.tool,
        summary=request.summary,
        arguments_json=json.dumps(request.arguments, ensure_ascii=False),
        rule=request.rule,
        verdict=decision.verdict,
        reason=decision.reason,
    )
