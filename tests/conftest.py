"""Shared fixtures: an offline tiktoken cache, the asyncio backend, and Hosts with test tools."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

_SHARED_CACHE = Path(__file__).resolve().parent.parent.parent / "shared" / "tiktoken-cache"
if "TIKTOKEN_CACHE_DIR" not in os.environ and _SHARED_CACHE.is_dir():
    # Tests run offline; CI points tiktoken at ../shared/tiktoken-cache as well.
    os.environ["TIKTOKEN_CACHE_DIR"] = str(_SHARED_CACHE)

from host_support import MakeHost, Probe, add_test_tools  # noqa: E402 - after the cache dir is set

from codemode import Host  # noqa: E402


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def make_host(tmp_path: Path) -> MakeHost:
    """`async with make_host(**HostConfig fields) as (host, probe):` a Host with the test tools."""
    counter = 0

    @asynccontextmanager
    async def make(**options: Any) -> AsyncIterator[tuple[Host, Probe]]:
        nonlocal counter
        counter += 1
        workspace = tmp_path / f"ws{counter}"
        workspace.mkdir()
        options.setdefault("state_dir", tmp_path / f"state{counter}")
        async with Host(workspace=workspace, **options) as host:
            probe = Probe()
            add_test_tools(host, probe)
            yield host, probe

    return make


@pytest.fixture
async def host_probe(make_host: MakeHost) -> AsyncIterator[tuple[Host, Probe]]:
    """A Host with default limits and the test tools."""
    async with make_host() as pair:
        yield pair


@pytest.fixture
def host(host_probe: tuple[Host, Probe]) -> Host:
    return host_probe[0]


@pytest.fixture
def probe(host_probe: tuple[Host, Probe]) -> Probe:
    return host_probe[1]


@pytest.fixture(params=["openat2", "openat"])
def resolver(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Run a test with openat2 (where the kernel has it) and with the O_NOFOLLOW openat walk
    (the file tools' two ways of resolving a path; modules opt in with usefixtures)."""
    from codemode.sandbox import _fs

    if request.param == "openat":
        monkeypatch.setattr(_fs, "USE_OPENAT2", False)
        assert not _fs.openat2_available()
    elif not _fs.openat2_available():
        pytest.skip("this kernel has no openat2")
    yield request.param
