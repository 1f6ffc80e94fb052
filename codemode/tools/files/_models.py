"""The argument and result models of read_file, edit_file and write_file."""

from __future__ import annotations

from typing import Literal

import pydantic

from codemode.tools.files import _limits as limits


class ReadFileArgs(pydantic.BaseModel):
    """Arguments of read_file."""

    model_config = pydantic.ConfigDict(extra="forbid")

    path: str = pydantic.Field(description="File path, absolute or relative to the workspace root.")
    offset: int = pydantic.Field(default=1, ge=1, description="1-based number of the first line to show.")
    limit: int = pydantic.Field(
        default=limits.MAX_LINES,
        ge=1,
        description=f"Maximum number of lines to show (at most {limits.MAX_LINES}).",
    )


class EditFileArgs(pydantic.BaseModel):
    """Arguments of edit_file."""

    model_config = pydantic.ConfigDict(extra="forbid")

    path: str = pydantic.Field(description="File path, absolute or relative to the workspace root.")
    old_text: str = pydantic.Field(description="Exact text to replace, including indentation.")
    new_text: str = pydantic.Field(description="Replacement text.")
    replace_all: bool = pydantic.Field(
        default=False, description="Replace every occurrence instead of requiring exactly one."
    )


class WriteFileArgs(pydantic.BaseModel):
    """Arguments of write_file."""

    model_config = pydantic.ConfigDict(extra="forbid")

    path: str = pydantic.Field(description="File path, absolute or relative to the workspace root.")
    content: str = pydantic.Field(description="The whole new content of the file (written as UTF-8).")
    create_only: bool = pydantic.Field(default=False, description="Fail if the file already exists.")
    overwrite: bool = pydantic.Field(
        default=False,
        description=f"Required to replace an existing file larger than {limits.OVERWRITE_THRESHOLD // 1024} KiB.",
    )


class CutLine(pydantic.BaseModel):
    """A line longer than a page's byte cap, shown cut."""

    line: int = pydantic.Field(description="Its line number.")
    shown_bytes: int = pydantic.Field(description="Bytes of it shown.")
    line_bytes: int = pydantic.Field(description="Its whole length in bytes.")


class ReadFileResult(pydantic.BaseModel):
    """What read_file returns."""

    path: str = pydantic.Field(description="The resolved absolute path.")
    content: str = pydantic.Field(description="The page's raw text (no line numbers).")
    start_line: int
    end_line: int
    total_lines: int | None = pydantic.Field(description="null when the file is too large to count.")
    next_offset: int | None = pydantic.Field(description="The offset of the next page; null at the end.")
    truncated: bool
    encoding: str = pydantic.Field(description='"utf-8", "utf-8-sig" or "latin-1".')
    line_ending: Literal["lf", "crlf", "mixed", "none"]
    bytes: int = pydantic.Field(description="Bytes of the file this page covers.")
    cut_line: CutLine | None = pydantic.Field(default=None, description="Present when a long line was cut.")


class EditFileResult(pydantic.BaseModel):
    """What edit_file returns."""

    path: str
    replacements: int
    diff: str = pydantic.Field(description="Unified diff of the change.")
    bytes_before: int
    bytes_after: int


class WriteFileResult(pydantic.BaseModel):
    """What write_file returns."""

    path: str
    created: bool = pydantic.Field(description="true when the file did not exist before.")
    bytes: int
    lines: int
    diff: str = pydantic.Field(description="Unified diff against the previous content.")
