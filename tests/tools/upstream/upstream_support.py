"""Helpers for the upstream tests: the SDK-written server of upstream_server.py as an
``mcpServers`` entry, and reading what it recorded."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

SERVER = Path(__file__).resolve().parent / "upstream_server.py"


def stdio_server(marks: Path | None = None, **fields: Any) -> dict[str, Any]:
    """An ``mcpServers`` entry that starts the test server over stdio."""
    env = {"UPSTREAM_SECRET": "s3cr3t-value-xyz", **fields.pop("env", {})}
    if marks is not None:
        env["UPSTREAM_MARKS"] = str(marks)
    return {"command": sys.executable, "args": [str(SERVER), "stdio"], "env": env, **fields}


def read_marks(marks: Path, wanted: str, seconds: float = 20.0) -> list[str]:
    """The marks file's lines once ``wanted`` is among them (polled; fails after ``seconds``)."""
    deadline = time.monotonic() + seconds
    while True:
        lines = marks.read_text().splitlines() if marks.exists() else []
        if wanted in lines:
            return lines
        if time.monotonic() > deadline:
            raise AssertionError(f"the server never recorded {wanted!r}; it recorded {lines}")
        time.sleep(0.02)
