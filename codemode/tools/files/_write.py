"""write_file: a whole file, written atomically."""

from __future__ import annotations

import stat
from pathlib import Path

from codemode.errors import ErrorCode, ToolError
from codemode.sandbox import Walk, locate_writable
from codemode.tools._model import ToolContext, ToolResult
from codemode.tools.files import _limits as limits
from codemode.tools.files._diff import diff_for_text, unified_diff
from codemode.tools.files._located import _atomic_write, read_all, refuse_unreadable_kind
from codemode.tools.files._messages import display, fmt_bytes
from codemode.tools.files._models import WriteFileArgs
from codemode.tools.files._text import encode

WRITE_DESCRIPTION = (
    "Write a whole file (UTF-8, exactly `content`), creating missing parent directories. "
    "`create_only: true` fails if the file exists. Replacing an existing file larger than "
    f"{limits.OVERWRITE_THRESHOLD // 1024} KiB needs `overwrite: true`; for small changes use edit_file. "
    "Atomic; keeps the file mode. Returns a unified diff."
)


def write_file(args: WriteFileArgs, ctx: ToolContext) -> ToolResult:
    """Write a whole file."""
    if args.path.endswith("/"):
        raise ToolError(
            f"path {args.path!r} ends with '/', so it names a directory; give the file's path.",
            {"path": args.path},
            code=ErrorCode.NOT_A_FILE,
        )
    with locate_writable(ctx.policy, ctx.workspace, args.path) as found:
        return _write(args, ctx, found)


def _write(args: WriteFileArgs, ctx: ToolContext, found: Walk) -> ToolResult:
    real = Path(found.path)
    shown = display(ctx, real)
    payload = encode(args.content, "utf-8", shown, "content")
    st = found.st
    before = ""
    old_bytes = 0
    binary_before = False
    if st is not None:
        if stat.S_ISDIR(st.st_mode):
            raise ToolError(
                f"{shown} is a directory; give a file path.",
                {"path": str(real), "kind": "directory"},
                code=ErrorCode.NOT_A_FILE,
            )
        refuse_unreadable_kind(found, st, shown)
        old_bytes = st.st_size
        if args.create_only:
            raise ToolError(
                f"{shown} already exists ({fmt_bytes(st.st_size)}) and create_only is set; nothing was "
                "written. Use edit_file to change it, or drop create_only to replace it.",
                {"path": str(real), "exists": True, "bytes": st.st_size},
                code=ErrorCode.ALREADY_EXISTS,
            )
        if st.st_size > limits.OVERWRITE_THRESHOLD and not args.overwrite:
            raise ToolError(
                f"{shown} exists and is {fmt_bytes(st.st_size)}, over {limits.OVERWRITE_THRESHOLD // 1024} KiB; "
                "replacing it needs overwrite: true. For small changes use edit_file instead.",
                {
                    "path": str(real),
                    "exists": True,
                    "bytes": st.st_size,
                    "threshold": limits.OVERWRITE_THRESHOLD,
                },
                code=ErrorCode.OVERWRITE_REQUIRED,
            )
        if st.st_size <= limits.EDIT_MAX_BYTES:
            old_data = read_all(found, shown, limits.EDIT_MAX_BYTES)
            binary_before = b"\x00" in old_data[: limits.SNIFF_BYTES]
            before = old_data.decode("utf-8", errors="replace")
    _atomic_write(found, payload, shown, st)
    created = st is None
    lines = args.content.count("\n") + (1 if args.content and not args.content.endswith("\n") else 0)
    if binary_before:
        diff = f"[binary file {shown} replaced by text]\n"
    elif st is not None and st.st_size > limits.EDIT_MAX_BYTES:
        diff = f"[previous content ({fmt_bytes(st.st_size)}) too large to diff]\n"
    else:
        diff = unified_diff(before, args.content, shown, created=created)
    if created:
        summary = f"Created {shown}: {len(payload):,} bytes, {lines} lines."
    elif before == args.content:
        summary = f"Wrote {shown}: content unchanged ({len(payload):,} bytes)."
    else:
        summary = f"Replaced {shown}: {old_bytes:,} -> {len(payload):,} bytes, {lines} lines."
    text = f"{summary}\n{diff_for_text(diff)}" if diff else summary
    return ToolResult.from_text(
        text, {"path": str(real), "created": created, "bytes": len(payload), "lines": lines, "diff": diff}
    )
