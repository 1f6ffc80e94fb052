"""The tool registry: registration, extensions, validation, calls, search and description."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import anyio
import pydantic
import pytest

from codemode import Extension, Host, Tool, ToolContext, ToolError, ToolResult, UserError, make_tool, tool
from codemode.errors import ErrorCode
from codemode.sandbox import SandboxPolicy
from codemode.state import State
from codemode.tools import ToolRegistry, typescript_signature
from codemode.tools._model import ToolFailure

pytestmark = pytest.mark.anyio


@pytest.fixture
def ctx(tmp_path: Path) -> Iterator[ToolContext]:
    archive_state = State(tmp_path / "state")
    archive = archive_state.archive
    workspace = tmp_path / "ws"
    workspace.mkdir()
    yield ToolContext(
        session_id="s1",
        workspace=workspace,
        policy=SandboxPolicy(writable_roots=(workspace,)),
        archive=archive,
    )
    archive_state.close()


class Item(pydantic.BaseModel):
    n: int
    label: str = "none"


class Order(pydantic.BaseModel):
    """Arguments of place_order."""

    model_config = pydantic.ConfigDict(extra="forbid")
    customer: str = pydantic.Field(description="Who orders.")
    items: list[Item]
    priority: Literal["low", "high"] = "low"


class Stats(pydantic.BaseModel):
    mean: float


# -- registration ---------------------------------------------------------------------------


def test_decorator_with_plain_parameters_derives_the_schema() -> None:
    @tool()
    async def add(a: int, b: int = 2, note: str | None = None) -> int:
        """Add two integers.

        Longer text that is not part of the description.
        """
        return a + b

    assert isinstance(add, Tool)
    assert add.name == "add"
    assert add.description == "Add two integers."
    schema = add.input_schema
    assert schema["required"] == ["a"]
    assert schema["properties"]["a"]["type"] == "integer"
    assert schema["properties"]["b"]["default"] == 2
    assert schema["additionalProperties"] is False
    assert add.model_param is None and add.context_param is None and add.is_async


def test_decorator_with_a_pydantic_model_parameter_uses_the_model() -> None:
    @tool(name="place_order", description="Place an order.")
    def handler(order: Order) -> dict[str, Any]:
        return {"count": len(order.items)}

    assert handler.name == "place_order"
    assert handler.description == "Place an order."
    assert handler.input_model is Order
    assert handler.model_param == "order"
    assert not handler.is_async
    assert handler.input_schema["required"] == ["customer", "items"]
    assert "$defs" in handler.input_schema


def test_bad_names_and_signatures_are_user_errors() -> None:
    with pytest.raises(UserError, match="valid identifier"):
        make_tool(lambda: 1, name="not-valid")

    def star(*args: int) -> int:
        return 0

    with pytest.raises(UserError, match=r"\*args"):
        make_tool(star)


def test_duplicate_names_are_user_errors() -> None:
    registry = ToolRegistry()

    def ping() -> str:
        return "pong"

    registry.add(ping)
    with pytest.raises(UserError, match="'ping' is already registered"):
        registry.add(ping)
    with pytest.raises(UserError, match="already registered"):
        registry.add_extension(Extension("ext", [make_tool(ping)]))
    registry.add_extension(Extension("ext2", [make_tool(ping, name="ping2")]))
    with pytest.raises(UserError, match="extension named 'ext2' is already registered"):
        registry.add_extension(Extension("ext2", [make_tool(ping, name="ping3")]))
    registry.remove("ping")
    assert registry.get("ping") is None
    with pytest.raises(UserError, match="no tool named"):
        registry.remove("ping")


def test_disable_and_enable_an_extension() -> None:
    registry = ToolRegistry()

    def alpha_tool() -> str:
        """Alpha things."""
        return "a"

    registry.add(lambda: "b", name="standalone")
    extension = Extension("alpha", [make_tool(alpha_tool)], guidance="ALPHA")
    registry.add_extension(extension)
    assert registry.get("alpha_tool") is not None
    assert registry.get("alpha_tool").extension == "alpha"  # type: ignore[union-attr]
    assert [e.name for e in registry.extensions] == ["alpha"]
    registry.disable_extension("alpha")
    assert registry.get("alpha_tool") is None
    assert registry.extensions == []
    assert registry.names() == ["standalone"]
    assert registry.search("alpha") == []
    with pytest.raises(UserError, match="no enabled extension"):
        registry.disable_extension("alpha")
    registry.enable_extension("alpha")
    assert registry.names() == ["alpha_tool", "standalone"]
    with pytest.raises(UserError, match="no disabled extension"):
        registry.enable_extension("alpha")


async def test_disabling_an_extension_removes_its_tools_and_guidance_from_the_host(tmp_path: Path) -> None:
    (tmp_path / "ws").mkdir()
    async with Host(workspace=tmp_path / "ws", state_dir=tmp_path / "state") as host:
        before = host.run_code_description()
        assert "- tools.bash({command" in before and "tools.edit_file(" in before
        bash_guidance = next(e.guidance for e in host.registry.extensions if e.name == "bash")
        assert bash_guidance.strip() not in before  # too long: describeTool has it
        assert host.describe_tool("bash")["guide"] == bash_guidance.strip()
        host.disable_extension("files")
        text = host.run_code_description()
        assert "tools.read_file" not in text and "tools.edit_file" not in text
        assert "- tools.bash({command" in text
        result = await host.run_code('await tools.read_file({path: "x"})')
        assert result.error is not None and "Unknown tool 'read_file'" in result.error.message
        host.enable_extension("files")
        assert host.run_code_description() == before


def test_an_extension_is_added_whole_or_not_at_all() -> None:
    registry = ToolRegistry()

    def one() -> str:
        return "1"

    with pytest.raises(UserError, match="several tools named \\['one'\\]"):
        registry.add_extension(Extension("twice", [make_tool(one), make_tool(one)]))
    assert registry.names() == [] and registry.extensions == []
    registry.add_extension(Extension("twice", [make_tool(one)]))  # the name is still free


def test_enabling_an_extension_whose_tool_name_was_taken_keeps_it_disabled() -> None:
    registry = ToolRegistry()

    def shared() -> str:
        return "ext"

    registry.add_extension(Extension("ext", [make_tool(shared)]))
    registry.disable_extension("ext")
    registry.add(lambda: "other", name="shared")
    with pytest.raises(UserError, match="already registered"):
        registry.enable_extension("ext")
    registry.remove("shared")
    registry.enable_extension("ext")  # not lost by the failed attempt
    assert registry.get("shared") is not None and registry.get("shared").extension == "ext"  # type: ignore[union-attr]


# -- validation -----------------------------------------------------------------------------


def test_validation_names_the_json_path_and_what_was_expected() -> None:
    registry = ToolRegistry()
    place = registry.add(make_tool(lambda order: order, name="place", input_model=Order))
    assert registry.validate(place, {"customer": "c", "items": [{"n": 1}]}) is None
    problem = registry.validate(place, {"customer": "c", "items": [{"n": 1}, {"n": "two"}]})
    assert problem is not None
    assert problem.path == "$.items[1].n"
    assert (
        problem.message == 'Input should be a valid integer, unable to parse string as an integer (got "two")'
    )
    message = registry.argument_error_message(place, problem)
    assert message.startswith("Invalid arguments for place: at $.items[1].n:")
    assert message.endswith("Expected: " + typescript_signature(place, with_result=False))
    missing = registry.validate(place, {"items": []})
    assert missing is not None and missing.path == "$.customer" and missing.message == "Field required"
    enum = registry.validate(place, {"customer": "c", "items": [], "priority": "urgent"})
    assert enum is not None and enum.path == "$.priority" and "'low' or 'high'" in enum.message
    extra = registry.validate(place, {"customer": "c", "items": [], "rush": True})
    assert extra is not None and extra.path == "$.rush" and extra.message == "Extra inputs are not permitted"
    not_object = registry.validate(place, [1])
    assert not_object is not None and not_object.path == "$"
    assert not_object.message == "Input should be an object (got [1])"
    several = registry.validate(place, {})
    assert several is not None and several.message == "Field required (and 1 more problem)"


def test_parse_raises_a_coded_tool_error_that_speaks_json() -> None:
    place = make_tool(lambda order: order, name="place", input_model=Order)
    with pytest.raises(ToolError) as info:
        place.parse({"customer": None, "items": []})
    assert info.value.code is ErrorCode.INVALID_ARGUMENTS
    assert info.value.data == {
        "path": "$.customer",
        "message": "Input should be a valid string (got null)",
    }
    assert "None" not in info.value.message and "(got null)" in info.value.message

    def flag(on: bool = False) -> bool:
        return on

    with pytest.raises(ToolError, match=r"at \$\.on: Input should be a valid boolean \(got \[true\]\)"):
        make_tool(flag).parse({"on": [True]})


def test_null_for_an_optional_argument_means_absent() -> None:
    def page(path: str, offset: int = 1, note: str | None = "n", label: Literal["a", None] = "a") -> str:
        return f"{path}:{offset}:{note}:{label}"

    t = make_tool(page)
    assert t.null_means_absent == frozenset({"offset"})
    assert t.parse({"path": "p", "offset": None}).model_dump() == {
        "path": "p",
        "offset": 1,
        "note": "n",
        "label": "a",
    }
    # where null is a value the argument takes, it is passed on
    assert t.parse({"path": "p", "note": None, "label": None}).model_dump()["note"] is None
    with pytest.raises(ToolError, match=r"at \$\.path: Input should be a valid string \(got null\)"):
        t.parse({"path": None})  # a required argument is never absent


def test_arguments_are_validated_once(ctx: ToolContext) -> None:
    seen: list[int] = []

    class Counted(pydantic.BaseModel):
        n: int

        @pydantic.field_validator("n")
        @classmethod
        def count(cls, value: int) -> int:
            seen.append(value)
            return value

    registry = ToolRegistry()
    t = registry.add(make_tool(lambda args: args.n, name="counted", input_model=Counted))
    assert anyio.run(registry.call, "counted", {"n": 4}, ctx).structured_content == 4
    assert seen == [4]
    parsed = t.parse({"n": 5})
    assert registry.invoke_inline(t, parsed, ctx) == 5  # an already-parsed model is not checked again
    assert seen == [4, 5]


# -- calls ----------------------------------------------------------------------------------


async def test_a_sync_handler_runs_in_a_worker_thread_and_gets_the_context(ctx: ToolContext) -> None:
    seen: dict[str, Any] = {}

    def where(label: str, context: ToolContext) -> dict[str, Any]:
        seen["thread"] = threading.get_ident()
        seen["ctx"] = context
        return {"label": label}

    registry = ToolRegistry()
    registered = registry.add(where)
    assert "context" not in registered.input_schema["properties"]
    result = await registry.call("where", {"label": "x"}, ctx)
    assert not result.is_error
    assert result.structured_content == {"label": "x"}
    assert seen["thread"] != threading.get_ident()
    assert seen["ctx"] is ctx


async def test_an_async_handler_runs_on_the_loop_with_its_model(ctx: ToolContext) -> None:
    seen: dict[str, Any] = {}

    async def place(order: Order, c: ToolContext) -> Order:
        seen["thread"] = threading.get_ident()
        seen["session"] = c.session_id
        await anyio.sleep(0)
        return order

    registry = ToolRegistry()
    registry.add(place)
    result = await registry.call("place", {"customer": "ann", "items": [{"n": 2}]}, ctx)
    assert not result.is_error
    assert result.structured_content == {
        "customer": "ann",
        "items": [{"n": 2, "label": "none"}],
        "priority": "low",
    }
    assert seen == {"thread": threading.get_ident(), "session": "s1"}


@pytest.mark.parametrize(
    ("value", "text", "structured"),
    [
        ("plain", "plain", None),
        (5, "5", 5),
        (None, "", None),
        (float("nan"), "null", None),  # as JSON has it, not Python's "NaN"
        ({"a": [1, "é"]}, '{"a": [1, "é"]}', {"a": [1, "é"]}),
        (ToolResult.from_text("t", {"s": 1}), "t", {"s": 1}),
    ],
)
async def test_handler_return_values_become_results(
    ctx: ToolContext, value: Any, text: str, structured: Any
) -> None:
    registry = ToolRegistry()
    registry.add(lambda: value, name="give")
    result = await registry.call("give", {}, ctx)
    assert (result.text, result.structured_content, result.is_error) == (text, structured, False)


async def test_handler_failures_become_error_results(ctx: ToolContext) -> None:
    def refuses(x: int) -> str:
        raise ToolError("x must be even", {"x": x}, code=ErrorCode.TOOL_FAILED)

    async def breaks(x: int) -> str:
        raise KeyError("missing")

    def misuses() -> str:
        raise UserError("developer mistake")

    registry = ToolRegistry()
    for fn in (refuses, breaks, misuses):
        registry.add(fn)
    refused = await registry.call("refuses", {"x": 3}, ctx)
    assert (
        refused.is_error
        and refused.text == "refuses: x must be even"
        and refused.structured_content == {"x": 3}
    )
    assert refused.error == ToolFailure(code=ErrorCode.TOOL_FAILED, message=refused.text, data={"x": 3})
    broken = await registry.call("breaks", {"x": 3}, ctx)
    assert broken.is_error and broken.text == "breaks failed: KeyError: 'missing'"
    assert broken.structured_content == {"detail": "KeyError: 'missing'"}
    assert broken.error is not None and broken.error.code is ErrorCode.HANDLER_FAILED
    with pytest.raises(UserError):  # the embedding developer's mistake is not hidden from them
        await registry.call("misuses", {}, ctx)
    registry.add(lambda: object(), name="opaque")
    opaque = await registry.call("opaque", {}, ctx)
    assert opaque.is_error and opaque.text.startswith("opaque failed: PydanticSerializationError")
    unknown = await registry.call("refuse", {}, ctx)
    assert unknown.is_error and "Did you mean: refuses" in unknown.text
    assert unknown.error is not None and unknown.error.code is ErrorCode.UNKNOWN_TOOL
    invalid = await registry.call("refuses", {"x": "three"}, ctx)
    assert invalid.is_error and invalid.structured_content["path"] == "$.x"
    assert invalid.error is not None and invalid.error.code is ErrorCode.INVALID_ARGUMENTS
    assert invalid.text.startswith("Invalid arguments for refuses: at $.x:")


# -- search and describe --------------------------------------------------------------------


def _search_registry() -> ToolRegistry:
    registry = ToolRegistry()

    def read_file(path: str, offset: int = 0) -> str:
        """Read a text file by lines."""
        return ""

    def write_file(path: str, content: str) -> str:
        """Write a whole file."""
        return ""

    def grep(pattern: str, path: str) -> str:
        """Search file contents for a regular expression."""
        return ""

    def deploy(environment: str) -> str:
        """Ship the service to production."""
        return ""

    def fetch_weather(city: str) -> str:
        """Current conditions for a city."""
        return ""

    for fn in (read_file, write_file, grep, deploy, fetch_weather):
        registry.add(fn)
    return registry


def test_search_ranks_name_then_parameters_then_description() -> None:
    registry = _search_registry()

    def names(query: str) -> list[str]:
        return [hit["name"] for hit in registry.search(query)]

    assert names("read_file")[0] == "read_file"
    assert names("readFile")[0] == "read_file"
    assert names("read file")[:2] == ["read_file", "write_file"]
    assert names("weather")[0] == "fetch_weather"
    assert names("environment") == ["deploy"]  # a parameter name only
    assert names("production") == ["deploy"]  # the description only
    assert names("regular expression")[0] == "grep"
    assert names("nothing-like-this") == []
    assert registry.search("file", limit=1) == [
        {"name": "read_file", "description": "Read a text file by lines."}
    ]
    assert [h["name"] for h in registry.search("")] == sorted(registry.names())


def test_search_finds_the_parameters_of_each_object_of_a_union() -> None:
    class Get(pydantic.BaseModel):
        op: Literal["get"] = "get"
        key: str

    class Put(pydantic.BaseModel):
        op: Literal["put"]
        payload: str

    class ByOp(pydantic.RootModel[Get | Put]):
        root: Get | Put

    registry = _search_registry()
    registry.add(make_tool(lambda args: None, name="kv", description="A store.", input_model=ByOp))
    assert [hit["name"] for hit in registry.search("payload")] == ["kv"]


def test_unknown_tool_message_names_close_matches() -> None:
    registry = _search_registry()
    message = registry.unknown_tool_message("reed_file")
    assert "Unknown tool 'reed_file'" in message and "read_file" in message
    assert "searchTools" in message and "describeTool" in message
    by_words = registry.unknown_tool_message("weather")  # no close spelling: falls back to search
    assert "fetch_weather" in by_words


def test_describe_gives_schema_signature_and_output_schema() -> None:
    registry = ToolRegistry()

    def stats(values: list[float]) -> Stats:
        """Basic statistics."""
        return Stats(mean=sum(values) / len(values))

    registry.add(stats)
    described = registry.describe("stats")
    assert described["name"] == "stats"
    assert described["title"] == "Stats"
    assert described["description"] == "Basic statistics."
    assert described["input_schema"]["properties"]["values"]["type"] == "array"
    assert described["signature"] == "tools.stats(args: { values: number[] }): Promise<{ mean: number }>"
    output = described["output_schema"]
    assert output is not None and output["required"] == ["mean"]
    with pytest.raises(ToolError, match="stats") as info:
        registry.describe("stat")
    assert info.value.code is ErrorCode.UNKNOWN_TOOL


# -- patterns and big integers ---------------------------------------------------------------


def test_patterns_are_checked() -> None:
    class Code(pydantic.BaseModel):
        code: str = pydantic.Field(pattern=r"^[A-Z]{3}$")

    registry = ToolRegistry()
    check = registry.add(make_tool(lambda args: args, name="check", input_model=Code))
    assert registry.validate(check, {"code": "ABC"}) is None
    problem = registry.validate(check, {"code": "abc"})
    assert problem is not None and problem.path == "$.code" and '(got "abc")' in problem.message


def test_integers_beyond_64_bits_are_still_validated() -> None:
    registry = ToolRegistry()
    big = registry.add(
        make_tool(lambda a: a, name="big", input_model=pydantic.create_model("Big", a=(int, ...)))
    )
    assert registry.validate(big, {"a": 2**70}) is None
    problem = registry.validate(big, {"a": 1.5})
    assert problem is not None and problem.path == "$.a"


# -- lazy extensions -----------------------------------------------------------------------


def _lazy(loads: list[str], *, effectful: frozenset[str] = frozenset({"put"})) -> Any:
    from codemode.tools import LazyExtension

    def put(key: str) -> str:
        """Store a key."""
        return key

    def peek() -> str:
        """Look."""
        return "seen"

    def load() -> Extension:
        loads.append("loaded")
        return Extension(
            "kv", [make_tool(put, name="put", destructive=True), make_tool(peek, name="peek", read_only=True)]
        )

    return LazyExtension("kv", ("put", "peek"), effectful, load)


def test_a_lazy_extension_loads_at_the_first_use_of_a_tool_once() -> None:
    loads: list[str] = []
    registry = ToolRegistry()
    registry.add_extension(_lazy(loads))
    assert registry.names() == ["peek", "put"] and len(registry) == 2
    assert registry.effectful_names_json() == '["put"]'
    assert loads == []
    barrier = threading.Barrier(4)
    found: list[Any] = []

    def look() -> None:
        barrier.wait()
        found.append(registry.get("put"))

    threads = [threading.Thread(target=look) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert loads == ["loaded"]  # programs' threads looked it up at once: loaded once
    assert len({id(t) for t in found}) == 1 and found[0].extension == "kv"
    assert registry.effectful_names_json() == '["put"]'
    assert [e.name for e in registry.extensions] == ["kv"]


def test_a_search_or_a_listing_loads_every_lazy_extension() -> None:
    loads: list[str] = []
    registry = ToolRegistry()
    registry.add_extension(_lazy(loads))
    assert [r["name"] for r in registry.search("store a key")][:1] == ["put"]
    assert loads == ["loaded"]
    assert [t.name for t in registry] == ["peek", "put"]


def test_a_lazy_extension_that_loads_other_tools_than_it_declared_fails_loudly() -> None:
    registry = ToolRegistry()
    registry.add_extension(_lazy([], effectful=frozenset()))  # put is destructive: undeclared
    with pytest.raises(UserError, match=r"lazy extension .kv. declared tools .*but loaded"):
        registry.get("put")


def test_a_lazy_extension_is_disabled_enabled_and_removed_without_loading() -> None:
    loads: list[str] = []
    registry = ToolRegistry()
    registry.add_extension(_lazy(loads))
    registry.disable_extension("kv")
    assert registry.names() == [] and registry.get("put") is None
    registry.enable_extension("kv")
    assert registry.names() == ["peek", "put"] and loads == []
    with pytest.raises(UserError, match="already registered"):
        registry.add(make_tool(lambda: "x", name="put", description="clash"))
    registry.remove_extension("kv")
    assert registry.names() == [] and loads == []
    registry.add(make_tool(lambda: "x", name="put", description="now free"))
    assert registry.names() == ["put"]


def test_removing_a_tool_of_an_unloaded_lazy_extension_loads_it_first() -> None:
    loads: list[str] = []
    registry = ToolRegistry()
    registry.add_extension(_lazy(loads))
    registry.remove("put")
    assert loads == ["loaded"] and registry.names() == ["peek"]


def test_a_lookup_that_misses_while_another_thread_loads_the_tool_still_finds_it() -> None:
    # The lookup's first read misses; another thread loads the extension before the lookup
    # reads on (paused there, deterministically, by a dict that waits in its get).
    registry = ToolRegistry()
    registry.add_extension(_lazy([]))
    main = threading.current_thread()
    paused, go = threading.Event(), threading.Event()

    class PausingDict(dict[str, Any]):
        def get(self, key: str, default: Any = None) -> Any:
            found = dict.get(self, key, default)
            if threading.current_thread() is main and not go.is_set():
                paused.set()
                go.wait(5)
            return found

    registry._tools = PausingDict(registry._tools)

    def load_meanwhile() -> None:
        paused.wait(5)
        registry.get("put")
        go.set()

    other = threading.Thread(target=load_meanwhile)
    other.start()
    found = registry.get("put")
    other.join()
    assert found is not None and found.name == "put"
