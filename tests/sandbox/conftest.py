"""Shared fixtures for the sandbox enforcement tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from codemode.sandbox import landlock_status
from tests.sandbox.sandbox_support import Dirs


def _clear_status_cache() -> None:
    landlock_status.cache_clear()  # type: ignore[attr-defined]


@pytest.fixture(autouse=True)
def _fresh_landlock_status() -> Iterator[None]:
    """Each test sees the environment it sets up (simulation switches), not a stale probe."""
    _clear_status_cache()
    yield
    _clear_status_cache()


@pytest.fixture
def dirs(tmp_path: Path) -> Dirs:
    made = Dirs(ws=tmp_path / "ws", tmp=tmp_path / "tmp", state=tmp_path / "state", out=tmp_path / "out")
    for path in (made.ws, made.tmp, made.state, made.out):
        path.mkdir()
    (made.out / "existing").write_text("outside\n")
    (made.out / "emptydir").mkdir()
    (made.ws / "existing").write_text("inside\n")
    (made.ws / "emptydir").mkdir()
    (made.state / "db").write_text("state\n")
    return made
