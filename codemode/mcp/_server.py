"""The MCP server: ``run_code`` plus every registered tool, over the official MCP SDK.

The low-level ``Server`` is used (not ``MCPServer``) because the tools already carry their
own JSON Schemas and MCP-shaped results; the SDK only needs to list and route them.

Which tools it lists, under which names, is the surface (`codemode._surface`): ``code``
(run_code alone), ``default`` (run_code plus bash and the file tools) or ``all``; a tool it
does not list is still reachable from programs. What each lists: its title, its annotations
(``readOnlyHint``, ``destructiveHint``), its input schema and, with ``output_schemas`` and where
its result type is known, its output schema's top level (a result that is not a JSON object
travels as ``{"result": ...}``, as the MCP SDK does it). ``run_code``'s structured
content is its `RunCodeOutput`: the same text the model reads, plus how it was cut and what
failed. A direct tool's structured content counts against the same token budget as its text:
a tool without an output schema sends none when it does not fit; one with an output schema
(whose clients rely on structured content) sends it with its longest strings cut, head and
tail kept around a note, until it fits.

Which codemode session a call runs in: over stdio, the host's (one process, one client); over
streamable HTTP, one per MCP session (see `ConnectionSessions`). A call whose client sent a
``progressToken`` gets ``notifications/progress`` about once a second while it runs.
"""

from __future__ import annotations

import contextlib
import json
import math
from collections.abc import Mapping
from typing import Any

import mcp.types as types
import pydantic
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.shared.jsonrpc_dispatcher import progress_token_from_params
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS

from codemode._ids import check_id
from codemode._json import JsonObject
from codemode._progress import Progress, ProgressCallback
from codemode._published import RUN_CODE_SCHEMA, flat_input_schema
from codemode._results import RunError, RunImage, Usage, error_content
from codemode._surface import SurfaceName, check_surface, listed_tools, shallow_output_schema
from codemode._version import __version__
from codemode.budget import TokenCounter
from codemode.errors import ErrorCode, GuestErrorKind, UserError
from codemode.host import Host
from codemode.mcp._approval import Elicitor, direct_call
from codemode.mcp._disconnect import of_request
from codemode.mcp._sessions import NoSession, SessionOf
from codemode.tools import Tool

__all__ = ["RUN_CODE_SCHEMA", "RunCodeOutput", "create_failed_server", "create_server", "flat_input_schema"]


class RunCodeError(RunError):
    """How the program failed."""

    kind: GuestErrorKind  # type: ignore[assignment]  # the documented kinds of RunError.kind


class RunCodeOutput(pydantic.BaseModel):
    """``run_code``'s structured content: what its text shows, as data.

    Attributes:
        ok: True when the program finished without an error.
        call_id: The call's id (pass it again to replay the recorded result).
        text: The text the model reads: printed output within the budget, then any error.
        truncated: Whether the printed output was cut to fit the budget.
        refs: Archive references holding the cut text (read them with ``read_archive``).
        error: How the program failed, when it did.
        usage: Tokens, bytes, calls and time.
    """

    ok: bool
    call_id: str
    text: str
    truncated: bool
    refs: list[str]
    error: RunCodeError | None
    usage: Usage


RUN_CODE_OUTPUT_SCHEMA: JsonObject = RunCodeOutput.model_json_schema(mode="serialization")

# How a string that was cut says so (the budget's recovery line names the archive reference).
_CUT_NOTE = "\n[... {cut:,} characters cut to fit the output budget{where} ...]\n"
_MIN_KEPT_CHARS = 64  # strings shorter than twice this are left whole


