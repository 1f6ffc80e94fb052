"""The rule set on our own fixtures: every family's examples redacted in every spelling, ordinary
output unchanged, redaction idempotent, and secrets cut across stream chunks still caught."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import threading
from collections import Counter
from pathlib import Path

import pytest

from codemode.state import Redactor, StreamRedactor
from codemode.state._redact import _Engine
from codemode.state._secret_rules import RULES_DIR, load_rules, rule_specs, rule_specs_from_toml
from tests.state.secret_fixtures import families, ordinary_output, pem

R = Redactor(environ={})
FAMILIES = families()


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_every_example_of_each_family_is_redacted(family: str) -> None:
    missed = [(text, secret) for text, secret in FAMILIES[family] if secret in R.redact(text)]
    assert not missed, (
        f"{len(missed)} of {len(FAMILIES[family])} {family} examples kept their secret: {missed[:3]}"
    )
    for text, secret in FAMILIES[family]:
        out = R.redact_bytes(text.encode())
        assert secret.encode() not in out and b"[REDACTED:" in out, text


def test_ordinary_output_comes_back_unchanged() -> None:
    text = ordinary_output()
    out = R.redact(text)
    changed = [(a, b) for a, b in zip(text.splitlines(), out.splitlines(), strict=True) if a != b]
    assert not changed, changed[:5]
    data = text.encode()
    assert R.redact_bytes(data) is data  # nothing found: no copy made


def test_redacting_redacted_text_changes_nothing() -> None:
    for cases in FAMILIES.values():
        for text, _ in cases:
            once = R.redact(text)
            assert R.redact(once) == once, text


def test_the_rest_of_the_text_is_kept() -> None:
    token = "ghp_" + "Zx9" * 12
    assert R.redact(f"before {token} after") == "before [REDACTED:github-token] after"
    assert R.redact("password = 'S3cr3t!pw'  # rotate") == "password = '[REDACTED:secret]'  # rotate"
    assert R.redact("user@example.com logged in") == "user@example.com logged in"


def test_base64_of_ordinary_data_and_of_a_public_key_is_kept_but_of_a_private_key_is_not() -> None:
    import base64

    public = base64.b64encode(b"-----BEGIN PUBLIC KEY-----\nMFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAE\n").decode()
    assert R.redact(f"PUB={public}") == f"PUB={public}"
    private = base64.b64encode(pem("EC PRIVATE KEY").encode()).decode()
    assert R.redact(f"x {private} y") == "x [REDACTED:private-key] y"


def test_non_utf8_bytes_pass_through() -> None:
    data = b"\xff\xfe binary \x00 AKIAIOSFODNN7EXAMPLF \xc3"
    assert R.redact_bytes(data) == b"\xff\xfe binary \x00 [REDACTED:aws-access-key-id] \xc3"
    assert R.redact("lone \udcff surrogate") == "lone \udcff surrogate"


@pytest.mark.parametrize("cut", [5, 17, 33, 61])
def test_a_secret_split_across_stream_chunks_is_still_redacted(cut: int) -> None:
    token = "glpat-" + "Ab3dEf6hIj9kLm2nOp5q"
    data = f"log line one\ndeploying with {token} now\nnext line\n".encode()
    pos = data.index(token.encode()) + cut % len(token)
    stream = StreamRedactor(R)
    out = stream.feed(data[:pos]) + stream.feed(data[pos:]) + stream.flush()
    assert token.encode() not in out and b"[REDACTED:gitlab-token]" in out
    assert out.startswith(b"log line one\n") and out.endswith(b"next line\n")


def test_a_private_key_block_across_many_chunks_is_suppressed_to_its_end() -> None:
    key = pem("OPENSSH PRIVATE KEY", lines=40)
    data = f"start\n{key}\nafter\n".encode()
    stream = StreamRedactor(R)
    out = b"".join(stream.feed(data[i : i + 100]) for i in range(0, len(data), 100)) + stream.flush()
    body = key.splitlines()[1:-1]
    assert not any(line.encode() in out for line in body)
    assert out.startswith(b"start\n") and out.endswith(b"after\n")


def test_every_rule_compiles_and_names_its_label() -> None:
    rules = load_rules()
    assert len(rules) > 250
    ids = [r.id for r in rules]
    assert (
        "generic-api-key" not in ids and "sourcegraph-access-token" not in ids
    )  # turned off in codemode.toml
    assert all(r.marker == f"[REDACTED:{r.label}]".encode() for r in rules)
    # Patterns compile at first use (a cold start needs only a few): here every one must.
    for rule in rules:
        assert rule.pattern.groups >= 0, rule.id
        assert rule.secret_group >= -1, rule.id
        for allow in rule.allowlists:
            assert allow.source is None or allow.regex is not None, rule.id
    # gitleaks' global allowlist is one object, compiled once for all its rules.
    uses = Counter(id(a) for r in rules for a in r.allowlists)
    assert max(uses.values()) > 200


def test_rules_json_is_what_the_rule_files_give() -> None:
    root = Path(__file__).resolve().parents[2]
    check = subprocess.run(
        [sys.executable, str(root / "scripts" / "build_secret_rules.py"), "--check"],
        capture_output=True,
        text=True,
    )
    assert check.returncode == 0, check.stderr
    assert rule_specs() == rule_specs_from_toml()


def test_a_stale_rules_json_is_not_used(tmp_path: Path) -> None:
    for name in ("gitleaks.toml", "codemode.toml"):
        shutil.copy(RULES_DIR / name, tmp_path / name)
    stale = json.loads((RULES_DIR / "rules.json").read_text())
    stale["rules"] = stale["rules"][:1]
    (tmp_path / "rules.json").write_text(json.dumps(stale))
    with (tmp_path / "codemode.toml").open("a") as f:
        f.write("\n# edited without running scripts/build_secret_rules.py\n")
    assert len(load_rules(tmp_path)) == len(load_rules())  # read from the TOML, not the stale JSON


def test_no_match_is_shorter_than_its_rules_min_length() -> None:
    # The short-text path skips a rule for a text shorter than its min_length: a true lower bound.
    rules = load_rules()
    assert sum(1 for r in rules if r.min_length >= 8) > 200
    checked = 0
    for cases in FAMILIES.values():
        for text, _ in cases:
            data = text.encode()
            for rule in rules:
                for match in rule.pattern.finditer(data):
                    assert match.end() - match.start() >= rule.min_length, (rule.id, text)
                    checked += 1
    assert checked > 300


def test_short_texts_checked_rule_by_rule_give_what_the_hyperscan_pass_gives() -> None:
    rules = load_rules()
    scanned = _Engine(rules)
    scanned.matches(b"x" * 1000)  # a long text compiles the database; short ones then use it too
    compared = 0
    for cases in FAMILIES.values():
        for text, _ in cases:
            data = text.encode()
            if len(data) <= 512:
                fresh = _Engine(rules)  # no database yet: a short text goes rule by rule
                by_rule = fresh.spans(data, fresh.matches(data))
                assert fresh._database is None
                assert by_rule, text
                assert sorted(by_rule) == sorted(scanned.spans(data, scanned.matches(data))), text
                compared += 1
    assert compared > 300
    assert scanned._database is not None


def test_many_short_texts_start_the_compile_on_a_thread_of_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    # The compile takes half a second; the caller (often the event loop) must not wait for it.
    from codemode.state import _redact

    engine = _Engine(load_rules())
    compiled_on: list[str] = []
    release = threading.Event()
    compile = engine._compiled

    def held_compile() -> object:
        compiled_on.append(threading.current_thread().name)
        with engine._lock:  # the real compile holds this lock throughout
            release.wait(30)
        return compile()

    monkeypatch.setattr(engine, "_compiled", held_compile)
    line = b"token=ghp_" + b"a" * 36
    first = engine.spans(line, engine.matches(line))
    results: list[object] = []

    def caller() -> None:
        for _ in range(_redact._SHORT_TEXTS + 8):
            results.append(engine.spans(line, engine.matches(line)))

    calls = threading.Thread(target=caller)
    calls.start()
    calls.join(10)
    assert not calls.is_alive(), "a short text waited for the compile"
    assert results == [first] * (_redact._SHORT_TEXTS + 8)  # rule by rule meanwhile
    assert engine._database is None
    release.set()
    for thread in threading.enumerate():
        if thread.name == "codemode-redact-rules":
            thread.join()
    assert compiled_on == ["codemode-redact-rules"]
    assert engine._database is not None
    assert engine.spans(line, engine.matches(line)) == first  # the database finds the same
    assert first


def test_a_stream_that_knows_many_values_builds_their_search_once() -> None:
    # Compiling the known values' literal database for every chunk cost 40 times the scan.
    from codemode.state import _redact

    stream = StreamRedactor(R)
    values = [f"Zq{i}x!Wm{i * 7}pT{i}" for i in range(20)]
    first = stream.feed("".join(f"password_{i} = '{v}'\n" for i, v in enumerate(values)).encode())
    assert not any(v.encode() in first for v in values)
    made = dict(_redact._LITERALS.cache)
    for i in range(50):
        out = stream.feed(f"line {i} uses {values[i % 20]} again\n".encode())
        assert out == f"line {i} uses [REDACTED:secret] again\n".encode()
    assert dict(_redact._LITERALS.cache) == made  # the same database, not one per chunk
