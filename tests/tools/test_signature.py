"""TypeScript-style signatures rendered from JSON Schema."""

from __future__ import annotations

import dataclasses
from typing import Annotated, Any, Literal

import pydantic
import pytest
from typing_extensions import TypedDict

from codemode import ToolResult, make_tool
from codemode.tools import schema_to_ts, typescript_signature


class Inner(pydantic.BaseModel):
    x: int
    tags: list[str] = []


class Node(pydantic.BaseModel):
    name: str
    children: list[Node] = []


class Args(pydantic.BaseModel):
    mode: Literal["fast", "slow"] = "fast"
    inner: Inner
    maybe: Inner | None = None
    many: list[Inner | int]
    mapping: dict[str, int]
    tree: Node | None = None
    anything: Any = None
    count: int = pydantic.Field(5, ge=1, le=10, description="How\nmany */ items.")
    pair: tuple[int, str] | None = None


def _signature(model: type[pydantic.BaseModel], **kwargs: Any) -> str:
    return typescript_signature(make_tool(lambda args: args, name="t", input_model=model, **kwargs))


def test_signature_of_a_rich_model() -> None:
    assert _signature(Args) == (
        "tools.t(args: { "
        'mode?: "fast" | "slow" /* default "fast" */; '
        "inner: { x: number; tags?: string[] /* default [] */ }; "
        "maybe?: { x: number; tags?: string[] /* default [] */ } | null; "
        "many: ({ x: number; tags?: string[] /* default [] */ } | number)[]; "
        "mapping: Record<string, number>; "
        "tree?: { name: string; children?: Node[] /* default [] */ } | null; "
        "anything?: any; "
        "count?: number /* default 5; >= 1; <= 10; How many * / items. */; "
        "pair?: [number, string] | null"
        " }): Promise<any>"
    )


def test_all_optional_arguments_make_args_optional() -> None:
    class Options(pydantic.BaseModel):
        verbose: bool = False

    assert _signature(Options) == "tools.t(args?: { verbose?: boolean /* default false */ }): Promise<any>"
    assert typescript_signature(make_tool(lambda: 1, name="none")) == "tools.none(args?: {}): Promise<any>"


def test_the_result_model_becomes_the_promise_type() -> None:
    class One(pydantic.BaseModel):
        q: str

    class Hits(pydantic.BaseModel):
        hits: list[str]
        n: int = 0

    assert _signature(One, result_model=Hits) == (
        "tools.t(args: { q: string }): Promise<{ hits: string[]; n?: number /* default 0 */ }>"
    )


class Weather(pydantic.BaseModel):
    city: str
    temp_c: float = pydantic.Field(description="Celsius.")


class Forecast(TypedDict):
    city: str
    days: list[float]


@dataclasses.dataclass
class Place:
    name: str
    lat: float


def weather() -> Weather:
    return Weather(city="x", temp_c=0)


def forecast() -> Forecast:
    return {"city": "x", "days": []}


def place() -> Place:
    return Place("x", 0)


def count() -> int:
    return 0


def names() -> list[str]:
    return []


def many() -> list[Weather]:
    return []


def maybe() -> Weather | None:
    return None


def table() -> dict[str, int]:
    return {}


def tree() -> Node:
    return Node(name="root")


def nothing() -> None:
    return None


def untyped():  # type: ignore[no-untyped-def]
    return 1


def raw() -> ToolResult:
    return ToolResult.from_text("x")


@pytest.mark.parametrize(
    ("fn", "returns"),
    [
        (weather, "{ city: string; temp_c: number /* Celsius. */ }"),
        (forecast, "{ city: string; days: number[] }"),
        (place, "{ name: string; lat: number }"),
        (count, "number"),
        (names, "string[]"),
        (many, "{ city: string; temp_c: number /* Celsius. */ }[]"),
        (maybe, "{ city: string; temp_c: number /* Celsius. */ } | null"),
        (table, "Record<string, number>"),
        (tree, "{ name: string; children?: Node[] /* default [] */ }"),
        (nothing, "void"),
        (untyped, "any"),
        (raw, "any"),
    ],
)
def test_the_return_annotation_is_the_result_type(fn: Any, returns: str) -> None:
    signature = typescript_signature(make_tool(fn))
    assert signature == f"tools.{fn.__name__}(args?: {{}}): Promise<{returns}>"


