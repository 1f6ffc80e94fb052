"""OpenTelemetry spans (the ``otel`` extra): one per program, nested tool call, approval wait
and bash process; off unless configured, and then nothing here imports OpenTelemetry.

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
"""

from __future__ import annotations

import sys
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

from codemode.errors import UserError

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.trace import Span, Tracer

__all__ = ["Attributes", "Trace", "Tracing", "current"]

AttributeValue = str | bool | int | float | Sequence[str] | Sequence[int] | Sequence[float] | Sequence[bool]
Attributes = Mapping[str, AttributeValue]

_SCOPE = "codemode"  # the instrumentation scope's name

_current: ContextVar[Trace | None] = ContextVar("codemode_trace", default=None)


def current() -> Trace | None:
    """Where a span started here goes (the innermost codemode span's trace), or None: untraced."""
    return _current.get()


class Trace:
    """A tracer and the span new spans nest under (None: OpenTelemetry's current context)."""

    __slots__ = ("_parent", "_span", "_tracer")

    def __init__(self, tracer: Tracer, parent: Context | None = None, span: Span | None = None) -> None:
        self._tracer = tracer
        self._parent = parent
        self._span = span

    def annotate(self, attributes: Attributes) -> None:
        """Set attributes on the span this trace nests under (a program's limits, once known)."""
        if self._span is not None:
            self._span.set_attributes(attributes)

    @contextmanager
    def span(self, name: str, attributes: Attributes) -> Iterator[Span]:
        """A child span, current (here and for OpenTelemetry) until the block ends.

        An exception leaving the block marks the span failed with its class name as
        ``error.type`` (its message is not recorded: it may hold what a program sent).
        """
        from opentelemetry import context as otel_context
        from opentelemetry import trace

        span = self._tracer.start_span(name, context=self._parent, attributes=attributes)
        inner = trace.set_span_in_context(span, self._parent)
        token = _current.set(Trace(self._tracer, inner, span))
        attached = otel_context.attach(inner)
        try:
            yield span
        except BaseException as exc:
            failed(span, type(exc).__qualname__)
            raise
        finally:
            otel_context.detach(attached)
            _current.reset(token)
            span.end()


def failed(span: Span, error_type: str) -> None:
    """Mark ``span`` failed: ``error.type`` and an error status without a description."""
    from opentelemetry.trace import StatusCode

    span.set_attribute("error.type", error_type)
    span.set_status(StatusCode.ERROR)


class Tracing:
    """One host's tracing setting (`codemode._trace`'s docstring says when it is on).

    Args:
        enabled: ``HostConfig.tracing``: True, False or None (automatic).
        provider: ``HostConfig.tracer_provider``: an OpenTelemetry TracerProvider, or None.

    Raises:
        UserError: Tracing is asked for (True, or a provider given) and OpenTelemetry is not
            installed.
    """

    def __init__(self, enabled: bool | None, provider: Any = None) -> None:
        self._enabled = enabled
        self._fixed: Trace | None = None
        self._global: tuple[object, Trace | None] | None = None  # (global provider, its trace)
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

            self._fixed = Trace(trace.get_tracer(_SCOPE, __version__, tracer_provider=provider))

    def root(self) -> Trace | None:
        """Where a program's span goes now, or None: this program is not traced."""
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

        found = Trace(provider.get_tracer(_SCOPE, __version__)) if configured else None
        self._global = (provider, found)
        return found
