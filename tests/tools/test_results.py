"""Typed results and coded errors: result types from annotations, checked results, error codes."""

from __future__ import annotations

import ast
import dataclasses
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pydantic
import pytest
from typing_extensions import TypedDict

import codemode
from codemode import Host, TextContent, ToolContext, ToolError, ToolResult, UserError, make_tool
from codemode.errors import ErrorCode, GuestErrorKind, ProcessNotFound, SandboxDenied, UnknownRefError
from codemode.sandbox import SandboxPolicy
from codemode.state import State
from codemode.tools import ToolRegistry

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class Weather(pydantic.BaseModel):
    city: str
    temp_c: float


class Reading(TypedDict):
    sensor: str
    value: float


@dataclasses.dataclass
class Point:
    x: int
    y: int


class Opaque:
    """A plain class: pydantic cannot describe it."""


@pytest.fixture
async def host(tmp_path: Path) -> Any:
    (tmp_path / "ws").mkdir()
    async with Host(workspace=tmp_path / "ws", state_dir=tmp_path / "state", builtin_tools=False) as h:
        yield h


# -- result types from annotations ------------------------------------------------------------


async def test_typed_results_reach_the_program_and_describe_tool(host: Host) -> None:
    def weather(city: str) -> Weather:
        """Weather for a city."""
        return Weather(city=city, temp_c=21.5)

    def readings() -> list[Reading]:
        """Sensor readings."""
        return [{"sensor": "a", "value": 1.0}]

    def origin() -> Point:
        """The origin."""
        return Point(0, 0)

    def count() -> int:
        """A number."""
        return 3

    for fn in (weather, readings, origin, count):
        host.add_tool(fn)
    result = await host.run_code(
        "const w = await tools.weather({city: 'Oslo'});\n"
        "const d = await describeTool('weather');\n"
        "print(w.temp_c, (await tools.readings())[0].sensor, (await tools.origin()).y, await tools.count());\n"
        "print(d.signature); print(JSON.stringify(d.output_schema.required));"
    )
    assert result.ok, result.text
    assert result.text.splitlines() == [
        "21.5 a 0 3",
        "tools.weather(args: { city: string }): Promise<{ city: string; temp_c: number }>",
        '["city","temp_c"]',
    ]
    description = host.run_code_description()
    assert "tools.readings(args?: {}): Promise<{ sensor: string; value: number }[]>" in description
    assert "tools.origin(args?: {}): Promise<{ x: number; y: number }>" in description
    assert "tools.count(args?: {}): Promise<number>" in description


def test_a_return_annotation_that_cannot_be_described_is_a_user_error() -> None:
    def opaque() -> Opaque:
        return Opaque()

    with pytest.raises(
        UserError, match=r"tool 'opaque' \(.*opaque\): its result type Opaque cannot be described"
    ):
        make_tool(opaque)

    def callback() -> Callable[[], int]:
        return lambda: 1

    with pytest.raises(UserError, match="callback"):
        make_tool(callback)

    def undefined() -> NoSuchType:  # type: ignore[name-defined]  # noqa: F821
        return None

    with pytest.raises(UserError, match=r"tool 'undefined' .*annotations cannot be resolved"):
        make_tool(undefined)
    with pytest.raises(UserError, match="result type"):
        make_tool(lambda: 1, name="explicit", result_model=Opaque)


def test_an_explicit_result_model_wins_over_the_annotation() -> None:
    def raw() -> ToolResult:
        return ToolResult.from_text("x", {"city": "c", "temp_c": 1})

    assert make_tool(raw).output_schema is None
    typed = make_tool(raw, result_model=Weather)
    assert typed.output_schema is not None and typed.output_schema["title"] == "Weather"
    assert typed.check_result(raw()) is None


# -- results that break their declared type ----------------------------------------------------


