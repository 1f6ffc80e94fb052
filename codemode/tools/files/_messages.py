"""How the file tools name a path, a size and a file-system error to the model."""

from __future__ import annotations

import errno
import os
from pathlib import Path

from codemode.errors import ErrorCode, ToolError
from codemode.tools._model import ToolContext


def display(ctx: ToolContext, real: Path) -> str:
    """The path as a model reads it best: relative to the workspace when inside it."""
    try:
        workspace = Path(os.path.realpath(ctx.workspace))
        return str(real.relative_to(workspace))
    except ValueError:
        return str(real)


def fmt_bytes(n: int) -> str:
    if n < 1024:
        return f"{n} bytes"
    if n < 1024 * 1024:
        return f"{n / 1024:.1f} KiB ({n:,} bytes)"
    return f"{n / (1024 * 1024):.1f} MiB ({n:,} bytes)"


def os_error(exc: OSError, action: str, path: str) -> ToolError:
    """A clear message for a file-system error the model can act on."""
    code = exc.errno
    if code in (errno.EACCES, errno.EPERM):
        what = "permission denied by the file system (not by codemode's sandbox)"
    elif code == errno.ENOSPC:
        what = "no space left on the device"
    elif code == errno.EROFS:
        what = "the file system is read-only"
    elif code == errno.EFBIG:
        what = "the file is larger than the file system or process allows"
    elif code == errno.ENOTDIR:
        what = "a component of the path is a file, not a directory"
    elif code == errno.ENOENT:
        what = "a directory on the way does not exist (any more: it was removed meanwhile)"
    else:
        what = exc.strerror or str(exc)
    return ToolError(
        f"cannot {action} {path}: {what}.",
        {"path": path, "errno": errno.errorcode.get(code or 0, str(code)), "error": str(exc)},
        code=ErrorCode.OS_ERROR,
    )
