"""OpenTelemetry spans (codemode._trace): their tree, their attributes, no secret in them, and
nothing at all (not even the import) when tracing is off. Spans are read with the SDK's
in-memory exporter (the ``test`` extra installs the SDK)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import pytest

from codemode import ApprovalRequest, Decision, Host
from tests.host_support import MakeHost

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

pytestmark = pytest.mark.anyio

# A GitHub token's shape: the redactor's rules know it, so a command holding it is shown redacted.
SECRET = "ghp_" + "Zq7" * 12


class Spans:
    """A tracer provider whose finished spans the test reads."""

    def __init__(self) -> None:
        sdk = pytest.importorskip("opentelemetry.sdk.trace")
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

        self.exporter: InMemorySpanExporter = InMemorySpanExporter()
        self.provider: TracerProvider = sdk.TracerProvider()
        self.provider.add_span_processor(SimpleSpanProcessor(self.exporter))

    def finished(self) -> list[ReadableSpan]:
        return list(self.exporter.get_finished_spans())

    def named(self, name: str) -> list[ReadableSpan]:
        return [span for span in self.finished() if span.name == name]

    def one(self, name: str) -> ReadableSpan:
        found = self.named(name)
        assert len(found) == 1, [span.name for span in self.finished()]
        return found[0]


@pytest.fixture
def spans() -> Iterator[Spans]:
    found = Spans()
    yield found
    found.provider.shutdown()


def parent_of(span: ReadableSpan) -> int | None:
    return None if span.parent is None else int(span.parent.span_id)


def span_id(span: ReadableSpan) -> int:
    assert span.context is not None
    return int(span.context.span_id)


def attributes(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


async def run(host: Host, source: str, **kwargs: Any) -> Any:
    with anyio.fail_after(60):
        return await host.run_code(source, **kwargs)


@pytest.mark.parametrize("engine", ["process", "thread"])
async def test_a_program_s_calls_and_its_command_nest_under_its_span(
    make_host: MakeHost, spans: Spans, engine: str
) -> None:
    program = """
        const [a, b] = await Promise.all([tools.echo({value: 1}), tools.shout({text: "hi"})]);
        const r = await tools.bash({command: "echo done"});
        print(a.value, b, r.exit_code);
    """
    async with make_host(tracer_provider=spans.provider, engine=engine) as (host, _):
        result = await run(host, program, call_id="c1", session_id="s1")
    assert result.ok, result.text

    root = spans.one("execute_tool run_code")
    assert root.parent is None  # nothing was current around it
    run_attributes = attributes(root)
    assert run_attributes["gen_ai.operation.name"] == "execute_tool"
    assert run_attributes["gen_ai.tool.call.id"] == "c1"
    assert run_attributes["codemode.session.id"] == "s1"
    assert run_attributes["codemode.engine"] == engine
    assert run_attributes["codemode.limits.timeout_seconds"] == host.config.timeout_seconds
    assert run_attributes["codemode.limits.memory_mb"] == host.config.memory_mb
    usage = result.usage
    assert run_attributes["codemode.usage.tool_calls"] == usage.tool_calls == 3
    assert run_attributes["codemode.usage.printed_bytes"] == usage.printed_bytes
    assert run_attributes["codemode.usage.output_tokens"] == usage.output_tokens
    assert run_attributes["codemode.usage.cpu_ms"] == usage.cpu_ms
    assert "error.type" not in run_attributes

    calls = {span.name: span for span in spans.finished() if parent_of(span) == span_id(root)}
    assert set(calls) == {"execute_tool echo", "execute_tool shout", "execute_tool bash"}
    ids = {attributes(span)["gen_ai.tool.call.id"] for span in calls.values()}
    assert len(ids) == 3 and all(call_id.startswith("c1.") for call_id in ids)
    assert attributes(calls["execute_tool echo"])["gen_ai.tool.name"] == "echo"

    process = spans.one("codemode.bash")
    assert parent_of(process) == span_id(calls["execute_tool bash"])
    process_attributes = attributes(process)
    assert process_attributes["process.command_line"] == "echo done"
    assert process_attributes["process.exit.code"] == 0
    assert isinstance(process_attributes["process.pid"], int)
    assert {parent_of(span) for span in spans.finished()} <= {None, *map(span_id, spans.finished())}


async def test_no_secret_reaches_a_span(make_host: MakeHost, spans: Spans) -> None:
    program = f"""
        await tools.echo({{value: "{SECRET}"}});
        await tools.bash({{command: "echo {SECRET} > /dev/null"}});
        const bg = await tools.bash({{command: "sleep 0 {SECRET}", run_in_background: true}});
        // read to its exit: a process still running at the host's close keeps its session's tmpfs
        while (!(await tools.bash({{action: "read", process_id: bg.process_id, wait_ms: 1000}})).exited) {{}}
        throw new Error("{SECRET}");
    """
    async with make_host(tracer_provider=spans.provider) as (host, _):
        result = await run(host, program)
        direct = await host.call_tool("bash", {"command": f"true {SECRET}"})
    assert not result.ok and not direct.is_error
    commands = [attributes(span)["process.command_line"] for span in spans.named("codemode.bash")]
    assert len(commands) == 3 and all("REDACTED" in command for command in commands)
    for span in spans.finished():
        for key, value in attributes(span).items():
            assert SECRET not in str(value), (span.name, key)
        assert SECRET not in (span.status.description or "")
        assert not span.events  # no exception recorded with its message


async def test_failures_name_their_code_or_kind(make_host: MakeHost, spans: Spans) -> None:
    program = 'await tools.fail_async({message: "no"}).catch(() => null); null.x;'
    async with make_host(tracer_provider=spans.provider) as (host, _):
        result = await run(host, program)
    assert result.error is not None
    from opentelemetry.trace import StatusCode

    failed_call = spans.one("execute_tool fail_async")
    assert attributes(failed_call)["error.type"] == "tool_failed"
    assert failed_call.status.status_code is StatusCode.ERROR
    root = spans.one("execute_tool run_code")
    assert attributes(root)["error.type"] == result.error.kind
    assert root.status.status_code is StatusCode.ERROR


async def test_an_approval_wait_is_a_span_of_the_program(make_host: MakeHost, spans: Spans) -> None:
    asked = anyio.Event()

    async def approve(requests: list[ApprovalRequest]) -> Sequence[Decision]:
        asked.set()
        return [Decision.deny("not now") for _ in requests]

    program = 'const r = await tools.write_file({path: "f.txt", content: "x"}).catch(e => e.code); print(r)'
    async with make_host(tracer_provider=spans.provider, approve=approve) as (host, _):
        result = await run(host, program)
    assert result.text == "denied\n" and asked.is_set()
    wait = spans.one("codemode.approval")
    assert parent_of(wait) == span_id(spans.one("execute_tool run_code"))
    wait_attributes = attributes(wait)
    assert wait_attributes["codemode.approval.kinds"] == ("tool",)
    assert wait_attributes["codemode.approval.tools"] == ("write_file",)
    assert wait_attributes["codemode.approval.decisions"] == ("deny",)
    assert wait_attributes["codemode.approval.waited_ms"] >= 0
    assert spans.named("execute_tool write_file") == []  # denied: it never ran


async def test_a_direct_call_is_a_span_with_its_command_under_it(make_host: MakeHost, spans: Spans) -> None:
    async with make_host(tracer_provider=spans.provider) as (host, _):
        result = await host.call_tool("bash", {"command": "exit 3"}, call_id="d1")
    assert result.is_error  # a non-zero exit
    call = spans.one("execute_tool bash")
    assert call.parent is None
    assert attributes(call)["gen_ai.tool.call.id"] == "d1"
    process = spans.one("codemode.bash")
    assert parent_of(process) == span_id(call)
    assert attributes(process)["process.exit.code"] == 3


async def test_tracing_false_makes_no_span_whatever_the_provider(make_host: MakeHost, spans: Spans) -> None:
    async with make_host(tracer_provider=spans.provider, tracing=False) as (host, _):
        result = await run(host, "await tools.echo({value: 1}); print(1)")
    assert result.ok
    assert spans.finished() == []


# -- off unless configured, in a fresh interpreter (the global provider is the process's) ---


def _python(script: str, tmp_path: Path) -> str:
    code = textwrap.dedent(script).replace("TMP", str(tmp_path))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


_PROGRAM = """
import asyncio, pathlib, sys
from codemode import Host

