"""The three file tools as registry entries; the two that write wait for the session's writers."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import anyio.to_thread

from codemode.tools._model import Tool, ToolContext, ToolResult, make_tool
from codemode.tools.files._edit import EDIT_DESCRIPTION, edit_file
from codemode.tools.files._models import (
    EditFileArgs,
    EditFileResult,
    ReadFileArgs,
    ReadFileResult,
    WriteFileArgs,
    WriteFileResult,
)
from codemode.tools.files._read import READ_DESCRIPTION, read_file
from codemode.tools.files._write import WRITE_DESCRIPTION, write_file

_Args = TypeVar("_Args")


async def _in_turn(
    handler: Callable[[_Args, ToolContext], ToolResult], args: _Args, ctx: ToolContext
) -> ToolResult:
    """Run a writing handler (in a worker thread) once the writers before it in the session
    have ended (`ToolContext.writers`), holding the turn until it returns."""
    place = ctx.writers.enter() if ctx.writers is not None else None
    try:
        if place is not None:
            await place.wait()
        return await anyio.to_thread.run_sync(handler, args, ctx)
    finally:
        if place is not None:
            place.leave()


async def _edit_file(args: EditFileArgs, ctx: ToolContext) -> ToolResult:
    return await _in_turn(edit_file, args, ctx)


async def _write_file(args: WriteFileArgs, ctx: ToolContext) -> ToolResult:
    return await _in_turn(write_file, args, ctx)


def file_tools() -> list[Tool]:
    """The three file tools: read_file, edit_file, write_file."""
    return [
        make_tool(
            read_file,
            name="read_file",
            title="Read file",
            description=READ_DESCRIPTION,
            input_model=ReadFileArgs,
            result_model=ReadFileResult,
            read_only=True,
            derive_now=False,
        ),
        make_tool(
            _edit_file,
            name="edit_file",
            title="Edit file",
            description=EDIT_DESCRIPTION,
            input_model=EditFileArgs,
            result_model=EditFileResult,
            destructive=True,
            derive_now=False,
        ),
        make_tool(
            _write_file,
            name="write_file",
            title="Write file",
            description=WRITE_DESCRIPTION,
            input_model=WriteFileArgs,
            result_model=WriteFileResult,
            destructive=True,
            derive_now=False,
        ),
    ]