def create_server(
    host: Host,
    *,
    name: str = "codemode",
    session_of: SessionOf | None = None,
    handshake_only: bool = False,
    surface: SurfaceName = "default",
    output_schemas: bool = False,
) -> Server[Any]:
    """An MCP server exposing ``run_code`` and the host's tools (the host must be open).

    Args:
        host: The open host whose tools are served.
        name: The server's name in its ``serverInfo``.
        session_of: The codemode session of a request (None: the host's configured session);
            it raises `NoSession` for a request that cannot have one (the message says why).
        handshake_only: Answer ``server/discover`` with the handshake protocol versions only, so
            that clients open an MCP session (the HTTP front keys codemode sessions on them;
            protocol 2026-07-28 has none). SDK clients then fall back to ``initialize``.
        surface: Which tools are listed: ``code``, ``default`` or ``all`` (`codemode._surface`).
        output_schemas: List output schemas (their top level) too.

    Raises:
        UserError: ``surface`` is not one of code, default, all.
    """
    check_surface(surface)

    # Without an approval callback of the host's own, the client's user decides (elicitation).
    elicitor = Elicitor(host.config.session_id) if host.approvals.callback is None else None
    if elicitor is not None:
        host.approvals.callback = elicitor

    async def list_tools(ctx: Any, params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        if session_of is not None:  # a session that lists its tools is held from then on
            with contextlib.suppress(NoSession):
                session_of(ctx)
        tools = [_run_code_tool(host.run_code_description(), output_schemas=output_schemas)]
        for listed in listed_tools(host.registry, surface):
            t = listed.tool
            schema = _output_schema(t)[0] if output_schemas else None
            tools.append(
                types.Tool(
                    name=listed.name,
                    title=t.title,
                    description=t.description,
                    input_schema=flat_input_schema(t.input_schema),
                    output_schema=None if schema is None else shallow_output_schema(schema),
                    annotations=_annotations(t),
                )
            )
        return types.ListToolsResult(tools=tools)

    def real_name(name: str) -> str | None:
        """The tool a listed name stands for; None when this surface does not list it."""
        return next(
            (item.tool.name for item in listed_tools(host.registry, surface) if item.name == name), None
        )

    async def call_tool(
        ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        try:
            session = session_of(ctx) if session_of is not None else None
        except NoSession as exc:
            return _error(str(exc))
        direct = params.name != "run_code"
        serving = (
            elicitor.serving(session, ctx, direct=direct) if elicitor is not None else direct_call(direct)
        )
        disconnect = of_request(ctx.request)
        watch = disconnect.calls() if disconnect is not None else contextlib.nullcontext()
        try:
            with serving, watch:
                return await dispatch(params, session, _progress_callback(ctx))
        except Exception as exc:  # a host fault: an error result, never a protocol error
            return _error(f"{params.name} failed on the host: {type(exc).__name__}: {exc}")
        # Here only when the client went away first: nobody reads this answer.
        return _error(f"{params.name} was cancelled: its client disconnected before the answer")

    async def dispatch(
        params: types.CallToolRequestParams, session: str | None, on_progress: ProgressCallback | None
    ) -> types.CallToolResult:
        args = dict(params.arguments or {})
        if params.name == "run_code":
            return await run_code(args, session, on_progress)
        name = real_name(params.name)
        if name is None:  # coded as the host codes an unknown tool
            refused = _error(_not_listed(params.name, host, surface))
            refused.structured_content = error_content(ErrorCode.UNKNOWN_TOOL, {"name": params.name})
            return refused
        called = await host.call_tool(name, args, session_id=session, on_progress=on_progress)
        t = host.registry.get(name)
        schema, wrapped = _output_schema(t) if t is not None else (None, False)
        schema = schema if output_schemas else None
        structured = called.structured_content
        failed = called.code is not None  # its structured content is `error_content`, never wrapped
        if (
            structured is not None
            and not failed
            and (wrapped or (schema is None and not isinstance(structured, dict)))
        ):
            structured = {"result": structured}
        if structured is not None:
            budget = host.config.max_output_tokens
            where = f"; full text: read_archive({{ref: {json.dumps(called.refs[0])}}})" if called.refs else ""
            structured = _fit_structured(structured, budget, host.counter, where, cut=schema is not None)
        content: list[types.ContentBlock] = [types.TextContent(type="text", text=called.text)]
        content += _image_blocks(called.images)
        return types.CallToolResult(content=content, structured_content=structured, is_error=called.is_error)

    async def run_code(
        args: Mapping[str, object], session: str | None, on_progress: ProgressCallback | None
    ) -> types.CallToolResult:
        code = args.get("code")
        if not isinstance(code, str):
            return _error('run_code needs {"code": "<JavaScript program>"}')
        given_id = args.get("call_id")
        call_id = None
        if given_id is not None:
            try:
                call_id = check_id(given_id, "call_id")
            except UserError as exc:
                return _error(f"run_code: {exc}; nothing ran")
        result = await host.run_code(code, session_id=session, call_id=call_id, on_progress=on_progress)
        output = {
            "ok": result.ok,
            "call_id": result.call_id,
            "text": result.text,
            "truncated": result.truncated,
            "refs": result.refs,
            "error": None if result.error is None else result.error.model_dump(mode="json"),
            "usage": result.usage.model_dump(mode="json"),
        }
        content: list[types.ContentBlock] = [types.TextContent(type="text", text=result.text)]
        content += _image_blocks(result.images)
        return types.CallToolResult(content=content, structured_content=output, is_error=not result.ok)

    server: Server[Any] = Server(
        name,
        version=__version__,
        instructions=_INSTRUCTIONS,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
    )
    if handshake_only:

        async def discover(ctx: Any, params: types.RequestParams | None) -> types.DiscoverResult:
            return types.DiscoverResult(
                supported_versions=list(HANDSHAKE_PROTOCOL_VERSIONS),
                capabilities=server.get_capabilities(),
                instructions=_INSTRUCTIONS,
            )

        server.add_request_handler("server/discover", types.RequestParams, discover)
    return server


def _image_blocks(images: list[RunImage]) -> list[types.ContentBlock]:
    """The images a result shows, as MCP image content (after its text)."""
    return [types.ImageContent(type="image", data=i.data, mime_type=i.mime_type) for i in images]


_INSTRUCTIONS = "Use run_code to call several tools in one JavaScript program; print only what you need."


def create_failed_server(problem: str, *, name: str = "codemode") -> Server[Any]:
    """A server for a codemode that could not start: it lists ``run_code`` and answers every
    call with an error result naming ``problem``, so the client shows the reason (a closed
    connection would leave it on the server's stderr, which most clients hide)."""
    message = f"codemode could not start, so no tool can run: {problem}. Fix that and restart the MCP server."

    async def list_tools(ctx: Any, params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        return types.ListToolsResult(tools=[_run_code_tool(message)])

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        return _error(message)

    return Server(
        name, version=__version__, instructions=message, on_list_tools=list_tools, on_call_tool=call_tool
    )


def _run_code_tool(description: str, *, output_schemas: bool = False) -> types.Tool:
    return types.Tool(
        name="run_code",
        title="Run code",
        description=description,
        input_schema=RUN_CODE_SCHEMA,
        output_schema=_RUN_CODE_SHALLOW if output_schemas else None,
        annotations=types.ToolAnnotations(read_only_hint=False, destructive_hint=True),
    )


_RUN_CODE_SHALLOW = shallow_output_schema(RUN_CODE_OUTPUT_SCHEMA)


def _not_listed(name: str, host: Host, surface: str) -> str:
    """Why a direct call of ``name`` cannot run, and what to do."""
    if host.registry.get(name) is not None:
        return (
            f"{name} is not listed in this surface (--tools {surface}): call it inside run_code as "
            f"tools.{name}(args), or serve --tools all"
        )
    return host.registry.unknown_tool_message(name)


def _progress_callback(ctx: ServerRequestContext[Any]) -> ProgressCallback | None:
    """Reports for this request as ``notifications/progress`` (progress: elapsed seconds), when
    its client asked for them with a ``progressToken``."""
    if progress_token_from_params(ctx.params) is None:
        return None

    async def report(progress: Progress) -> None:
        await ctx.session.report_progress(progress.elapsed_seconds, None, progress.message())

    return report


def _annotations(t: Tool) -> types.ToolAnnotations:
    if t.read_only:
        return types.ToolAnnotations(read_only_hint=True)
    return types.ToolAnnotations(read_only_hint=False, destructive_hint=t.destructive)


def _output_schema(t: Tool) -> tuple[JsonObject | None, bool]:
    """The tool's MCP output schema (an object schema, as MCP requires), and whether its result
    travels wrapped as ``{"result": ...}``. None for tools whose result is unknown or plain text."""
    schema = t.output_schema
    if schema is None or schema.get("type") == "string":
        return None, False
    defs = schema.get("$defs", {})
    root = schema
    if "$ref" in schema and _resolve(schema, defs):
        root = {**_resolve(schema, defs), "$defs": defs}  # a recursive model: its own schema at the root
    if root.get("type") == "object":
        return root, False
    options = root.get("anyOf") or root.get("oneOf")
    if options and all(_resolve(option, defs).get("type") == "object" for option in options):
        return {"type": "object", **root}, False  # a union of objects (bash's results, by action)
    inner = {key: value for key, value in schema.items() if key != "$defs"}
    wrapped: dict[str, object] = {"type": "object", "properties": {"result": inner}, "required": ["result"]}
    if defs:
        wrapped["$defs"] = defs
    return wrapped, True


def _resolve(schema: JsonObject, defs: Mapping[str, object]) -> JsonObject:
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/$defs/"):
        target = defs.get(ref[8:])
        return target if isinstance(target, dict) else {}
    return schema


def _fit_structured(value: Any, budget: int, counter: TokenCounter, where: str, *, cut: bool) -> Any:
    """``value`` when its JSON fits ``budget`` tokens; else None, or with ``cut`` its longest
    strings cut (head and tail kept around a note) until it fits, or nothing is left to cut."""
    text = json.dumps(value, ensure_ascii=False)
    if _fits(text, budget, counter):
        return value
    if not cut:
        return None
    value = json.loads(text)  # a copy to cut
    for _ in range(8):
        tokens = counter.count(text)
        if tokens <= budget:
            break
        strings = sorted(_strings(value), key=lambda found: -len(found[0][found[1]]))
        chars_per_token = len(text) / max(tokens, 1)
        excess = math.ceil((tokens - budget) * chars_per_token) + len(_CUT_NOTE) + len(where) + 32
        if not strings or len(strings[0][0][strings[0][1]]) < 2 * _MIN_KEPT_CHARS:
            break
        for holder, key in strings:
            if excess <= 0:
                break
            whole: str = holder[key]
            removable = len(whole) - 2 * _MIN_KEPT_CHARS
            if removable <= 0:
                break
            drop = min(removable, excess)
            keep = len(whole) - drop
            head, tail = whole[: keep - keep // 2], whole[len(whole) - keep // 2 :]
            holder[key] = head + _CUT_NOTE.format(cut=drop, where=where) + tail
            excess -= drop
        text = json.dumps(value, ensure_ascii=False)
    return value


def _fits(text: str, budget: int, counter: TokenCounter) -> bool:
    size = len(text.encode("utf-8", "surrogatepass"))
    if size <= budget:  # a token covers at least one byte
        return True
    if size > budget * counter.max_token_bytes:  # more tokens than the budget, whatever the text
        return False
    return counter.count(text) <= budget


def _strings(value: Any) -> list[tuple[Any, Any]]:
    """Every string inside a JSON value, as (container, key or index)."""
    found: list[tuple[Any, Any]] = []
    stack = [value]
    while stack:
        item = stack.pop()
        pairs = item.items() if isinstance(item, dict) else enumerate(item) if isinstance(item, list) else ()
        for key, child in pairs:
            if isinstance(child, str):
                found.append((item, key))
            elif isinstance(child, dict | list):
                stack.append(child)
    return found


def _error(message: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=message)], is_error=True)
