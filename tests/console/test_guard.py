"""The console's guard, in-process: logins (cookie id and key), their bounds, the Host check."""

from __future__ import annotations

import pytest
from starlette.requests import Request

from codemode.console import host_matcher
from codemode.console._errors import ConsoleError
from codemode.console._guard import COOKIE, KEY_HEADER, Guard

_TOKENS = {"alice-token-0123456789": "alice", "bob-token-01234567890": "bob"}


def _guard() -> Guard:
    return Guard(_TOKENS.get, host_matcher(["127.0.0.1:*", "127.0.0.1"]))


def _request(cookie: str | None, key: str | None) -> Request:
    headers = [(b"host", b"127.0.0.1:8765")]
    if cookie is not None:
        headers.append((b"cookie", f"{COOKIE}={cookie}".encode()))
    if key is not None:
        headers.append((KEY_HEADER.encode(), key.encode()))
    return Request(
        {"type": "http", "method": "GET", "path": "/console/api/me", "headers": headers, "query_string": b""}
    )


def test_a_login_needs_its_cookie_and_its_key_together() -> None:
    guard = _guard()
    login_id, login = guard.login("alice-token-0123456789")
    assert guard.who(_request(login_id, login.key)).tenant == "alice"
    other_id, other = guard.login("bob-token-01234567890")
    for cookie, key in [(login_id, None), (None, login.key), (login_id, other.key), (other_id, login.key)]:
        with pytest.raises(ConsoleError) as refused:
            guard.who(_request(cookie, key))
        assert refused.value.status == 401


@pytest.mark.parametrize("token", ["", "nope", "alice-token-0123456789\ud800", 7, None, "\x00"])
def test_a_token_that_is_not_one_is_refused_as_such(token: object) -> None:
    with pytest.raises(ConsoleError) as refused:
        _guard().login(token)
    assert refused.value.status == 401 and "token" in refused.value.message


def test_one_tenant_logging_in_over_and_over_never_logs_another_out(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("codemode.console._guard.LOGINS_PER_TENANT", 5)
    guard = _guard()
    bob_id, bob = guard.login("bob-token-01234567890")
    alice = [guard.login("alice-token-0123456789") for _ in range(20)]
    assert guard.who(_request(bob_id, bob.key)).tenant == "bob"
    with pytest.raises(ConsoleError):
        guard.who(_request(alice[0][0], alice[0][1].key))  # alice's oldest went
    assert guard.who(_request(alice[-1][0], alice[-1][1].key)).tenant == "alice"


def test_the_host_check_takes_a_listed_name_with_a_numeric_port_only() -> None:
    allowed = host_matcher(["127.0.0.1:*", "localhost:*", "127.0.0.1"])
    assert allowed("127.0.0.1:8765") and allowed("localhost:1") and allowed("127.0.0.1")
    for host in ("127.0.0.1:80.evil.example", "evil.example:8765", "127.0.0.1:", "", "127.0.0.2:80"):
        assert not allowed(host), host
