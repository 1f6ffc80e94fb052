"""The file tools: read_file, edit_file, write_file."""

from codemode.tools.files._edit import (
    MAX_LINES,
    MAX_PAGE_BYTES,
    OVERWRITE_THRESHOLD,
    EditFileArgs,
    EditFileResult,
    ReadFileArgs,
    ReadFileResult,
    WriteFileArgs,
    WriteFileResult,
    edit_file,
    file_tools,
    read_file,
    write_file,
)

__all__ = [
    "MAX_LINES",
    "MAX_PAGE_BYTES",
    "OVERWRITE_THRESHOLD",
    "EditFileArgs",
    "EditFileResult",
    "ReadFileArgs",
    "ReadFileResult",
    "WriteFileArgs",
    "WriteFileResult",
    "edit_file",
    "file_tools",
    "read_file",
    "write_file",
]
