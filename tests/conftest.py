"""Shared fixtures: an offline tiktoken cache, the asyncio backend, and Hosts with test tools."""

from __future__ import annotations

import os
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

_SHARED_CACHE = Path(__file__).resolve().parent.parent.parent / "shared" / "tiktoken-cache"
if "TIKTOKEN_CACHE_DIR" not in os.environ and _SHARED_CACHE.is_dir():
    # Tests run offline; CI points tiktoken at ../shared/tiktoken-cache as well.
    os.environ["TIKTOKEN_CACHE_DIR"] = str(_SHARED_CACHE)

from codemode import Host  # noqa: E402
from tests.host_support import MakeHost, Probe, add_test_tools  # noqa: E402 - after the cache dir is set
from tests.postgres_support import Cluster, start_cluster  # noqa: E402
from tests.s3_support import S3Server, start_s3  # noqa: E402


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="session")
def postgres_cluster() -> Iterator[Cluster]:
    """A throw-away PostgreSQL cluster for this test process (`tests.postgres_support`)."""
    cluster = start_cluster()
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def database_url(postgres_cluster: Cluster) -> str:
    """A connection string to a new empty schema of the test cluster."""
    return postgres_cluster.new_schema()


@pytest.fixture(scope="session")
def s3_server() -> Iterator[S3Server]:
    """A throw-away S3-compatible server for this test process (`tests.s3_support`)."""
    server = start_s3()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def archive_url(s3_server: S3Server) -> str:
    """The archive store URL of a new empty bucket of the test S3 server."""
    return s3_server.url(s3_server.new_bucket())


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


# ---- mounts a test leaves behind -------------------------------------------------------------


def _mounts_under(root: Path) -> list[str]:
    """Mount points at or beneath ``root`` (from /proc/self/mountinfo), deepest first."""
    base = os.path.realpath(root)
    try:
        with open("/proc/self/mountinfo", encoding="utf-8", errors="surrogateescape") as f:
            lines = f.read().splitlines()
    except OSError:
        return []
    points = []
    for line in lines:
        fields = line.split(" - ")[0].split()
        if len(fields) < 5:
            continue
        point = fields[4].encode().decode("unicode_escape")  # mountinfo escapes space as \040
        if point == base or point.startswith(base + "/"):
            points.append(point)
    return sorted(points, key=len, reverse=True)


def _detach(points: list[str]) -> None:
    """Lazily unmount each point (a test's leftovers: nothing of the test uses them any more)."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    for point in points:
        libc.umount2(point.encode(), 2)  # MNT_DETACH


@pytest.fixture(autouse=True)
def _no_mount_left(request: pytest.FixtureRequest) -> Iterator[None]:
    """A test that made a tmp_path leaves no mount under it (a session tmpfs kept for a
    background process that outlived its Host, or of a host process the test killed): the test
    fails, and each is lazily unmounted here, so pytest can still remove the directory.
    Only this test's own tmp_path: other pytest runs share /tmp/pytest-of-root."""
    yield
    tmp = request.node.funcargs.get("tmp_path")
    left = _mounts_under(tmp) if isinstance(tmp, Path) else []
    if left:
        _detach(left)
        pytest.fail(f"the test left {len(left)} mount(s) under its tmp_path: {left}", pytrace=False)


# ---- tests that take too long ----------------------------------------------------------------

_MAX_SECONDS = float(os.environ.get("CODEMODE_TEST_MAX_SECONDS") or 0)
"""CI sets it (10): a test not marked ``slow`` whose call runs longer fails. 0 or unset: no check."""


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    started = time.monotonic()
    result = yield
    took = time.monotonic() - started
    if _MAX_SECONDS and took > _MAX_SECONDS and item.get_closest_marker("slow") is None:
        pytest.fail(
            f"the test took {took:.1f} s, over CODEMODE_TEST_MAX_SECONDS={_MAX_SECONDS:g}: make it faster "
            "or mark it slow (the slow stage runs it)",
            pytrace=False,
        )
    return result
