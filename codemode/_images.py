"""What an image a program shows (``image(data, mimeType)``) costs in tokens.

The cost follows Anthropic's formula, ``width * height / 750`` tokens, at most 1,600 (a larger
image is scaled down to about 1.15 megapixels before the model sees it); the size is read from
a PNG's or a GIF's header. A JPEG or WebP (no fixed header place) costs the most, 1,600.
"""

from __future__ import annotations

import base64
import math

__all__ = ["IMAGE_MAX_TOKENS", "image_size", "image_tokens"]

IMAGE_MAX_TOKENS = 1600


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
