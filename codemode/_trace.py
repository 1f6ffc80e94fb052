"""Spans of what a program does: OpenTelemetry's (the ``otel`` extra) and a watcher's (the
console); one per program, nested tool call, approval wait and bash process; off unless
configured, and then nothing here imports OpenTelemetry.

A host's `Tracing` decides at each program whether it is traced: ``HostConfig.tracing`` False
never; True always (its ``tracer_provider``, else the global one); None (the default) when a
``tracer_provider`` is given or this process has set a global TracerProvider (an embedder's own
tracing, or ``opentelemetry-instrument``). Untraced, a program costs one setting check and a
dictionary lookup, and each call below it one context variable read (`current`).

Traced, the program's span is the current span while it runs: its tool calls (tasks the engine
starts in a copy of the program's context), approval waits and commands nest under it through
context variables, both OpenTelemetry's (so an instrumented HTTP or MCP client inside a tool
joins the trace) and this module's own (`current`), which also reaches a thread that was handed
it (the inline tools' `Trace.span` with an explicit parent). Attributes follow the GenAI
semantic conventions where they fit (``gen_ai.operation.name``, ``gen_ai.tool.name``,
``gen_ai.tool.call.id``, ``error.type``), the rest are ``codemode.*``; no argument, output or
message is recorded, and a command line only redacted and cut (the caller redacts it).

A `Watcher` (set on `Tracing.watcher`: the console of an HTTP front) sees the same spans as
`Watched` records, with OpenTelemetry or without it, and also their *details*: what
OpenTelemetry is never given (a program's source and result, a call's arguments), for a person
who holds the server's token. Its callbacks may come from any thread (an inline tool's call
runs on the program's thread) and must not block.
"""

from __future__ import annotations

import itertools
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from codemode.errors import UserError

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.trace import Span, Tracer

__all__ = ["Attributes", "SpanHandle", "Trace", "Tracing", "Watched", "Watcher", "current", "failed"]

AttributeValue = str | bool | int | float | Sequence[str] | Sequence[int] | Sequence[float] | Sequence[bool]
Attributes = Mapping[str, AttributeValue]

_SCOPE = "codemode"  # the instrumentation scope's name

_current: ContextVar[Trace | None] = ContextVar("codemode_trace", default=None)
_ids = itertools.count(1)  # Watched.id (next() of a count is atomic under the GIL)


def current() -> Trace | None:
    """Where a span started here goes (the innermost codemode span's trace), or None: untraced."""
    return _current.get()


@dataclass(eq=False)
class Watched:
    """One span as a `Watcher` sees it: mutable while it runs (`Trace.span` fills it in)."""

    name: str
    parent: Watched | None
    attributes: dict[str, AttributeValue]
    details: dict[str, object]
    id: int = field(default_factory=lambda: next(_ids))
    started: float = field(default_factory=time.time)  # seconds since the epoch
    ended: float | None = None
    error: str | None = None  # the error type of a failed span


class Watcher(Protocol):
    """Sees spans start, gain details (`Trace.describe`) and end; from any thread, never blocking."""

    def started(self, span: Watched) -> None: ...
    def described(self, span: Watched) -> None: ...
    def ended(self, span: Watched) -> None: ...


class SpanHandle:
    """The span a `Trace.span` block is in: OpenTelemetry's, the watcher's, or both."""

    __slots__ = ("_otel", "_watched")

    def __init__(self, otel: Span | None, watched: Watched | None) -> None:
        self._otel = otel
        self._watched = watched

    def set_attributes(self, attributes: Attributes) -> None:
        if self._otel is not None:
            self._otel.set_attributes(attributes)
        if self._watched is not None:
            self._watched.attributes.update(attributes)

    def set_attribute(self, key: str, value: AttributeValue) -> None:
        self.set_attributes({key: value})

    def detail(self, **details: Any) -> None:
        """What only a watcher keeps (never OpenTelemetry): a source, a result, arguments."""
        if self._watched is not None:
            self._watched.details.update(details)

    def fail(self, error_type: str) -> None:
        """Mark the span failed: ``error.type`` and an error status without a description."""
        if self._otel is not None:
            from opentelemetry.trace import StatusCode

            self._otel.set_attribute("error.type", error_type)
            self._otel.set_status(StatusCode.ERROR)
        if self._watched is not None:
            self._watched.error = error_type


def failed(span: SpanHandle, error_type: str) -> None:
    """Mark ``span`` failed (`SpanHandle.fail`)."""
    span.fail(error_type)