async def test_a_result_that_violates_its_type_rejects_naming_the_tool_and_is_logged(
    host: Host, caplog: pytest.LogCaptureFixture
) -> None:
    def weather(city: str) -> Weather:
        """Weather for a city (broken: returns a dict without temp_c)."""
        return {"city": city}  # type: ignore[return-value]

    def reading() -> Reading:
        """A reading with a value of the wrong type."""
        return {"sensor": "a", "value": "high"}  # type: ignore[typeddict-item]

    def structured() -> ToolResult:
        """A ToolResult whose data does not fit the declared model."""
        return ToolResult.from_text("t", {"city": 1, "temp_c": 2})

    host.add_tool(weather)
    host.add_tool(reading)
    host.add_tool(structured, result_model=Weather)
    host.add_tool(
        make_tool(lambda: "n", name="inline_count", description="Inline.", inline=True, result_model=int)
    )
    with caplog.at_level(logging.WARNING, logger="codemode.tools"):
        result = await host.run_code(
            "for (const name of ['weather', 'reading', 'structured', 'inline_count']) {\n"
            "  try { await tools[name]({...(name === 'weather' ? {city: 'x'} : {})}); print('resolved'); }\n"
            "  catch (e) { print(e.tool, e.data.path, e.message); }\n"
            "}"
        )
    assert result.ok, result.text
    lines = result.text.splitlines()
    assert lines[0].startswith(
        "weather $.temp_c weather returned a result that does not match its declared result type Weather: "
        "at $.temp_c: Field required"
    )
    assert lines[0].endswith("This is a bug in the tool, not in the call.")
    assert lines[1].startswith("reading $.value reading returned a result that does not match its declared")
    assert lines[2].startswith("structured $.city structured returned")
    assert lines[3].startswith("inline_count $ inline_count returned a result that does not match")
    logged = [r.getMessage() for r in caplog.records if r.name == "codemode.tools"]
    assert len(logged) == 4 and "tool weather returned a result that does not match" in logged[0]
    direct = await host.call_tool("weather", {"city": "x"})
    assert direct.is_error and direct.text.startswith("weather returned a result that does not match")


async def test_values_of_the_declared_type_pass_without_a_second_check(host: Host) -> None:
    made: list[Weather] = []

    def weather() -> Weather:
        """Weather."""
        # model_construct skips validation: the check trusts a value of the declared class
        value = Weather.model_construct(city="x", temp_c=1.0)
        made.append(value)
        return value

    t = host.add_tool(weather)
    # A wrong value on purpose: model_construct does not check it, and neither does check_result.
    unchecked = Weather.model_construct(city="x", temp_c="not checked")  # type: ignore[arg-type]
    assert t.check_result(unchecked) is None
    assert t.check_result({"city": "x", "temp_c": "1"}) is not None  # data is checked strictly
    result = await host.run_code("print((await tools.weather()).temp_c)")
    assert result.text == "1\n" and len(made) == 1


# -- error codes --------------------------------------------------------------------------------


def test_tool_error_codes() -> None:
    assert ToolError("m", code=ErrorCode.NO_MATCH).code is ErrorCode.NO_MATCH
    assert ToolError("m", {"cwd": "x"}, code=ErrorCode.BAD_CWD).data == {"cwd": "x"}
    with pytest.raises(TypeError):  # the code is required: no raise goes without one
        ToolError("m")  # type: ignore[call-arg]
    assert UnknownRefError("m").code is ErrorCode.UNKNOWN_REF  # three subclasses are their code
    assert SandboxDenied("m").code is ErrorCode.DENIED_BY_SANDBOX
    assert ProcessNotFound("m", {"process_id": "p"}).code is ErrorCode.NO_SUCH_PROCESS
    with pytest.raises(ValueError):  # an untyped caller's string must still name a code
        ToolError("m", code="made_up")  # type: ignore[arg-type]
    as_text: list[str] = [ErrorCode.NO_MATCH, GuestErrorKind.TIMEOUT]  # StrEnums: members are str
    assert as_text == ["no_match", "timeout"]


def test_every_error_code_written_in_the_sources_is_in_the_enumeration() -> None:
    """``ErrorCode.X`` in the sources names a member (codes are never spelled as data keys:
    `tests/test_error_map.py`)."""
    found: dict[str, str] = {}
    for path in Path(codemode.__file__).parent.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id == "ErrorCode"
            ):
                found[getattr(ErrorCode, node.attr).value] = str(path)
    assert {"invalid_arguments", "handler_failed", "no_match", "bad_cwd", "no_such_process"} <= set(found)


async def test_codes_reach_the_result_at_the_one_boundary(tmp_path: Path) -> None:
    def refuses() -> str:
        """Always refuses, with a code."""
        raise ToolError("nothing matched", {"near": 1}, code=ErrorCode.NO_MATCH)

    def breaks() -> str:
        """A bug."""
        raise RuntimeError("oops")

    registry = ToolRegistry()
    registry.add(refuses)
    registry.add(breaks)
    archive_state = State(tmp_path / "state")
    archive = archive_state.archive
    ctx = ToolContext("s", tmp_path, SandboxPolicy(), archive)
    refused = await registry.call("refuses", {}, ctx)
    assert refused.error is not None
    assert (refused.error.code, refused.error.message, refused.error.data) == (
        ErrorCode.NO_MATCH,
        "refuses: nothing matched",
        {"near": 1},
    )
    broken = await registry.call("breaks", {}, ctx)
    archive_state.close()
    assert broken.error is not None and broken.error.code is ErrorCode.HANDLER_FAILED
    # A result may carry the MCP error flag without failing: its data is a value, not a rejection.
    flagged = ToolResult(
        content=[TextContent(text="exit 1")], structured_content={"exit_code": 1}, is_error=True
    )
    assert flagged.is_error and flagged.error is None
