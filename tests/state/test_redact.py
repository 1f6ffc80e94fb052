"""Redaction: true positives for each credential format, and ordinary output left alone."""

from __future__ import annotations

import base64
import hashlib
import random
import uuid

import pytest

from codemode.state import Redactor, StreamRedactor

R = Redactor(environ={})

AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYzQ3rT9vKEY"
JWT = (
    "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4ifQ"
    ".SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c"
)
PEM = (
    "-----BEGIN OPENSSH PRIVATE KEY-----\n"
    "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW\n"
    "QyNTUxOQAAACDeadBeefDeadBeefDeadBeefDeadBeefDeadBeefDeadBeefAAAA\n"
    "-----END OPENSSH PRIVATE KEY-----"
)

POSITIVES = [
    ("id AKIAIOSFODNN7QWERTY2 in use", "AKIAIOSFODNN7QWERTY2", "aws-access-key-id"),
    ("ASIAY34FZKBOKMUTVV7A,", "ASIAY34FZKBOKMUTVV7A", "aws-access-key-id"),
    (f"aws_secret_access_key = {AWS_SECRET}", AWS_SECRET, "aws-secret-key"),
    (f'AWS_SECRET_ACCESS_KEY="{AWS_SECRET}"', AWS_SECRET, "aws-secret-key"),
    (f'"SecretAccessKey": "{AWS_SECRET}"', AWS_SECRET, "aws-secret-key"),
    ("key=AIzaSyA1bCdEfGhIjKlMnOpQrStUvWxYz012345", "AIzaSyA1bCdEfGhIjKlMnOpQrStUvWxYz012345", "gcp-api-key"),
    ("tok ya29.a0AfH6SMBx1234567890abcdefghij", "ya29.a0AfH6SMBx1234567890abcdefghij", "gcp-oauth-token"),
    (
        "DefaultEndpointsProtocol=https;AccountName=x;AccountKey=" + "Zm9vYmFy" * 8 + "==;",
        "Zm9vYmFy" * 8,
        "azure-key",
    ),
    ("GH ghp_" + "a1B2c3D4e5" * 3 + "F6g7h8", "ghp_" + "a1B2c3D4e5" * 3 + "F6g7h8", "github-token"),
    ("gho_" + "Z" * 36, "gho_" + "Z" * 36, "github-token"),
    ("ghs_" + "9" * 36, "ghs_" + "9" * 36, "github-token"),
    (
        "github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz",
        "github_pat_11ABCDEFG0123456789",
        "github-token",
    ),
    ("glpat-xxxxXXXX1234yyyyZZZZ", "glpat-xxxxXXXX1234yyyyZZZZ", "gitlab-token"),
    ("slack xoxb-1234567890-abcdefghij", "xoxb-1234567890-abcdefghij", "slack-token"),
    ("OPENAI sk-proj-abc123DEF456ghi789JKL012", "sk-proj-abc123DEF456ghi789JKL012", "openai-key"),
    ("sk-ant-api03-abcdefghijklmnop-1234567890", "sk-ant-api03-abcdefghijklmnop-1234567890", "anthropic-key"),
    ("stripe sk_live_4eC39HqLyjWDarjtT1zdp7dc", "sk_live_4eC39HqLyjWDarjtT1zdp7dc", "stripe-key"),
    ("rk_test_4eC39HqLyjWDarjtT1zdp7dc", "rk_test_4eC39HqLyjWDarjtT1zdp7dc", "stripe-key"),
    (f"token: {JWT}", JWT, "jwt"),
    ("Authorization: Bearer abc123.def456-ghi789", "abc123.def456-ghi789", "bearer-token"),
    ("authorization: Basic dXNlcjpwYXNzd29yZA==", "dXNlcjpwYXNzd29yZA==", "basic-auth"),
    (f"key:\n{PEM}\ndone", "b3BlbnNzaC1rZXktdjEAAAAABG5v", "private-key"),
]


@pytest.mark.parametrize(
    ("text", "secret", "label"), POSITIVES, ids=[p[2] + str(i) for i, p in enumerate(POSITIVES)]
)
def test_true_positives(text: str, secret: str, label: str) -> None:
    out = R.redact(text)
    assert secret not in out
    assert f"[REDACTED:{label}]" in out
    bout = R.redact_bytes(text.encode())
    assert secret.encode() not in bout and f"[REDACTED:{label}]".encode() in bout


def test_url_password_keeps_user_and_host() -> None:
    out = R.redact("cloning https://alice:s3cr3t-P4ss@git.example.com/repo.git ...")
    assert out == "cloning https://alice:[REDACTED:url-password]@git.example.com/repo.git ..."
    assert (
        R.redact("postgres://bob:pw12345@db:5432/app") == "postgres://bob:[REDACTED:url-password]@db:5432/app"
    )


