"""Verification metadata, imported from its module; a no-op stand-in until that module lands."""

from __future__ import annotations

from typing import Any

try:
    from codemode.tools._verification import (  # type: ignore[import-not-found,unused-ignore]
        classify_command,
        failure_summary,
        parse_verification,
    )
except ImportError:  # pragma: no cover - only before codemode.tools._verification exists

    def classify_command(command: str) -> Any:  # type: ignore[misc,unused-ignore]
        return None

    def parse_verification(cls: Any, output: str, exit_code: int | None) -> Any:  # type: ignore[misc,unused-ignore]
        return None

    def failure_summary(v: Any) -> str | None:  # type: ignore[misc,unused-ignore]
        return None


__all__ = ["classify_command", "failure_summary", "parse_verification"]
