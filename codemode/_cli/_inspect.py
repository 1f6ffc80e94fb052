"""What the state directory holds: ``archive read``, the background processes (``ps``,
``logs``, ``stop``), ``session close`` and the workspace's ``trash``."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence

import anyio

from codemode._cli._common import (
    Subparsers,
    common,
    count,
    emit,
    stderr_note,
    with_host,
)
from codemode._results import default_state_dir
from codemode.errors import ErrorCode, ToolError
from codemode.host import Host
from codemode.policy import Trash

# Commands in `codemode ps` are cut to this many characters (`ps --json` shows them whole).
_PS_COMMAND_CHARS = 200


_LIVE_STATES = ("starting", "running")


def add_archive(sub: Subparsers) -> None:
    archive = sub.add_parser("archive", help="read archived text")
    archive_sub = archive.add_subparsers(dest="archive_command", required=True)
    read = archive_sub.add_parser("read", help="print bytes of an archived text")
    read.add_argument("ref")
    read.add_argument("--offset", type=count(0), default=0, help="first byte (default 0)")
    read.add_argument("--limit", type=count(1), default=None, help="bytes to print (default: to the end)")
    common(read, "print {ref, offset, next_offset, total_bytes, eof, text, dropped} as JSON")


def add_ps(sub: Subparsers) -> None:
    ps = sub.add_parser("ps", help="list background processes")
    ps.add_argument("--all", action="store_true", help="every session's processes")
    common(ps, "print the processes as a JSON array")


def add_logs(sub: Subparsers) -> None:
    logs = sub.add_parser("logs", help="print a background process's output")
    logs.add_argument("process_id", help="a process id, or mcp:SERVER for an MCP server's log")
    logs.add_argument("--follow", "-f", action="store_true", help="keep printing until it exits")
    common(logs, "print one JSON object with the output, state and exit code (with -f: once it exits)")


def add_stop(sub: Subparsers) -> None:
    stop = sub.add_parser("stop", help="stop a background process and its whole tree")
    stop.add_argument("process_id")
    common(stop)


def add_session(sub: Subparsers) -> None:
    session = sub.add_parser("session", help="session control")
    session_sub = session.add_subparsers(dest="session_command", required=True)
    close = session_sub.add_parser("close", help="stop a session's lifecycle=session processes")
    close.add_argument("session_id")
    common(close, "print {session_id, stopped, still_running} as JSON")


def add_trash(sub: Subparsers) -> None:
    trash = sub.add_parser("trash", help="what protected deletes (rm in the workspace) moved aside")
    trash_sub = trash.add_subparsers(dest="trash_command", required=True)
    common(trash_sub.add_parser("list", help="list the workspace's trash"), "print the entries as JSON")
    restore = trash_sub.add_parser("restore", help="put an entry back where it was")
    restore.add_argument("entry_id")
    common(restore, "print the restored entry as JSON")
    common(
        trash_sub.add_parser("empty", help="delete the workspace's trash for good"), "print {removed} as JSON"
    )


def _dropped_note(ref: str, start: int, end: int, retained_from: int) -> str:
    why = (
        "older output was compacted away"
        if end <= retained_from
        else "dropped when the log outgrew its cap, which keeps its head and its tail"
    )
    return f"[bytes {start}-{end} of {ref} are not kept ({why}); skipped to byte {end}]"


def cmd_archive_read(args: argparse.Namespace) -> int:
    async def body(host: Host) -> int:
        offset = args.offset
        remaining = args.limit
        out = sys.stdout.buffer
        data: list[bytes] = []
        dropped: list[list[int]] = []
        while remaining is None or remaining > 0:
            chunk = 1 << 20 if remaining is None else min(1 << 20, remaining)
            page = host.archive.read(args.ref, offset, chunk)
            if page.dropped is not None:
                start, end = page.dropped
                dropped.append([start, end])
                if not args.json:  # in the byte stream's place, so head and tail are never spliced
                    out.flush()
                    stderr_note(_dropped_note(args.ref, start, end, page.retained_from))
            if args.json:
                data.append(page.data)
            else:
                out.write(page.data)
            offset = page.next_offset
            if remaining is not None:
                remaining -= len(page.data)
            if page.eof or not page.data:
                break
        if args.json:
            whole = {
                "ref": args.ref,
                "offset": args.offset,
                "next_offset": page.next_offset,
                "total_bytes": page.total_bytes,
                "eof": page.eof,
                "text": b"".join(data).decode("utf-8", errors="replace"),
                "dropped": dropped,
            }
            emit(json.dumps(whole, indent=2, ensure_ascii=False))
        out.flush()
        return 0

    return anyio.run(with_host, args, body)


def _owner(host: Host, process_id: str) -> str:
    owner = host.processes.owner_of(process_id)
    if owner is None:
        raise ToolError(
            f"no such process {process_id!r}; `codemode ps --all` lists them", code=ErrorCode.TOOL_FAILED
        )
    return owner


def cmd_ps(args: argparse.Namespace) -> int:
    async def body(host: Host) -> int:
        rows = host.processes.list_processes(None if args.all else host.config.session_id, watchers=True)
        redactor = host.archive.redactor
        if args.json:  # JSON escapes every control character; commands are redacted whole
            emit(json.dumps([{**r, "command": redactor.redact(r["command"])} for r in rows], indent=2))
            return 0
        if not rows:
            session = redactor.one_line(host.config.session_id)
            emit("no processes" + ("" if args.all else f" in session {session!r} (try --all)"))
            return 0
        header = ("ID", "SESSION", "STATE", "EXIT", "LOG")
        table = [
            (
                r["process_id"],
                redactor.one_line(r["session_id"], 40),
                r["state"],
                "" if r["exit_code"] is None else str(r["exit_code"]),
                "" if r["log_bytes"] is None else str(r["log_bytes"]),
                redactor.one_line(r["command"], _PS_COMMAND_CHARS),
            )
            for r in rows
        ]
        # Every column as wide as its widest value; EXIT and LOG are numbers, aligned right.
        widths = [max(len(header[i]), *(len(row[i]) for row in table)) for i in range(len(header))]

        def line(cells: Sequence[str]) -> str:
            ident, session, state, exit_code, size, command = cells
            return (
                f"{ident:<{widths[0]}}  {session:<{widths[1]}}  {state:<{widths[2]}}  "
                f"{exit_code:>{widths[3]}}  {size:>{widths[4]}}  {command}"
            )

        emit(line((*header, "COMMAND")))
        for row in table:
            emit(line(row))
        return 0

    return anyio.run(with_host, args, body)


def cmd_logs(args: argparse.Namespace) -> int:
    async def body(host: Host) -> int:
        if args.process_id.startswith("mcp:"):  # an MCP server's log (its stderr), redacted
            emit(host.mcp_server_log(args.process_id[len("mcp:") :]))
            return 0
        owner = _owner(host, args.process_id)
        offset = 0
        output: list[str] = []
        notes: list[str] = []
        while True:
            page = await host.processes.read(
                owner, args.process_id, offset, 1 << 20, 1000 if args.follow else None
            )
            note = page.get("note")
            if note:  # bytes the capped log no longer keeps: said where they were, never spliced
                notes.append(note)
                if not args.json:
                    stderr_note(f"[{note}]")
            if args.json:
                output.append(page["output"])
            else:
                sys.stdout.write(page["output"])
                sys.stdout.flush()
            offset = page["next_offset"]
            if page["eof"] and (page["exited"] or not args.follow):
                break
        if args.json:
            whole = {
                "session_id": owner,
                **{
                    k: page[k]
                    for k in ("process_id", "state", "exited", "exit_code", "total_bytes", "next_offset")
                },
                "output": "".join(output),
                "notes": notes,
            }
            emit(json.dumps(whole, indent=2, ensure_ascii=False))
        return 0

    return anyio.run(with_host, args, body)


def cmd_stop(args: argparse.Namespace) -> int:
    async def body(host: Host) -> int:
        result = await host.processes.stop(_owner(host, args.process_id), args.process_id)
        emit(json.dumps(result, indent=2) if args.json else str(result.get("message", result)))
        return 0

    return anyio.run(with_host, args, body)


def cmd_session_close(args: argparse.Namespace) -> int:
    async def body(host: Host) -> int:
        session = args.session_id
        if not host.session_exists(session):
            raise ToolError(
                f"no session {session!r} in {host.archive.state_dir}: nothing is recorded under that id "
                "(no program run, store value, archived text or background process); "
                "`codemode ps --all` shows the sessions of background processes",
                code=ErrorCode.TOOL_FAILED,
            )

        def live() -> list[str]:
            return [
                r["process_id"]
                for r in host.processes.list_processes(session)
                if r["lifecycle"] == "session" and r["state"] in _LIVE_STATES
            ]

        before = live()
        await host.close_session(session)
        still_running = live()
        stopped = [p for p in before if p not in still_running]
        if args.json:
            emit(
                json.dumps(
                    {"session_id": session, "stopped": stopped, "still_running": still_running}, indent=2
                )
            )
        elif stopped:
            emit(f"session {session} closed: stopped {len(stopped)} process(es): {', '.join(stopped)}")
        else:
            emit(f"session {session} closed: it had no running lifecycle=session processes")
        if still_running:
            stderr_note(
                f"could not stop {', '.join(still_running)}; `codemode stop ID` says why, "
                "`codemode ps --all` shows them"
            )
            return 1
        return 0

    return anyio.run(with_host, args, body)


def cmd_trash(args: argparse.Namespace) -> int:
    trash = Trash((args.state_dir or default_state_dir()).expanduser(), args.workspace.expanduser().resolve())
    trash.file_all()
    if args.trash_command == "restore":
        entry = trash.restore(args.entry_id)
        emit(entry.model_dump_json(indent=2) if args.json else f"restored {entry.path} ({entry.kind})")
        return 0
    if args.trash_command == "empty":
        removed = trash.empty()
        emit(json.dumps({"removed": removed}) if args.json else f"deleted {removed} trash entries for good")
        return 0
    entries = trash.entries()
    if args.json:
        emit(json.dumps([e.model_dump() for e in entries], indent=2))
    elif not entries:
        emit(f"the trash of {trash.workspace} is empty")
    else:
        for e in entries:
            when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(e.deleted_at))
            shown = e.path.removeprefix(str(trash.workspace) + "/") + ("/" if e.kind == "directory" else "")
            emit(f"{e.id}  {when}  {e.kind:9}  {shown}")
    return 0
