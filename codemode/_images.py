"""What an image a program shows (``image(data, mimeType)``) costs in tokens.

The cost follows Anthropic's formula, ``width * height / 750`` tokens, at most 1,600 (a larger
image is scaled down to about 1.15 megapixels before the model sees it); the size is read from
a PNG's or a GIF's header. A JPEG or WebP (no fixed header place) costs the most, 1,600.

An image a tool returned is archived and the program gets a descriptor ``{type: "image",
mimeType, bytes, ref}`` (`codemode.tools.upstream`); `archived_image` reads one back by its
ref (the session's own) for ``image(descriptor)`` and for a direct call's image content.
"""

from __future__ import annotations

import base64
import math
from typing import TYPE_CHECKING, Any

from codemode.errors import ErrorCode, ToolError

if TYPE_CHECKING:
    from codemode.state import Archive

__all__ = [
    "IMAGE_MAX_BYTES",
    "IMAGE_MAX_COUNT",
    "IMAGE_MAX_TOKENS",
    "archived_image",
    "image_descriptors",
    "image_size",
    "image_tokens",
    "is_image",
]

IMAGE_MAX_TOKENS = 1600
IMAGE_MAX_BYTES = 5 * 1024 * 1024
"""The most one image may hold, decoded (as prelude.js's IMAGE_MAX_BYTES)."""
IMAGE_MAX_COUNT = 8
"""The most images one result shows (as prelude.js's IMAGE_MAX_COUNT)."""

# The mime types shown and the magic bytes each starts with (offset, bytes), as prelude.js's
# IMAGE_MAGIC: a model API refuses a whole request whose image is not what it says.
_MAGIC: dict[str, tuple[tuple[int, bytes], ...]] = {
    "image/png": ((0, b"\x89PNG\r\n\x1a\n"),),
    "image/jpeg": ((0, b"\xff\xd8\xff"),),
    "image/gif": ((0, b"GIF8"),),
    "image/webp": ((0, b"RIFF"), (8, b"WEBP")),
}


def is_image(mime_type: str, data: bytes) -> bool:
    """Whether ``data`` is an image of a shown type, its magic bytes those of ``mime_type``."""
    magic = _MAGIC.get(mime_type)
    return magic is not None and all(data[at : at + len(b)] == b for at, b in magic)


def image_descriptors(data: Any) -> list[tuple[str, str]]:
    """(mime type, ref) of each image descriptor in a tool's data: the list of content blocks
    an upstream tool's result resolves with when it holds an image."""
    if not isinstance(data, list):
        return []
    return [
        (block["mimeType"], block["ref"])
        for block in data
        if isinstance(block, dict)
        and block.get("type") == "image"
        and isinstance(block.get("mimeType"), str)
        and isinstance(block.get("ref"), str)
    ]


def archived_image(archive: Archive, ref: str, session_id: str) -> str:
    """The base64 of an archived image of ``session_id`` (another session's ref is unknown).

    Raises:
        UnknownRefError: No such entry of this session.
        ToolError: It is over `IMAGE_MAX_BYTES` (code ``too_large``).
    """
    page = archive.read(ref, 0, IMAGE_MAX_BYTES + 1, session_id=session_id)
    if page.total_bytes > IMAGE_MAX_BYTES:
        raise ToolError(
            f"image: {ref} holds {page.total_bytes} bytes, over the {IMAGE_MAX_BYTES} bytes (5 MiB) cap "
            "of one image; it cannot be shown",
            {"ref": ref, "bytes": page.total_bytes, "limit": IMAGE_MAX_BYTES},
            code=ErrorCode.TOO_LARGE,
        )
    return base64.b64encode(page.data).decode("ascii")


def image_size(mime_type: str, data_b64: str) -> tuple[int, int] | None:
    """(width, height) from the image's header, when its format keeps them at a fixed place."""
    head = base64.b64decode(data_b64[:48])  # 36 bytes: the PNG IHDR and GIF screen are well within
    if mime_type == "image/png" and len(head) >= 24 and head[12:16] == b"IHDR":
        return int.from_bytes(head[16:20], "big"), int.from_bytes(head[20:24], "big")
    if mime_type == "image/gif" and len(head) >= 10:
        return int.from_bytes(head[6:8], "little"), int.from_bytes(head[8:10], "little")
    return None


def image_tokens(mime_type: str, data_b64: str) -> int:
    """The tokens the image is counted as in a run's budget."""
    size = image_size(mime_type, data_b64)
    if size is None:
        return IMAGE_MAX_TOKENS
    return max(1, min(IMAGE_MAX_TOKENS, math.ceil(size[0] * size[1] / 750)))
