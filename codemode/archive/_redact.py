"""Secret redaction for command output, archived text and logs.

Speed matters (every byte of command output passes through here), so the rules sit in a few
groups, each behind one cheap literal-prefix gate; a group's regular expressions only run when
its gate hits.
Ordinary output (commit hashes, UUIDs, sha256 sums, base64 blobs, paths) has no gate hit or no
token boundary and passes through untouched.

A replacement looks like ``[REDACTED:github-token]``; values of secret-named environment
variables become ``[REDACTED:env:NAME]`` (the name is not secret, the value is). Redacting
already-redacted text changes nothing.

`Redactor.one_line` is the one way text (a command line) becomes a line of an operator's or a
model's view (``codemode ps``, ``bash list``, notifications): redacted whole before it is cut,
with terminal controls made visible.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["Redactor", "StreamRedactor"]

# A token starts where no other token character precedes it (so a base64 or hex blob that
# happens to contain "AKIA" or "eyJ" in its middle is not touched). The check is written as a
# lookbehind AFTER the literal so that the regex engine can scan for the literal prefix quickly.
_TOKEN_CHARS = r"[A-Za-z0-9_\-+]"


def _tok(literal: str, rest: str) -> str:
    lit = re.escape(literal)
    return f"{lit}(?<!{_TOKEN_CHARS}{lit}){rest}"


# Rules come in groups behind one gate each. A gate is a regex that starts with a literal (the
# regex engine scans for a literal prefix fast) matching any of its rules' leading literals;
# only when it hits do the group's rules run. A scan costs about 1 ns a byte, so the number of
# groups is what sets the speed on text without secrets; related rules share a gate (a
# one-character prefix such as "y" for "ya29." and "Key=" still scans fast). The url group is
# first gated by a memchr-fast test for "@".
#
# A rule is (label, pattern). The pattern may define a group "pre" that is kept (for example
# the "AccountKey=" before an Azure key, or the user part of a URL); the rest of the match is
# replaced by the marker.
_KEY_ASSIGN = r"[_\-.]?(?i:access)?[_\-.]?(?i:key)[\"']?\s*[:=]\s*[\"']?)[A-Za-z0-9/+]{40}(?![A-Za-z0-9/+])"
_STRIPE = r"(?<![A-Za-z0-9])[sr]k_(?:live|test)_[A-Za-z0-9]{16,}"
_PEM = r"-----BEGIN[A-Z0-9 ]*PRIVATE KEY-----[\s\S]*?(?:-----END[A-Z0-9 ]*PRIVATE KEY-----|\Z)"
_BEARER = r"(?P<pre>earer(?<=\b[Bb]earer)\s+)(?=[A-Za-z\-._~+/]*[0-9])[A-Za-z0-9\-._~+/]{8,}=*"
_BASIC = r"(?P<pre>uthorization[\"']?\s*[:=]\s*[\"']?[Bb]asic\s+)[A-Za-z0-9+/]{8,}={0,2}"
_JWT = r"[A-Za-z0-9_\-]{5,}\.[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}"
_GROUPS: list[tuple[str, str, list[tuple[str, str]]]] = [
    (
        "",
        r"E(?:CRET|(?<=PRIVATE) KEY)",
        [("private-key", _PEM), ("aws-secret-key", r"(?P<pre>ECRET" + _KEY_ASSIGN)],
    ),
    (
        "",
        r"A(?:KIA|SIA|Iza)",
        [
            ("aws-access-key-id", _tok("AKIA", r"[0-9A-Z]{16}(?![0-9A-Za-z])")),
            ("aws-access-key-id", _tok("ASIA", r"[0-9A-Z]{16}(?![0-9A-Za-z])")),
            ("gcp-api-key", _tok("AIza", r"[0-9A-Za-z_\-]{35}(?![0-9A-Za-z_\-])")),
        ],
    ),
    (
        "",
        r"y(?:a29\.|=)",
        [
            ("gcp-oauth-token", _tok("ya29.", r"[0-9A-Za-z_\-]{20,}")),
            ("azure-key", r"(?P<pre>AccountKey=)[A-Za-z0-9+/]{40,}={0,2}"),
            ("azure-key", r"(?P<pre>SharedAccessKey=)[A-Za-z0-9+/]{40,}={0,2}"),
        ],
    ),
    (
        "",
        r"g(?:h[pousr]_|ithub_pat_|lpat-)",
        [
            ("github-token", _tok("gh", r"[pousr]_[A-Za-z0-9]{36,}")),
            ("github-token", _tok("github_pat_", r"[A-Za-z0-9_]{22,}")),
            ("gitlab-token", _tok("glpat-", r"[A-Za-z0-9_\-]{20,}")),
        ],
    ),
    ("", r"xox[abposr]-", [("slack-token", _tok("xox", r"[abposr]-[A-Za-z0-9\-]{10,}"))]),
    (
        "",
        r"k(?:-|_live_|_test_)",
        [
            ("anthropic-key", _tok("sk-ant-", r"[A-Za-z0-9_\-]{20,}")),
            ("openai-key", _tok("sk-", r"(?=[A-Za-z_\-]*[0-9])[A-Za-z0-9_\-]{20,}")),
            ("stripe-key", _STRIPE),
        ],
    ),
    ("", r"J(?<=eyJ)", [("jwt", _tok("eyJ", _JWT))]),
    (
        "",
        r"r(?:er(?<=earer)|et(?<=ecret))",
        [("aws-secret-key", r"(?P<pre>ecret" + _KEY_ASSIGN), ("bearer-token", _BEARER)],
    ),
    ("", r"z(?<=uthoriz)", [("basic-auth", _BASIC)]),
    ("@", r"://", [("url-password", r"(?P<pre>://[^\s:/@?#\[\]\"'<>]*:)[^\s@/?#\"'<>]{1,256}(?=@)")]),
]

_SECRET_NAME = re.compile(
    r"TOKEN|SECRET|PASSWORD|PASSWD|PASSPHRASE|API_?KEY|ACCESS_?KEY|PRIVATE_?KEY|CREDENTIAL|"
    r"AUTH(?!OR)|SESSION_?KEY|SIGNING_?KEY|_PAT$|_PWD$",
    re.IGNORECASE,
)
_NOT_SECRET_NAME = re.compile(
    r"_(?:SOCK|PATH|FILE|DIR|HOST|PORT|URL|USER|USERNAME|TYPE|METHOD)$", re.IGNORECASE
)
_MIN_ENV_VALUE = 6

# What one_line shows as visible escapes: C0 controls (ESC starts every terminal escape
# sequence), DEL, C1 controls (8-bit CSI, OSC, ...), and the Unicode controls that reorder or
# break a displayed line (bidirectional overrides and isolates, line and paragraph separators).
_LINE_CONTROLS = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
_LINE_SPACES = re.compile("[ \t\n\r\v\f]+")


def _visible_control(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


@dataclass(frozen=True)
class _Rule:
    label: str
    pattern_s: re.Pattern[str]
    pattern_b: re.Pattern[bytes]
    repl_s: str
    repl_b: bytes


@dataclass(frozen=True)
class _Group:
    pre_s: str
    pre_b: bytes
    gate_s: re.Pattern[str]
    gate_b: re.Pattern[bytes]
    rules: tuple[_Rule, ...]


def _compile(label: str, source: str) -> _Rule:
    marker = f"[REDACTED:{label}]"
    repl = (r"\g<pre>" + marker) if "(?P<pre>" in source else marker
    return _Rule(label, re.compile(source), re.compile(source.encode()), repl, repl.encode())


_COMPILED = [
    _Group(pre, pre.encode(), re.compile(gate), re.compile(gate.encode()), tuple(_compile(*r) for r in rules))
    for pre, gate, rules in _GROUPS
]
_PEM_BEGIN = re.compile(rb"-----BEGIN[A-Z0-9 ]*PRIVATE KEY-----")
_PEM_END = re.compile(rb"-----END[A-Z0-9 ]*PRIVATE KEY-----")


def _secret_env_values(environ: Mapping[str, str]) -> list[tuple[str, str]]:
    found: dict[str, str] = {}
    for name, value in environ.items():
        if len(value) < _MIN_ENV_VALUE or not _SECRET_NAME.search(name) or _NOT_SECRET_NAME.search(name):
            continue
        stripped = value.strip()
        # Paths, numbers and booleans are configuration, not credentials; replacing them would
        # mangle ordinary output.
        if (
            stripped.startswith(("/", "~", "./"))
            or stripped.isdigit()
            or stripped.lower() in {"true", "false"}
        ):
            continue
        found.setdefault(value, name)
    # Longest first, so a value that contains another is replaced whole.
    return sorted(((v, n) for v, n in found.items()), key=lambda item: -len(item[0]))


class Redactor:
    """Replaces credentials in text with ``[REDACTED:<kind>]`` markers.

    Args:
        environ: Environment whose secret-named variables' values (name contains TOKEN,
            SECRET, PASSWORD, API_KEY, ...; value at least 6 characters) are redacted
            wherever they appear. Defaults to ``os.environ`` at construction time.
    """

    def __init__(self, environ: Mapping[str, str] | None = None) -> None:
        env = os.environ if environ is None else environ
        values = _secret_env_values(env)
        self._env_s = [(v, f"[REDACTED:env:{n}]") for v, n in values]
        self._env_b = [(v.encode(), f"[REDACTED:env:{n}]".encode()) for v, n in values]

    @property
    def secret_env_names(self) -> list[str]:
        """Names of the environment variables whose values are redacted."""
        return sorted({marker[len("[REDACTED:env:") : -1] for _, marker in self._env_s})

    def redact(self, text: str) -> str:
        """Return ``text`` with every recognised secret replaced by a marker."""
        if not text:
            return text
        for value, marker in self._env_s:
            if value in text:
                text = text.replace(value, marker)
        for group in _COMPILED:
            if (group.pre_s and group.pre_s not in text) or group.gate_s.search(text) is None:
                continue
            for rule in group.rules:
                text = rule.pattern_s.sub(rule.repl_s, text)
        return text

    def one_line(self, text: str, limit: int | None = None) -> str:
        """``text`` as one line of an operator's or a model's view (a command in a listing).

        In this order: the whole text is redacted (a secret cut first would no longer be
        recognised, and its head would show); runs of whitespace become one space; every
        other control character is shown as a visible escape (``ESC`` as ``\\x1b``, U+202E as
        ``\\u202e``), so nothing reaches a terminal as a control; then the line is cut to
        ``limit`` characters, ending in ``...``.

        Args:
            text: Any text, e.g. a command line as the model wrote it.
            limit: Most characters of the line (at least 4); None: no cut.

        Returns:
            One line of printable text.
        """
        line = _LINE_SPACES.sub(" ", self.redact(text)).strip()
        line = _LINE_CONTROLS.sub(_visible_control, line)
        if limit is not None and len(line) > limit:
            line = line[: max(limit - 3, 1)] + "..."
        return line

    def redact_bytes(self, data: bytes) -> bytes:
        """Return ``data`` (any bytes, UTF-8 or not) with every recognised secret replaced."""
        if not data:
            return data
        for value, marker in self._env_b:
            if value in data:
                data = data.replace(value, marker)
        for group in _COMPILED:
            if (group.pre_b and group.pre_b not in data) or group.gate_b.search(data) is None:
                continue
            for rule in group.rules:
                data = rule.pattern_b.sub(rule.repl_b, data)
        return data


class StreamRedactor:
    """Redacts a byte stream that arrives in arbitrary chunks.

    Bytes are released up to the last line end (``\\n`` or ``\\r``), so a secret split across
    two chunks is still seen whole. A line longer than ``max_pending`` is released anyway, cut
    at a space where one is near the end. A private key block that spans chunks is suppressed
    up to its END line.

    Args:
        redactor: The rules to apply.
        max_pending: Most bytes held back waiting for a line end.
    """

    def __init__(self, redactor: Redactor, max_pending: int = 64 * 1024) -> None:
        self._redactor = redactor
        self._max_pending = max_pending
        self._pending = b""
        self._in_private_key = False

    def feed(self, data: bytes) -> bytes:
        """Take the next chunk; return the redacted bytes that are ready."""
        buf = self._pending + data if self._pending else data
        newline = buf.rfind(b"\n")
        cut = max(newline, buf.rfind(b"\r", newline + 1)) + 1
        if cut == 0:
            if len(buf) <= self._max_pending:
                self._pending = buf
                return b""
            space = buf.rfind(b" ", len(buf) - 4096)
            cut = space + 1 if space > 0 else len(buf)
        if cut == len(buf):
            self._pending = b""
            return self._redact(buf)
        self._pending = buf[cut:]
        return self._redact(buf[:cut])

    def flush(self) -> bytes:
        """Release everything held back (at the end of the stream), redacted."""
        buf, self._pending = self._pending, b""
        return self._redact(buf) if buf else b""

    def _redact(self, chunk: bytes) -> bytes:
        if self._in_private_key:
            end = _PEM_END.search(chunk)
            if end is None:
                return b""
            self._in_private_key = False
            chunk = chunk[end.end() :]
        if b"PRIVATE KEY" in chunk:
            begins = list(_PEM_BEGIN.finditer(chunk))
            if begins and _PEM_END.search(chunk, begins[-1].end()) is None:
                self._in_private_key = True
        return self._redactor.redact_bytes(chunk)
