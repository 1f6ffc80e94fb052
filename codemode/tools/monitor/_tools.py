"""The Monitor's tools (arguments, results, handlers) and its guidance text."""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

import anyio
import anyio.to_thread
import pydantic

from codemode.tools._model import Extension, Tool, ToolContext, ToolResult, make_tool
from codemode.tools.bash import ProcessManager
from codemode.tools.bash._limits import DEFAULT_WAIT_MS, MAX_WAIT_MS
from codemode.tools.bash._manager import MAX_EVENTS_PER_READ, wait_text
from codemode.tools.bash._results import State
from codemode.tools.bash._tool import UntilPattern

if TYPE_CHECKING:
    from codemode.tools.bash._manager import WatcherData

DEFAULT_TIMEOUT_SECONDS = 30 * 60
MAX_TIMEOUT_SECONDS = 24 * 3600
DEFAULT_COALESCE_MS = 200
DEFAULT_EVENTS_PER_MINUTE = 30


class _Args(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid")


class MonitorStartArgs(_Args):
    """Start a watcher."""

    command: str = pydantic.Field(
        min_length=1,
        description="a bash script that polls/filters and prints one line per thing worth telling (stdout).",
    )
    description: str | None = pydantic.Field(
        default=None, max_length=200, description="what it watches (shown with each event)."
    )
    timeout_seconds: int = pydantic.Field(
        default=DEFAULT_TIMEOUT_SECONDS,
        ge=1,
        le=MAX_TIMEOUT_SECONDS,
        description=f"stop it after this long (default {DEFAULT_TIMEOUT_SECONDS}, at most {MAX_TIMEOUT_SECONDS}).",
    )
    max_events: int | None = pydantic.Field(
        default=None, ge=1, le=100_000, description="stop after this many events."
    )
    idle_timeout_seconds: int | None = pydantic.Field(
        default=None, ge=1, le=MAX_TIMEOUT_SECONDS, description="stop when no line came for this long."
    )
    coalesce_ms: int = pydantic.Field(
        default=DEFAULT_COALESCE_MS,
        ge=0,
        le=10_000,
        description=f"lines within this window after an event make one event (default {DEFAULT_COALESCE_MS}).",
    )
    max_events_per_minute: int = pydantic.Field(
        default=DEFAULT_EVENTS_PER_MINUTE,
        ge=1,
        le=600,
        description=f"rate limit; lines beyond it are suppressed and counted (default {DEFAULT_EVENTS_PER_MINUTE}).",
    )
    cwd: str | None = pydantic.Field(
        default=None, description="working directory, relative to the workspace root."
    )


class MonitorIdArgs(_Args):
    """One watcher."""

    watcher_id: str = pydantic.Field(min_length=1, description="the id monitor_start returned.")


class MonitorListArgs(_Args):
    """No arguments."""


class MonitorEventsArgs(_Args):
    """Read a watcher's events."""

    watcher_id: str = pydantic.Field(min_length=1, description="the id monitor_start returned.")
    after: int = pydantic.Field(
        default=0, ge=0, description="events numbered above this (the last next_after)."
    )
    wait_ms: int = pydantic.Field(
        default=0, ge=0, le=MAX_WAIT_MS, description="wait up to this long for an event (default: at once)."
    )
    limit: int = pydantic.Field(default=MAX_EVENTS_PER_READ, ge=1, le=MAX_EVENTS_PER_READ)


class MonitorWaitArgs(_Args):
    """Wait for a watcher's event matching a pattern, or its end."""

    watcher_id: str = pydantic.Field(min_length=1, description="the id monitor_start returned.")
    until: Literal["exit"] | UntilPattern = pydantic.Field(
        default="exit", description='"exit" (default) or {pattern: "deployed|failed"} (matched per line).'
    )
    timeout_ms: int = pydantic.Field(default=DEFAULT_WAIT_MS, ge=0, le=MAX_WAIT_MS)
    after: int = pydantic.Field(default=0, ge=0, description="look at events numbered above this.")


class WatcherOptions(pydantic.BaseModel):
    """The limits a watcher runs with."""

    timeout_seconds: int
    max_events: int | None
    idle_timeout_seconds: int | None
    coalesce_ms: int
    max_events_per_minute: int


class WatcherInfo(pydantic.BaseModel):
    """One watcher."""

    watcher_id: str
    description: str | None
    command: str
    state: State
    started: str | None
    ended: str | None
    exit_code: int | None
    events: int = pydantic.Field(description="events so far (the watcher's end included)")
    options: WatcherOptions
    log_ref: str | None = pydantic.Field(description="its log (stdout and stderr): read_archive")


class WatcherList(pydantic.BaseModel):
    """monitor_list."""

    watchers: list[WatcherInfo]


class WatcherStopped(pydantic.BaseModel):
    """monitor_stop."""

    message: str
    watcher_id: str
    state: State
    exit_code: int | None


class Event(pydantic.BaseModel):
    """One event: the lines that arrived together (or the watcher's end)."""

    seq: int
    text: str
    lines: list[str]
    suppressed: int = pydantic.Field(description="lines the rate limit dropped just before this event")
    final: bool = pydantic.Field(description="the watcher's own end")
    at: str | None


class Events(pydantic.BaseModel):
    """monitor_events."""

    watcher_id: str
    events: list[Event]
    next_after: int
    state: State
    exit_code: int | None


class Waited(pydantic.BaseModel):
    """monitor_wait."""

    watcher_id: str
    reason: Literal["exit", "pattern", "timeout"]
    line: str | None
    next_after: int
    exited: bool
    exit_code: int | None
    state: State
    waited_ms: int
    pattern: str | None = None


def _info_text(info: WatcherData) -> str:
    label = f' "{info["description"]}"' if info.get("description") else ""
    code = "" if info["exit_code"] is None else f" exit {info['exit_code']}"
    return f"{info['watcher_id']}{label}  {info['state']}{code}  {info['events']} events  started {info['started']}"


class _Monitor:
    """The handlers, over the process manager that runs the watchers."""

    def __init__(self, manager: ProcessManager) -> None:
        self.manager = manager

    async def start(self, args: MonitorStartArgs, ctx: ToolContext) -> ToolResult:
        # The gate (command policy, rm shim, share check) may read files a command wrote: off the loop.
        spec = await anyio.to_thread.run_sync(
            lambda: self.manager.run_spec(args.command, args.cwd, ctx, completion_mode="detached")
        )
        options = args.model_dump(exclude={"command", "cwd"})
        with anyio.CancelScope(shield=True):  # once started, it runs: say which one
            info = await anyio.to_thread.run_sync(self.manager.start_watcher, spec, options)
        wid = info["watcher_id"]
        text = (
            f"Started watcher {wid}. Its stdout lines come to you as events, each once: at the end of your next "
            f'result, or with monitor_events({{watcher_id: "{wid}", after: 0, wait_ms: 30000}}); stop it with '
            f'monitor_stop({{watcher_id: "{wid}"}}). It stops by itself after {args.timeout_seconds} s.'
        )
        return ToolResult.from_text(text, info)

    async def list(self, args: MonitorListArgs, ctx: ToolContext) -> ToolResult:
        rows = await anyio.to_thread.run_sync(self.manager.list_watchers, ctx.session_id)
        text = "\n".join(_info_text(r) for r in rows) if rows else "No watchers in this session."
        return ToolResult.from_text(text, {"watchers": rows})

    async def stop(self, args: MonitorIdArgs, ctx: ToolContext) -> ToolResult:
        await anyio.to_thread.run_sync(self.manager.watcher, ctx.session_id, args.watcher_id)
        data = await self.manager.stop(ctx.session_id, args.watcher_id)
        message = (
            str(data["message"])
            .replace("Process", "Watcher", 1)
            .replace("every process it started", "its tree")
        )
        return ToolResult.from_text(
            message,
            {
                "message": message,
                "watcher_id": args.watcher_id,
                "state": data["state"],
                "exit_code": data["exit_code"],
            },
        )

    async def events(self, args: MonitorEventsArgs, ctx: ToolContext) -> ToolResult:
        data = await self.manager.events(
            ctx.session_id, args.watcher_id, args.after, args.limit, args.wait_ms
        )
        lines = [f"#{e['seq']} {e['text']}" for e in data["events"]]
        if not lines:
            lines.append(f"[no new events; {data['state']}; next after {data['next_after']}]")
        else:
            lines.append(f"[next after {data['next_after']}; {data['state']}]")
        return ToolResult.from_text("\n".join(lines), data)

    async def wait(self, args: MonitorWaitArgs, ctx: ToolContext) -> ToolResult:
        await anyio.to_thread.run_sync(self.manager.watcher, ctx.session_id, args.watcher_id)
        until = args.until if isinstance(args.until, str) else {"pattern": args.until.pattern}
        data = await self.manager.wait(ctx.session_id, args.watcher_id, until, args.timeout_ms, args.after)
        text = wait_text(data)
        result = {
            "watcher_id": args.watcher_id,
            **{k: data[k] for k in ("reason", "line", "exited", "exit_code", "state", "waited_ms")},
            "next_after": data["next_offset"],
            "pattern": data.get("pattern"),
        }
        return ToolResult.from_text(text, result)


GUIDANCE = """\
### monitor
- Waiting on something outside (CI status, a deploy, a log, an API)? Start a watcher instead of polling \
with bash: `await tools.monitor_start({command: "while sleep 30; do gh pr checks 12 | grep -E 'fail|pass'; \
done", description: "CI of PR 12", max_events: 5})`. Its script does the polling, filtering and retries; \
every complete stdout line is an event (stderr only goes to its log); its own exit is an event too.
- Events come to you once each: at the end of your next result, or read them with \
`monitor_events({watcher_id, after: next_after, wait_ms})`; `monitor_wait({watcher_id, until: {pattern: \
"deployed|failed"}, timeout_ms})` resolves on a matching line or the watcher's end.
- Limits: timeout_seconds (default 1800, at most 86400), max_events, idle_timeout_seconds; a line after a \
quiet spell is an event at once, lines within coalesce_ms (200) of an event go together in the next; past \
max_events_per_minute (30) lines are suppressed and counted. `monitor_list()`, `monitor_stop({watcher_id})`."""


def monitor_extension(manager: ProcessManager) -> Extension:
    """The ``monitor`` extension: its tools over ``manager`` and its guidance."""
    monitor = _Monitor(manager)
    tools: list[Tool] = [
        make_tool(
            monitor.start,
            name="monitor_start",
            title="Monitor: start a watcher",
            description=(
                "Monitor: start a watcher (a command whose stdout lines become events for you, delivered once "
                "each) to observe CI, a deploy, a log or an API instead of polling."
            ),
            input_model=MonitorStartArgs,
            result_model=WatcherInfo,
            destructive=False,
            derive_now=False,
        ),
        make_tool(
            monitor.list,
            name="monitor_list",
            title="Monitor: list watchers",
            description="Monitor: this session's watchers, their state and event counts.",
            input_model=MonitorListArgs,
            result_model=WatcherList,
            read_only=True,
            derive_now=False,
        ),
        make_tool(
            monitor.stop,
            name="monitor_stop",
            title="Monitor: stop a watcher",
            description="Monitor: stop a watcher and its whole process tree.",
            input_model=MonitorIdArgs,
            result_model=WatcherStopped,
            destructive=True,
            derive_now=False,
        ),
        make_tool(
            monitor.events,
            name="monitor_events",
            title="Monitor: read events",
            description="Monitor: a watcher's events after a cursor (after), waiting up to wait_ms for one.",
            input_model=MonitorEventsArgs,
            result_model=Events,
            read_only=True,
            derive_now=False,
        ),
        make_tool(
            monitor.wait,
            name="monitor_wait",
            title="Monitor: wait for an event",
            description="Monitor: wait until a watcher's event line matches a pattern, or it ends, or a timeout.",
            input_model=MonitorWaitArgs,
            result_model=Waited,
            read_only=True,
            derive_now=False,
        ),
    ]
    return Extension(name="monitor", tools=tools, guidance=GUIDANCE)
