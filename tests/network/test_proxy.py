"""The filtering proxy: what it lets through, what it refuses before it connects, and under load."""

from __future__ import annotations

import concurrent.futures
import socket
import time
from collections.abc import Iterator

import pytest

from codemode.network import NetworkProxy, protect_front, release_front
from tests.network.proxy_support import CountingServer, Recorder, ask, attached, counting_server


@pytest.fixture
def server() -> Iterator[CountingServer]:
    with counting_server() as made:
        yield made


@pytest.fixture
def recorder() -> Recorder:
    return Recorder({"localhost": ["127.0.0.1"]})


@pytest.fixture
def proxy(recorder: Recorder) -> Iterator[NetworkProxy]:
    made = recorder.proxy()
    yield made
    made.close()


def _get(url: str) -> bytes:
    return f"GET {url} HTTP/1.1\r\nHost: x\r\nProxy-Connection: keep-alive\r\n\r\n".encode()


def test_a_listed_name_is_reached_by_plain_http_and_connect(
    proxy: NetworkProxy, server: CountingServer, recorder: Recorder
) -> None:
    with attached(proxy, ["localhost"]) as command:
        plain = ask(command.port, _get(f"http://localhost:{server.port}/plain"))
        assert plain.startswith(b"HTTP/1.0 200") and plain.endswith(b"hello /plain\n"), plain
        tunnel = ask(
            command.port,
            f"CONNECT localhost:{server.port} HTTP/1.1\r\nHost: localhost\r\n\r\n".encode(),
            then=b"GET /tunnel HTTP/1.0\r\n\r\n",
        )
        assert tunnel.startswith(b"HTTP/1.1 200 Connection established"), tunnel
        assert tunnel.endswith(b"hello /tunnel\n")
        assert command.channel.refusals == []
    assert recorder.attempts == [("127.0.0.1", server.port)] * 2
    assert server.connections == 2


def test_a_name_not_listed_is_refused_before_any_lookup(
    proxy: NetworkProxy, server: CountingServer, recorder: Recorder, caplog: pytest.LogCaptureFixture
) -> None:
    with attached(proxy, ["localhost"]) as command:
        answer = ask(command.port, _get(f"http://example.com:{server.port}/"))
        assert answer.startswith(b"HTTP/1.1 403"), answer
        assert b"add 'example.com' to the call's network allowlist" in answer
        assert command.channel.refusals == [f"example.com:{server.port} (not on the allowlist)"]
    assert recorder.looked_up == [] and recorder.attempts == []
    assert "refused example.com" in caplog.text


def test_an_address_is_not_its_name(proxy: NetworkProxy, server: CountingServer, recorder: Recorder) -> None:
    with attached(proxy, ["localhost"]) as command:
        answer = ask(command.port, f"CONNECT 127.0.0.1:{server.port} HTTP/1.1\r\n\r\n".encode())
        assert answer.startswith(b"HTTP/1.1 403") and b"not on the allowlist" in answer
    assert recorder.attempts == [] and server.connections == 0


def test_a_listed_front_is_never_reached(
    proxy: NetworkProxy, server: CountingServer, recorder: Recorder
) -> None:
    protect_front("127.0.0.1", server.port)
    try:
        with attached(proxy, ["localhost"]) as command:
            answer = ask(command.port, _get(f"http://localhost:{server.port}/"))
        assert answer.startswith(b"HTTP/1.1 403") and b"front" in answer, answer
    finally:
        release_front("127.0.0.1", server.port)
    assert recorder.attempts == [] and server.connections == 0


def test_a_bad_request_gets_400(proxy: NetworkProxy) -> None:
    with attached(proxy, ["localhost"]) as command:
        assert ask(command.port, b"GET /relative HTTP/1.1\r\n\r\n").startswith(b"HTTP/1.1 400")
        assert ask(command.port, b"nonsense\r\n\r\n").startswith(b"HTTP/1.1 400")


def test_the_listener_closes_when_the_command_exits(proxy: NetworkProxy) -> None:
    with attached(proxy, ["localhost"]) as command:
        command.exit()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", command.port), timeout=5).close()
            except ConnectionRefusedError:
                break
            except ConnectionResetError:
                pass  # accepted as the listener was closing (its backlog reset): try again
            time.sleep(0.01)  # polling for the proxy's thread, not a timing assumption
        else:
            pytest.fail("the proxy still listens for a command that exited")


def test_under_load_every_request_is_served_and_no_more_than_the_cap_at_once(
    server: CountingServer, recorder: Recorder
) -> None:
    proxy = recorder.proxy(max_connections=8)
    try:
        with attached(proxy, ["localhost"]) as command:

            def one(i: int) -> bytes:
                return ask(command.port, _get(f"http://localhost:{server.port}/{i}"))

            with concurrent.futures.ThreadPoolExecutor(48) as pool:
                answers = list(pool.map(one, range(300)))
        assert all(a.endswith(f"hello /{i}\n".encode()) for i, a in enumerate(answers))
        assert server.connections == 300
        assert 1 <= proxy.peak <= 8
        assert proxy.active == 0
    finally:
        proxy.close()
