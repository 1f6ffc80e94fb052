"""INTERFACE STUB — being implemented by the archive helper."""

from __future__ import annotations

from collections.abc import Mapping


class Redactor:
    def __init__(self, environ: Mapping[str, str] | None = None) -> None: ...
    def redact(self, text: str) -> str: ...
