"""Attack class: a command with a network allowlist reaching more than its listed domains.

A name under a wildcard that resolves to loopback, a private address or the metadata service
(DNS rebinding), a raw address, UDP, raw sockets, a direct connection past the proxy: each is
refused, and the proxy refuses before it connects (the tests count connection attempts; they
send traffic to loopback only).
"""

from __future__ import annotations

import os
import shutil
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from codemode.network import _service as service
from codemode.network import check_entries
from codemode.sandbox import SandboxMode, SandboxPolicy
from codemode.sandbox._launcher import launcher_fd
from codemode.sandbox._spawn import spawn_helper
from tests.network.proxy_support import CountingServer, Recorder, ask, attached, counting_server
from tests.sandbox.sandbox_support import bash, needs_landlock, run_confined


@pytest.fixture
def server() -> Iterator[CountingServer]:
    with counting_server() as made:
        yield made


@pytest.mark.parametrize(
    ("allow", "name", "address", "why"),
    [
        (["*.corp.test"], "rebind.corp.test", "127.0.0.1", b"loopback"),
        (["*.corp.test"], "inside.corp.test", "10.1.2.3", b"private"),
        (["*.corp.test"], "v6.corp.test", "::1", b"loopback"),
        (["*.corp.test"], "mapped.corp.test", "::ffff:127.0.0.1", b"loopback"),
        (["meta.test"], "meta.test", "169.254.169.254", b"link-local"),
        (["meta6.test"], "meta6.test", "fd00:ec2::254", b"link-local"),
    ],
)
def test_a_name_resolving_inward_is_refused_before_connecting(
    allow: list[str], name: str, address: str, why: bytes, server: CountingServer
) -> None:
    recorder = Recorder({name: [address]})
    proxy = recorder.proxy()
    try:
        with attached(proxy, allow) as command:
            answer = ask(command.port, f"CONNECT {name}:{server.port} HTTP/1.1\r\n\r\n".encode())
        assert answer.startswith(b"HTTP/1.1 403") and why in answer, answer
        assert recorder.looked_up == [name]
        assert recorder.attempts == []  # refused before any connection
        assert server.connections == 0
    finally:
        proxy.close()


def test_a_name_listed_exactly_may_reach_a_private_address_but_no_other() -> None:
    recorder = Recorder({"intranet.test": ["10.9.8.7"]})
    proxy = recorder.proxy()
    try:
        with attached(proxy, ["intranet.test"]) as command:
            answer = ask(command.port, b"CONNECT intranet.test:443 HTTP/1.1\r\n\r\n")
        # Past the filter: the (recording) connector was asked, and sends nothing off loopback.
        assert answer.startswith(b"HTTP/1.1 502"), answer
        assert recorder.attempts == [("10.9.8.7", 443)]
    finally:
        proxy.close()


@pytest.fixture
def host_proxy(monkeypatch: pytest.MonkeyPatch) -> Iterator[Recorder]:
    """The proxy confined commands reach, with a recording resolver and connector."""
    recorder = Recorder({"localhost": ["127.0.0.1"], "rebind.corp.test": ["127.0.0.1"]})
    proxy = recorder.proxy()
    monkeypatch.setattr(service, "_proxy", (os.getpid(), proxy))
    yield recorder
    proxy.close()


def _policy(tmp_path: Path, allow: list[str]) -> SandboxPolicy:
    ws, state = tmp_path / "ws", tmp_path / "state"
    ws.mkdir()
    state.mkdir()
    return SandboxPolicy(
        mode=SandboxMode.WORKSPACE_WRITE,
        writable_roots=(ws,),
        network_allow=check_entries(allow),
        protected=(state,),
    )


@needs_landlock
def test_a_confined_command_reaches_only_the_proxy(
    tmp_path: Path, server: CountingServer, host_proxy: Recorder
) -> None:
    policy = _policy(tmp_path, ["localhost", "*.corp.test"])
    url = f"http://localhost:{server.port}/ok"
    done = bash(
        policy,
        f"curl -sS -m 20 {url}; echo; "
        f"curl -sS -m 20 http://127.0.0.1:{server.port}/raw; echo; "
        f"curl -sS -m 20 http://rebind.corp.test:{server.port}/rebound; echo; "
        f"curl -sS -m 20 --noproxy '*' {url}; echo direct=$?; "
        "ip -o link | cut -d: -f2; "
        "python3 -c 'import socket; socket.socket(socket.AF_INET, socket.SOCK_DGRAM)' 2>&1 | tail -1; "
        "python3 -c 'import socket; socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)' 2>&1 | tail -1; "
        "python3 -c 'import socket; socket.socket(socket.AF_INET, socket.SOCK_RAW, 1)' 2>&1 | tail -1; "
        "python3 -c 'import socket; socket.socket(40, socket.SOCK_STREAM)' 2>&1 | tail -1",
    )
    out = done.stdout + done.stderr
    assert "hello /ok" in out
    assert (
        "127.0.0.1:" in out
        and "rebind.corp.test" in out
        and "hello /raw" not in out
        and "hello /rebound" not in out
    )
    assert "direct=7" in out  # past the proxy: nothing listens in the command's namespace
    assert [line.strip() for line in done.stdout.splitlines() if line.strip() in ("lo", "eth0")] == ["lo"]
    assert out.count("PermissionError: [Errno 1]") == 4, out  # UDP, UDP6, raw, vsock
    assert server.connections == 1
    assert host_proxy.attempts == [("127.0.0.1", server.port)]


