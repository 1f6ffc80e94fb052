"""Fixtures for the bash tool tests: a real archive in a temp state dir, a manager, a context."""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from codemode.archive import Archive, ArchivePage, ArchiveRef
from codemode.sandbox import SandboxMode, SandboxPolicy
from codemode.tools._bash import ProcessManager
from codemode.tools._model import ToolContext, ToolResult


class _StandInLog:
    def __init__(self, path: Path, ref: str) -> None:
        self.path = path
        self.ref = ref
        self._f = open(path, "wb")
        self._h = hashlib.sha256()
        self._n = 0

    def write(self, data: bytes) -> None:
        self._f.write(data)
        self._f.flush()
        self._h.update(data)
        self._n += len(data)

    def close(self) -> ArchiveRef:
        self._f.close()
        return ArchiveRef(self.ref, self._n, self._h.hexdigest())


class _StandInArchive:
    """Used only until codemode.archive lands its implementation."""

    def __init__(self, state_dir: Path) -> None:
        self._dir = state_dir
        state_dir.mkdir(parents=True, exist_ok=True)

    @property
    def state_dir(self) -> Path:
        return self._dir

    @property
    def db_path(self) -> Path:
        return self._dir / "codemode.db"

    def open_log(self, *, kind: str, session_id: str | None = None, redact: bool = True) -> _StandInLog:
        ref = "a_" + secrets.token_hex(6)
        return _StandInLog(self._dir / ref, ref)

    def read(self, ref: str, offset: int = 0, limit: int = 65536) -> ArchivePage:
        data = (self._dir / ref).read_bytes()
        chunk = data[offset : offset + limit]
        return ArchivePage(
            ref, offset, chunk, offset + len(chunk), len(data), offset + len(chunk) >= len(data)
        )

    def close(self) -> None:
        pass


def make_archive(state_dir: Path) -> Any:
    archive = Archive(state_dir)
    if getattr(archive, "state_dir", None) is None:  # the interface stub
        return _StandInArchive(state_dir)
    return archive


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def state_dir(tmp_path: Path) -> Path:
    d = tmp_path / "state"
    d.mkdir(mode=0o700)
    return d


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    d = tmp_path / "ws"
    d.mkdir()
    return d


@pytest.fixture
def archive(state_dir: Path) -> Iterator[Any]:
    a = make_archive(state_dir)
    yield a
    a.close()


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
    """Calls the bash tool the way the registry does: validate, build the model, call."""

    def __init__(self, manager: ProcessManager, ctx: ToolContext) -> None:
        self.manager = manager
        self.ctx = ctx
        self.tool = manager.extension().tools[0]

    async def __call__(self, **args: Any) -> ToolResult:
        errors = sorted(self.tool.validator.iter_errors(args), key=str)
        if errors:
            raise ValueError(errors[0].message)
        model = self.tool.input_model.model_validate(args)
        result: ToolResult = await self.tool.handler(**self.tool.bind(model, self.ctx))
        return result

    def as_session(self, session_id: str) -> Caller:
        return Caller(
            self.manager, ToolContext(session_id, self.ctx.workspace, self.ctx.policy, self.ctx.archive)
        )


@pytest.fixture
def bash(manager: ProcessManager, workspace: Path, policy: SandboxPolicy, archive: Any) -> Caller:
    return Caller(manager, ToolContext("s1", workspace, policy, archive))