class Trace:
    """Where new spans go: a tracer and the span they nest under (None: OpenTelemetry's current
    context), and a watcher and the watched span they nest under; either may be absent."""

    __slots__ = ("_parent", "_span", "_tracer", "_watched", "_watcher")

    def __init__(
        self,
        tracer: Tracer | None,
        parent: Context | None = None,
        span: Span | None = None,
        watcher: Watcher | None = None,
        watched: Watched | None = None,
    ) -> None:
        self._tracer = tracer
        self._parent = parent
        self._span = span
        self._watcher = watcher
        self._watched = watched

    def annotate(self, attributes: Attributes) -> None:
        """Set attributes on the span this trace nests under (a program's limits, once known)."""
        if self._span is not None:
            self._span.set_attributes(attributes)
        if self._watched is not None:
            self._watched.attributes.update(attributes)

    def describe(self, **details: Any) -> None:
        """Give the watcher details of the span this trace nests under (a program's session,
        source and limits, once known); nothing reaches OpenTelemetry."""
        if self._watcher is not None and self._watched is not None:
            self._watched.details.update(details)
            self._watcher.described(self._watched)

    @contextmanager
    def span(
        self, name: str, attributes: Attributes, details: Mapping[str, Any] | None = None
    ) -> Iterator[SpanHandle]:
        """A child span, current (here and for OpenTelemetry) until the block ends.

        An exception leaving the block marks the span failed with its class name as
        ``error.type`` (its message is not recorded: it may hold what a program sent).
        ``details`` go to the watcher only.
        """
        watched: Watched | None = None
        watcher = self._watcher
        if watcher is not None:
            watched = Watched(name, self._watched, dict(attributes), dict(details or {}))
            watcher.started(watched)
        span: Span | None = None
        inner: Context | None = None
        if self._tracer is not None:
            from opentelemetry import trace

            span = self._tracer.start_span(name, context=self._parent, attributes=attributes)
            inner = trace.set_span_in_context(span, self._parent)
        handle = SpanHandle(span, watched)
        token = _current.set(Trace(self._tracer, inner, span, watcher, watched))
        attached = None
        if inner is not None:
            from opentelemetry import context as otel_context

            attached = otel_context.attach(inner)
        try:
            yield handle
        except BaseException as exc:
            handle.fail(type(exc).__qualname__)
            raise
        finally:
            if attached is not None:
                otel_context.detach(attached)
            _current.reset(token)
            if span is not None:
                span.end()
            _end(watcher, watched)


def _end(watcher: Watcher | None, watched: Watched | None) -> None:
    if watcher is not None and watched is not None:
        watched.ended = time.time()
        watcher.ended(watched)


class Tracing:
    """One host's tracing setting (`codemode._trace`'s docstring says when it is on).

    Args:
        enabled: ``HostConfig.tracing``: True, False or None (automatic).
        provider: ``HostConfig.tracer_provider``: an OpenTelemetry TracerProvider, or None.

    Attributes:
        watcher: Who else sees every program's spans (the console), or None. Set by
            `codemode.Host.watch`; independent of ``enabled``.

    Raises:
        UserError: Tracing is asked for (True, or a provider given) and OpenTelemetry is not
            installed.
    """

    def __init__(self, enabled: bool | None, provider: Any = None) -> None:
        self._enabled = enabled
        self._fixed: Tracer | None = None
        self._global: tuple[object, Tracer | None] | None = None  # (global provider, its tracer)
        self.watcher: Watcher | None = None
        if enabled is False:
            return
        if enabled or provider is not None:
            try:
                from opentelemetry import trace
            except ImportError as exc:
                raise UserError(
                    "tracing needs OpenTelemetry: pip install 'codemode[otel]' (or set tracing=False)"
                ) from exc
            from codemode._version import __version__

            self._fixed = trace.get_tracer(_SCOPE, __version__, tracer_provider=provider)

    def root(self) -> Trace | None:
        """Where a program's span goes now, or None: this program is not traced."""
        tracer = self._tracer()
        if tracer is None and self.watcher is None:
            return None
        return Trace(tracer, watcher=self.watcher)

    def _tracer(self) -> Tracer | None:
        if self._fixed is not None or self._enabled is False:
            return self._fixed
        trace = sys.modules.get("opentelemetry.trace")
        if trace is None:  # nobody loaded OpenTelemetry, so nobody set a provider
            return None
        provider = trace.get_tracer_provider()
        if self._global is not None and self._global[0] is provider:
            return self._global[1]
        configured = not isinstance(provider, trace.ProxyTracerProvider | trace.NoOpTracerProvider)
        from codemode._version import __version__

        found = provider.get_tracer(_SCOPE, __version__) if configured else None
        self._global = (provider, found)
        return found