def test_the_signature_without_its_result_is_the_call() -> None:
    assert typescript_signature(make_tool(weather), with_result=False) == "tools.weather(args?: {})"


@pytest.mark.parametrize(
    ("schema", "expected"),
    [
        ({"type": "string"}, "string"),
        ({"type": ["string", "null"]}, "string | null"),
        ({"enum": [1, "a", None]}, '1 | "a" | null'),
        ({"const": "x"}, '"x"'),
        (
            {"type": "array", "items": {"anyOf": [{"type": "string"}, {"type": "number"}]}},
            "(string | number)[]",
        ),
        ({"type": "array"}, "any[]"),
        ({"type": "object"}, "Record<string, any>"),
        ({"type": "object", "additionalProperties": {"type": "boolean"}}, "Record<string, boolean>"),
        (
            {"type": "object", "properties": {"a-b": {"type": "integer"}}, "required": ["a-b"]},
            '{ "a-b": number }',
        ),
        ({"allOf": [{"type": "integer"}]}, "number"),
        ({"$ref": "#/$defs/Missing"}, "any"),
        ({"oneOf": [{"type": "string"}, {"type": "string"}]}, "string"),
        ("not a schema", "any"),
        ({}, "any"),
    ],
)
def test_schema_fragments(schema: Any, expected: str) -> None:
    assert schema_to_ts(schema) == expected


def test_refs_resolve_against_the_root_defs() -> None:
    schema = {
        "$defs": {"Point": {"type": "object", "properties": {"x": {"type": "number"}}, "required": ["x"]}},
        "type": "object",
        "properties": {"points": {"type": "array", "items": {"$ref": "#/$defs/Point"}}},
        "required": ["points"],
    }
    assert schema_to_ts(schema) == "{ points: { x: number }[] }"


def test_deep_nesting_ends_in_any_instead_of_growing_forever() -> None:
    schema: dict[str, Any] = {"type": "string"}
    for _ in range(20):
        schema = {"type": "array", "items": schema}
    rendered = schema_to_ts(schema)
    assert rendered.startswith("any") and rendered.endswith("[]")
    assert rendered.count("[]") < 20


class _Get(pydantic.BaseModel):
    op: Literal["get"] = "get"
    key: str


class _Put(pydantic.BaseModel):
    op: Literal["put"]
    key: str
    value: int = pydantic.Field(description="what to store.")


class _Stats(pydantic.BaseModel):
    verbose: bool = False


class _ByOp(pydantic.RootModel[_Get | _Put]):
    root: Annotated[_Get | _Put, pydantic.Field(discriminator="op")]


class _ByOpOrStats(pydantic.RootModel[_Get | _Stats]):
    root: _Get | _Stats


def test_a_union_of_objects_reads_as_one_object_per_option() -> None:
    # One object per option, each with its own fields; a const's default goes without saying.
    assert _signature(_ByOp) == (
        'tools.t(args: { op?: "get"; key: string } | '
        '{ op: "put"; key: string; value: number /* what to store. */ }): Promise<any>'
    )
    # args may be left out only when one of the options takes nothing.
    assert _signature(_ByOpOrStats).startswith(
        'tools.t(args?: { op?: "get"; key: string } | { verbose?: boolean /* default false */ })'
    )


def test_a_union_of_objects_in_an_array_is_parenthesised() -> None:
    schema = {
        "type": "array",
        "items": {
            "oneOf": [
                {"type": "object", "properties": {"a": {"type": "number"}}, "required": ["a"]},
                {"type": "object", "properties": {"b": {"const": "x", "default": "x"}}},
            ]
        },
    }
    assert schema_to_ts(schema) == '({ a: number } | { b?: "x" })[]'
