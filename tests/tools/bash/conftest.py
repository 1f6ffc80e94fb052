"""Fixtures for the bash tool tests: a real archive in a temp state dir, a manager, a context."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from codemode.sandbox import SandboxMode, SandboxPolicy
from codemode.state import Archive, State
from codemode.tools._model import ToolContext, ToolResult
from codemode.tools.bash import ProcessManager


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def state_dir(tmp_path: Path) -> Path:
    return tmp_path / "state"


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    d = tmp_path / "ws"
    d.mkdir()
    return d


@pytest.fixture
def archive(state_dir: Path) -> Iterator[Archive]:
    a_state = State(state_dir)
    a = a_state.archive
    yield a
    a_state.close()


@pytest.fixture
def policy(workspace: Path, tmp_path: Path, state_dir: Path) -> SandboxPolicy:
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    return SandboxPolicy(
        mode=SandboxMode.WORKSPACE_WRITE,
        writable_roots=(workspace.resolve(),),
        temp_dir=tmp.resolve(),
        protected=(state_dir.resolve(),),
    )


@pytest.fixture
async def manager(archive: Any) -> AsyncIterator[ProcessManager]:
    m = ProcessManager(archive, handoff_seconds=None)
    yield m
    await m.aclose()


class Caller:
    """Calls the bash tool the way the registry does: parse the arguments (a `ToolError` for
    bad ones), call the handler."""

    def __init__(self, manager: ProcessManager, ctx: ToolContext) -> None:
        self.manager = manager
        self.ctx = ctx
        self.tool = manager.extension().tools[0]

    async def __call__(self, **args: Any) -> ToolResult:
        model = self.tool.parse(args)
        result: ToolResult = await self.tool.handler(**self.tool.bind(model, self.ctx))
        return result

    def as_session(self, session_id: str) -> Caller:
        return Caller(
            self.manager, ToolContext(session_id, self.ctx.workspace, self.ctx.policy, self.ctx.archive)
        )


@pytest.fixture
def bash(manager: ProcessManager, workspace: Path, policy: SandboxPolicy, archive: Any) -> Caller:
    return Caller(manager, ToolContext("s1", workspace, policy, archive))
