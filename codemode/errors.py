"""The exceptions codemode raises, in one place.

```
CodemodeError
├── UserError              the embedding developer used the API wrongly (bad config,
│                          duplicate tool, sync call inside a running event loop, ...)
├── ToolError              a tool refused or failed in a way the model caused; the
│   │                      registry turns it into an error result the model can read
│   ├── UnknownRefError    read_archive / logs with a reference that does not exist
│   ├── SandboxDenied      a path or action outside the sandbox policy
│   └── ProcessNotFound    no such process in this session
└── HostFault              the host itself cannot work (state directory, sandbox
    ├── StateDirError      enforcement, engine); never the model's fault
    └── SandboxUnavailable
```

Guest outcomes (JS errors, timeouts, memory limits) are *data* in a `RunResult`, never
exceptions. `ToolError` raised inside a handler becomes a rejected promise in JS and an
error result for a direct call.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "CodemodeError",
    "HostFault",
    "ProcessNotFound",
    "SandboxDenied",
    "SandboxUnavailable",
    "StateDirError",
    "ToolError",
    "UnknownRefError",
    "UserError",
]


class CodemodeError(Exception):
    """Base class of every exception codemode raises."""


class UserError(CodemodeError):
    """The embedding developer used the API in a way it does not support."""


class ToolError(CodemodeError):
    """A failure the model can act on, raised by a tool handler.

    Args:
        message: What went wrong and what to do instead, in one or two sentences.
        data: Optional JSON-compatible details (candidates, paths, limits).
    """

    def __init__(self, message: str, data: Any = None) -> None:
        super().__init__(message)
        self.message = message
        self.data = data


class UnknownRefError(ToolError):
    """An archive reference that the archive does not hold."""


class SandboxDenied(ToolError):
    """The sandbox policy does not allow this path or action."""


class ProcessNotFound(ToolError):
    """No process with this id belongs to the calling session."""


class HostFault(CodemodeError):
    """The host cannot do its job; the cause is not the model's input."""


class StateDirError(HostFault):
    """The state directory cannot be created, secured or opened."""


class SandboxUnavailable(HostFault):
    """Confinement was asked for but cannot be enforced on this machine."""
