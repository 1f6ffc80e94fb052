"""What the ``bash`` tool asks before it runs a command: the host's command gate (a port).

The command policy lives above the tools (``codemode.policy``); the process manager is given one
`CommandGate` when it is made and asks it about every run. No tool argument can change it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from codemode.tools._model import ToolContext

__all__ = ["AfterRun", "CommandGate", "CommandPlan"]


@dataclass(frozen=True)
class CommandPlan:
    """How an allowed run starts.

    Attributes:
        direct: The argv to execute without a shell (None: ``bash -c`` the command).
        env: Variables added to the command's environment.
        path_prepend: Directories put first on the command's PATH.
        writes: It may change things: it waits for the session's writers before it (False:
            every command only looks).
    """

    direct: tuple[str, ...] | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    path_prepend: tuple[str, ...] = ()
    writes: bool = True


@dataclass(frozen=True)
class AfterRun:
    """What the gate adds to a finished foreground run's result: a line and envelope fields."""

    text: str
    data: Mapping[str, object]


class CommandGate(Protocol):
    """The host's checks in front of every bash run.

    Attributes:
        serialize_writers: A session's runs that may change things go one at a time (the host
            gives each call its session's `codemode.tools.WriterTurn`; the guidance says so).
    """

    serialize_writers: bool

    def plan(
        self,
        *,
        command: str | None,
        argv: Sequence[str] | None,
        cwd: Path,
        background: bool,
        ctx: ToolContext,
    ) -> CommandPlan:
        """Check one run and say how it starts.

        Raises:
            ToolError: The policy refuses it (the message says why and what to do).
        """
        ...

    def check_input(self, text: str) -> None:
        """Check text sent to a background process's input.

        Raises:
            ToolError: The policy refuses it.
        """
        ...

    def finished(self, ctx: ToolContext) -> AfterRun | None:
        """Called after a foreground run ends: what to add to its result, if anything."""
        ...
