"""The three file tools as registry entries."""

from __future__ import annotations

from codemode.tools._model import Tool, make_tool
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
            edit_file,
            name="edit_file",
            title="Edit file",
            description=EDIT_DESCRIPTION,
            input_model=EditFileArgs,
            result_model=EditFileResult,
            destructive=True,
            derive_now=False,
        ),
        make_tool(
            write_file,
            name="write_file",
            title="Write file",
            description=WRITE_DESCRIPTION,
            input_model=WriteFileArgs,
            result_model=WriteFileResult,
            destructive=True,
            derive_now=False,
        ),
    ]
