"""The state suite's backends: each test that takes ``make_state`` runs on the state directory's
SQLite and again with a shared PostgreSQL database (a real cluster, `tests.postgres_support`)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from codemode.state import State

MakeState = Callable[..., State]


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def make_state(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[MakeState]:
    """``make_state(name="state", **options)``: a `State` on ``tmp_path/name``; on backend
    ``postgres`` every one made by a test shares one database, as hosts on several machines do
    (each its own state directory). Closed after the test."""
    url = request.getfixturevalue("database_url") if backend == "postgres" else None
    made: list[State] = []

    def make(name: str = "state", **options: object) -> State:
        state = State(tmp_path / name, database_url=url, **options)  # type: ignore[arg-type]
        made.append(state)
        return state

    yield make
    for state in made:
        state.close()
