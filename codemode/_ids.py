"""The one check for caller-chosen ids (session ids, call ids) where they enter codemode."""

from __future__ import annotations

import unicodedata

from codemode.errors import UserError

__all__ = ["ID_MAX_CHARS", "check_id"]

ID_MAX_CHARS = 256
"""Longest session or call id, in characters."""

# Control characters (C0, DEL, C1), unpaired surrogates, line and paragraph separators: none
# belongs in an id, and each can smuggle a separator into a key, a log line or a terminal.
_REFUSED_CATEGORIES = frozenset({"Cc", "Cs", "Zl", "Zp"})


def check_id(value: object, what: str) -> str:
    """Return ``value`` when it is a usable id, else explain what is wrong with it.

    An id is a string of 1 to 256 characters with no control characters (U+0000-U+001F,
    U+007F-U+009F), line or paragraph separators, or unpaired surrogates.

    Args:
        value: The id as given.
        what: Its name in the message (``"session_id"``, ``"call_id"``).

    Raises:
        UserError: ``value`` is not a string, is empty, is longer than 256 characters, or
            contains a refused character (the message names its position).
    """
    if not isinstance(value, str):
        raise UserError(f"{what} must be a string, got {type(value).__name__}")
    if not value:
        raise UserError(f"{what} must not be empty; pass 1 to {ID_MAX_CHARS} characters, or omit it")
    if len(value) > ID_MAX_CHARS:
        raise UserError(f"{what} is {len(value)} characters long; the limit is {ID_MAX_CHARS}")
    for position, char in enumerate(value):
        if unicodedata.category(char) in _REFUSED_CATEGORIES:
            raise UserError(
                f"{what} contains U+{ord(char):04X} at position {position}; ids may not contain control "
                "characters, line or paragraph separators, or unpaired surrogates"
            )
    return value
