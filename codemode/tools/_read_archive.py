"""The ``read_archive`` tool: read archived text (cut output, command logs) page by page."""

from __future__ import annotations

import base64
from typing import Literal

import pydantic

from codemode.budget import READ_LIMIT
from codemode.tools._model import Tool, ToolContext, ToolResult, make_tool

__all__ = ["MAX_LIMIT", "ByteRange", "ReadArchiveArgs", "ReadArchiveResult", "read_archive_tool"]

MAX_LIMIT = 1024 * 1024
DEFAULT_LIMIT = READ_LIMIT  # what the budget's recovery line tells the model to pass


class ReadArchiveArgs(pydantic.BaseModel):
    """Arguments of read_archive."""

    model_config = pydantic.ConfigDict(extra="forbid")

    ref: str = pydantic.Field(
        description='Archive reference, e.g. "ar_..." from a truncation notice or a bash log field.'
    )
    offset: int = pydantic.Field(
        default=0, ge=0, description="Byte offset to start at (the next_offset of the previous page)."
    )
    limit: int = pydantic.Field(
        default=DEFAULT_LIMIT, ge=1, le=MAX_LIMIT, description="Most bytes to return (1 to 1048576)."
    )


class ByteRange(pydantic.BaseModel):
    """Bytes ``from`` (inclusive) to ``to`` (exclusive)."""

    model_config = pydantic.ConfigDict(populate_by_name=True)

    from_: int = pydantic.Field(alias="from")
    to: int


class ReadArchiveResult(pydantic.BaseModel):
    """One page of archived text."""

    ref: str
    offset: int = pydantic.Field(description="Where this page starts.")
    next_offset: int = pydantic.Field(description="Pass as offset to read on.")
    total_bytes: int
    eof: bool = pydantic.Field(description="true when nothing is left after this page.")
    retained_from: int = pydantic.Field(description="Bytes before this offset were compacted away.")
    dropped: ByteRange | None = pydantic.Field(description="Bytes of the log that were not kept, if any.")
    text: str
    encoding: Literal["utf-8", "base64"] = pydantic.Field(description="base64 for binary data.")


def _decode(data: bytes, at_end: bool) -> tuple[str, int, str]:
    """Decode a page: (text, bytes used, encoding). A split last character is left for the next page."""
    try:
        return data.decode("utf-8"), len(data), "utf-8"
    except UnicodeDecodeError as exc:
        if not at_end and exc.reason == "unexpected end of data" and exc.start >= len(data) - 3:
            try:
                return data[: exc.start].decode("utf-8"), exc.start, "utf-8"
            except UnicodeDecodeError:
                pass
    return base64.b64encode(data).decode("ascii"), len(data), "base64"


def read_archive(args: ReadArchiveArgs, ctx: ToolContext) -> ToolResult:
    """Read archived text by byte offset: the rest of a cut output or a command's full log.

    Returns the page's text and the next_offset to pass to read on; concatenating the pages
    gives back the archived text exactly. Binary data comes back base64-encoded. Bytes a log
    no longer keeps (compacted, or the middle of a log that outgrew its cap) are skipped, and
    the page says which. Only the calling session's archive is readable: another session's
    reference is unknown here.

    Raises:
        UnknownRefError: No such reference in this session.
        ToolError: The offset is past the end.
    """
    page = ctx.archive.read(args.ref, args.offset, args.limit, session_id=ctx.session_id)
    data = page.data
    exact = len(data) == page.next_offset - page.offset  # False for the redacted view of a raw log
    text, used, encoding = _decode(data, at_end=page.eof or not exact)
    if used == 0 and data and not page.eof:
        # The limit is smaller than one character: return that whole character.
        page = ctx.archive.read(args.ref, page.offset, 4, session_id=ctx.session_id)
        text, used, encoding = _decode(page.data, at_end=page.eof)
    next_offset = page.offset + used if exact else page.next_offset
    eof = next_offset >= page.total_bytes
    structured = {
        "ref": page.ref,
        "offset": page.offset,
        "next_offset": next_offset,
        "total_bytes": page.total_bytes,
        "eof": eof,
        "retained_from": page.retained_from,
        "dropped": None if page.dropped is None else {"from": page.dropped[0], "to": page.dropped[1]},
        "text": text,
        "encoding": encoding,
    }
    lines = []
    if page.dropped is not None and page.dropped[1] == page.retained_from:
        lines.append(
            f"[bytes before offset {page.retained_from:,} were compacted away; showing from {page.offset:,}]"
        )
    elif page.dropped is not None:
        start, end = page.dropped
        lines.append(
            f"[bytes {start:,} to {end:,} of this log were not kept (it outgrew its cap, which keeps "
            f"its head and its tail); showing from {end:,}]"
        )
    lines.append(text if encoding == "utf-8" else f"[binary data, base64-encoded]\n{text}")
    if not eof:
        lines.append(
            f'[{page.total_bytes - next_offset:,} more bytes: read_archive({{ref: "{page.ref}", '
            f"offset: {next_offset}, limit: {args.limit}}}) reads on]"
        )
    joined = "\n".join(lines)
    return ToolResult.from_text(joined, structured)


def read_archive_tool() -> Tool:
    """The ``read_archive`` tool (its handler takes a `ToolContext` for the archive)."""
    return make_tool(
        read_archive, name="read_archive", result_model=ReadArchiveResult, read_only=True, derive_now=False
    )