@needs_landlock
def test_a_direct_connection_to_the_proxy_port_elsewhere_is_denied_by_landlock(
    tmp_path: Path, server: CountingServer, host_proxy: Recorder
) -> None:
    policy = _policy(tmp_path, ["localhost"])
    done = bash(
        policy,
        'python3 -c \'import socket; socket.create_connection(("127.0.0.1", '
        f"{server.port}), timeout=5)' 2>&1 | tail -1",
    )
    assert "PermissionError: [Errno 13]" in done.stdout, done.stdout + done.stderr
    assert server.connections == 0


def test_the_launcher_fails_closed_when_the_proxy_channel_is_gone(tmp_path: Path) -> None:
    helper = launcher_fd()
    assert helper is not None
    host_end, command_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET | socket.SOCK_CLOEXEC)
    host_end.close()  # no host listens: handing the socket over fails
    marker = tmp_path / "ran"
    read, write = os.pipe2(os.O_CLOEXEC)
    null = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
    try:
        proc = spawn_helper(
            helper,
            "/bin/touch",
            ["touch", str(marker)],
            env={},
            cwd=str(tmp_path),
            stdio=(null, write, write),
            net_fd=command_end.fileno(),
        )
    finally:
        os.close(write)
        os.close(null)
        command_end.close()
    output = b""
    while chunk := os.read(read, 65536):
        output += chunk
    os.close(read)
    assert proc.wait(timeout=30) == 126
    assert b"handing the proxy's listening socket to the host failed" in output, output
    assert not marker.exists()


_SETPRIV = shutil.which("setpriv")


@needs_landlock
@pytest.mark.skipif(
    os.geteuid() != 0 or _SETPRIV is None, reason="needs root and setpriv to start as another user"
)
def test_a_command_started_by_a_user_other_than_root_is_confined_the_same_way(
    tmp_path: Path, server: CountingServer, host_proxy: Recorder, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A host that is not root makes the command's network namespace inside a user namespace of
    its own (the launcher's other path). Here the launcher is started as nobody (setpriv, every
    capability dropped) and must give the same result as for root: its own namespace, loopback
    only, the proxy the one way out."""
    assert _SETPRIV is not None
    real_spawn = os.posix_spawn

    def as_nobody(path: str, argv: list[str], env: dict[str, str], **options: Any) -> int:
        helper = int(path.rpartition("/")[2])  # /proc/self/fd/N: kept open across setpriv's exec
        options["file_actions"] = [*options.get("file_actions", []), (os.POSIX_SPAWN_DUP2, helper, helper)]
        wrapper = [_SETPRIV, "--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all"]
        return real_spawn(_SETPRIV, [*wrapper, "--bounding-set=-all", "--", path, *argv[1:]], env, **options)

    monkeypatch.setattr(os, "posix_spawn", as_nobody)
    policy = _policy(tmp_path, ["localhost"])
    tmp_path.chmod(0o755)  # nobody reaches the workspace
    done = run_confined(
        policy,
        [
            "bash",
            "-c",
            f"id -u; readlink /proc/self/ns/net; curl -sS -m 20 http://localhost:{server.port}/ok; echo; "
            f"curl -sS -m 5 --noproxy '*' http://127.0.0.1:{server.port}/direct; echo direct=$?",
        ],
        cwd=Path("/"),
    )
    monkeypatch.undo()
    lines = done.stdout.splitlines()
    assert done.returncode == 0, done.stdout + done.stderr
    assert lines[0] == "65534" and lines[1] != os.readlink("/proc/self/ns/net"), lines
    assert "hello /ok" in done.stdout and "direct=7" in done.stdout, done.stdout + done.stderr
    assert server.connections == 1
