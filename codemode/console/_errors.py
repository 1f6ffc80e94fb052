"""The console's one error: what a request got wrong, as an HTTP status and a message for a person."""

from __future__ import annotations

__all__ = ["ConsoleError"]


class ConsoleError(Exception):
    """A console request refused: ``status`` (400, 401, 403, 404, 409) and what to do about it.
    `codemode.console._app` turns it into ``{"error": message}`` with that status, the one place."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