async def main(**options):
    ws = pathlib.Path("TMP") / "ws"
    ws.mkdir(exist_ok=True)
    async with Host(workspace=ws, state_dir=pathlib.Path("TMP") / "state", **options) as host:
        result = await host.run_code('await tools.bash({command: "true"}); print(1)')
    assert result.ok, result.text
"""


def test_untraced_nothing_imports_opentelemetry(tmp_path: Path) -> None:
    script = (
        _PROGRAM
        + "asyncio.run(main())\nprint(sorted(m for m in sys.modules if m.startswith('opentelemetry')))"
    )
    assert _python(script, tmp_path) == "[]"


def test_a_global_provider_turns_tracing_on_and_false_keeps_it_off(tmp_path: Path) -> None:
    pytest.importorskip("opentelemetry.sdk.trace")
    script = (
        _PROGRAM
        + """
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

asyncio.run(main())  # OpenTelemetry loaded, no provider set: off
exporter = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(exporter))
before = len(exporter.get_finished_spans())
trace.set_tracer_provider(provider)
asyncio.run(main(tracing=False))
off = len(exporter.get_finished_spans())
asyncio.run(main())
print(before, off, sorted(span.name for span in exporter.get_finished_spans()))
"""
    )
    expected = "0 0 ['codemode.bash', 'execute_tool bash', 'execute_tool run_code']"
    assert _python(script, tmp_path) == expected


def test_tracing_true_without_opentelemetry_says_what_to_install(tmp_path: Path) -> None:
    script = (
        "import sys\nsys.modules['opentelemetry'] = None\n"
        + _PROGRAM
        + """
from codemode import UserError
try:
    Host(workspace="TMP", tracing=True)
except UserError as exc:
    print(exc)
"""
    )
    assert "pip install 'codemode[otel]'" in _python(script, tmp_path)