def test_surrounding_text_kept() -> None:
    out = R.redact("before AKIAIOSFODNN7QWERTY2 after")
    assert out == "before [REDACTED:aws-access-key-id] after"


def test_env_values_of_secret_named_variables() -> None:
    red = Redactor(
        environ={
            "MY_SERVICE_TOKEN": "tok-value-123",
            "DB_PASSWORD": "hunter22",
            "SHORT_SECRET": "abc",  # too short to redact safely
            "GIT_AUTHOR_NAME": "Jane Developer",  # AUTHOR is not AUTH
            "SSH_AUTH_SOCK": "/tmp/ssh-XXXX/agent.1",  # a path, named *_SOCK
            "HOME": "/root",
        }
    )
    out = red.redact("t=tok-value-123 p=hunter22 s=abc by Jane Developer at /tmp/ssh-XXXX/agent.1")
    assert out == (
        "t=[REDACTED:env:MY_SERVICE_TOKEN] p=[REDACTED:env:DB_PASSWORD] s=abc "
        "by Jane Developer at /tmp/ssh-XXXX/agent.1"
    )
    assert red.secret_env_names == ["DB_PASSWORD", "MY_SERVICE_TOKEN"]
    assert red.redact_bytes(b"x hunter22 y") == b"x [REDACTED:env:DB_PASSWORD] y"


def test_defaults_to_os_environ(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CODEMODE_TEST_API_KEY", "value-from-the-env-42")
    assert Redactor().redact("v=value-from-the-env-42") == "v=[REDACTED:env:CODEMODE_TEST_API_KEY]"


def ordinary_output() -> str:
    rng = random.Random(7)
    lines = []
    for i in range(300):
        lines += [
            f"commit {hashlib.sha1(str(i).encode()).hexdigest()}",
            f"Author: Dev {i} <dev{i}@example.com>",
            f"id={uuid.UUID(int=rng.getrandbits(128))} status=ok",
            base64.b64encode(rng.randbytes(300)).decode(),
            base64.urlsafe_b64encode(rng.randbytes(120)).decode(),
            f"{hashlib.sha256(str(i).encode()).hexdigest()}  ./dist/pkg-{i}.tar.gz",
            f"/home/user/project/src/module_{i}/secret_handler.py:12: note",
            "tests/test_auth.py::test_bearer_token_is_rejected PASSED",
            "Bearer authentication is configured via the Authorization header",
            "see https://docs.example.com:8443/path?q=1#frag and git@github.com:org/repo.git",
            "task-runner-build-cache-directory-name sk-learn scikit-learn==1.5.0",
            "password: ******** (hidden)",
        ]
    return "\n".join(lines) + "\n"


def test_must_not_mangle_ordinary_output() -> None:
    text = ordinary_output()
    assert R.redact(text) == text
    assert R.redact_bytes(text.encode()) == text.encode()


def test_redaction_is_idempotent() -> None:
    text = " ".join(p[0] for p in POSITIVES)
    once = R.redact(text)
    assert R.redact(once) == once


def test_non_utf8_bytes_survive() -> None:
    data = b"\xff\xfe binary \x00 AKIAIOSFODNN7QWERTY2 \x80"
    assert R.redact_bytes(data) == b"\xff\xfe binary \x00 [REDACTED:aws-access-key-id] \x80"


def test_stream_redactor_matches_whole_text_redaction_at_any_chunking() -> None:
    text = ("ordinary line\n" + "\n".join(p[0] for p in POSITIVES) + "\nend\n").encode()
    expected = R.redact_bytes(text)
    for size in (1, 3, 17, 64, 1000):
        stream = StreamRedactor(R)
        out = b"".join(stream.feed(text[i : i + size]) for i in range(0, len(text), size)) + stream.flush()
        assert out == expected, size


def test_one_line_redacts_the_whole_text_before_cutting_and_shows_controls_as_text() -> None:
    command = (
        "deploy --label "
        + "a" * 30
        + " AKIAIOSFODNN7QWERTY2\n\t--color \x1b[31m\x1b]0;title\x07 \x9b2J \u202eevil"
    )
    # Cut first, the key's head would survive: the whole text is redacted first.
    assert R.one_line(command, 50) == "deploy --label " + "a" * 30 + " [..."
    assert R.one_line(command) == (
        "deploy --label " + "a" * 30 + " [REDACTED:aws-access-key-id] --color "
        "\\x1b[31m\\x1b]0;title\\x07 \\x9b2J \\u202eevil"
    )
    assert R.one_line("  plain   words \r\n") == "plain words"
    assert R.one_line("x" * 10, 10) == "x" * 10 and R.one_line("x" * 11, 10) == "x" * 7 + "..."
