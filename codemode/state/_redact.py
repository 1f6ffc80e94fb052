"""Secret redaction for command output, archived text and logs.

The rules are data: gitleaks' rule set (``secret_rules/gitleaks.toml``, vendored unchanged by
``scripts/vendor_gitleaks_rules.py``) and codemode's own (``secret_rules/codemode.toml``: what
command output shows that gitleaks leaves out, and which gitleaks rules are turned off or
relabelled). Every byte of command output passes through here, so matching is in two stages:

1. One Hyperscan database holds every rule's pattern and scans the text once (several hundred
   MB/s whatever the number of rules); it says which rules match somewhere.
2. Only those rules run again with RE2 (the syntax gitleaks writes its rules in), which finds
   each match and its secret group; a match is kept when the rule's keyword is on its line, its
   secret has the rule's entropy, no allowlist names it, and its format check (code, for a
   format that needs it: base64 of a PEM key) passes.

Once a value is a secret somewhere in a text, it is one everywhere in it: a value found by its
context (``password = 'X'``), which its rule would not find standing alone, is then searched for
(one Hyperscan literal pass) and every other occurrence replaced too (``echo X``); a
`StreamRedactor` remembers such values for its later chunks. A self-identifying token (``ghp_...``)
needs no search: its rule finds it wherever it is.

Ordinary output (commit hashes, UUIDs, sha256 sums, base64 blobs, paths, lockfiles) matches no
rule and comes back as it was, without a copy.

A replacement looks like ``[REDACTED:github-token]``; values of secret-named environment
variables become ``[REDACTED:env:NAME]`` (the name is not secret, the value is). Redacting
already-redacted text changes nothing: a match that touches a marker is dropped.

`Redactor.one_line` is the one way text (a command line) becomes a line of an operator's or a
model's view (``codemode ps``, ``bash list``, notifications): redacted whole before it is cut,
with terminal controls made visible.

This file is also loaded by path, without the ``codemode`` package (the background supervisor
does so for its notification line): it imports only the standard library, ``hyperscan`` and
``re2``, and reads its rules from the folder beside it.
"""

from __future__ import annotations

import base64
import binascii
import math
import os
import re
import threading
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import hyperscan

from codemode.state._secret_rules import _Rule, load_rules

__all__ = ["Redactor", "redact_json"]

_MARKER = re.compile(rb"\[REDACTED:[^\]\n]{1,200}\]")


_C_LOG2 = [c * math.log2(c) if c else 0.0 for c in range(1025)]  # c * log2(c), looked up


def _entropy(data: bytes) -> float:
    """Shannon entropy in bits per byte: log2(n) - sum(c * log2(c)) / n over byte counts c."""
    n = len(data)
    if not n:
        return 0.0
    counts = Counter(data).values()
    if n < len(_C_LOG2):
        return math.log2(n) - sum(map(_C_LOG2.__getitem__, counts)) / n
    return math.log2(n) - sum(c * math.log2(c) for c in counts) / n


def _private_key_b64(secret: bytes) -> bool:
    """Whether a base64 blob (wrapped or not) decodes to a PEM private key."""
    head = re.sub(rb"[^A-Za-z0-9+/=]", b"", secret[:400])
    head = head[: len(head) // 4 * 4]
    try:
        return b"PRIVATE KEY" in base64.b64decode(head)[:120]
    except (binascii.Error, ValueError):
        return False


_CHECKS = {"private-key-b64": _private_key_b64}


class _Engine:
    """The compiled rules: RE2 patterns for stage 2, and for stage 1 one Hyperscan database,
    compiled when texts first need it (about half a second, once per process), on a thread
    of its own: Hyperscan releases the GIL while it compiles, so the event loop is not held
    up (it was, for 0.6 s, by the first bash list that redacted its lines)."""

    def __init__(self, rules: list[_Rule]) -> None:
        self.rules = rules
        self._database: hyperscan.Database | None = None
        self._short_texts = 0
        self._lock = threading.Lock()  # held for the whole compile
        self._start_lock = threading.Lock()  # held only to start it (never waits for it)
        self._compiling = False
        self._local = threading.local()

    def compile_soon(self) -> None:
        """Start compiling the database on a thread of its own (once); returns at once."""
        with self._start_lock:
            if self._compiling or self._database is not None:
                return
            self._compiling = True
        threading.Thread(target=self._compiled, name="codemode-redact-rules", daemon=True).start()

    def matches(self, data: bytes) -> list[tuple[int, int]]:
        """(rule index, end offset) of every match of every rule's prefilter in ``data`` (stage 1).

        Before the database exists, a short text (a command line, a notification) is not worth
        compiling it for: every rule is taken to match at the end of every line, so stage 2 runs
        each rule on each line (a few milliseconds a line). The result is the same (a prefilter
        matches wherever its rule does); only the cost differs, so a process that shows a few
        short lines (the background supervisor's notification) never compiles the database, and
        one that shows many starts compiling it (`compile_soon`) after the first few and goes on
        rule by rule until it is ready. A long text waits for it.
        """
        if self._database is None and len(data) <= _SHORT_TEXT:
            self._short_texts += 1
            if self._short_texts > _SHORT_TEXTS:
                self.compile_soon()
            ends = [i for i in range(len(data)) if data[i] == 10] + [len(data)]
            # A rule with keywords keeps a match only with one of them on its line (_keep):
            # where none is in the text, the rule cannot find anything here; nor can a rule
            # whose matches are longer than the whole text.
            lowered = data.lower()
            size = len(data)
            possible = [
                index
                for index, rule in enumerate(self.rules)
                if rule.min_length <= size and (not rule.keywords or any(k in lowered for k in rule.keywords))
            ]
            return [(index, end) for index in possible for end in ends]
        database = self._compiled()
        scratch = getattr(self._local, "scratch", None)
        if scratch is None:
            scratch = self._local.scratch = hyperscan.Scratch(database)
        hits: list[tuple[int, int]] = []
        database.scan(data, match_event_handler=_collect, context=hits, scratch=scratch)
        return hits

    def _compiled(self) -> hyperscan.Database:
        with self._lock:
            if self._database is None:
                database = hyperscan.Database(mode=hyperscan.HS_MODE_BLOCK)
                database.compile(
                    expressions=[r.prefilter.encode() for r in self.rules],
                    ids=list(range(len(self.rules))),
                    elements=len(self.rules),
                    flags=[0] * len(self.rules),
                )
                self._database = database
                _return_compile_scratch()
            return self._database

    def spans(
        self, data: bytes, hits: list[tuple[int, int]], contextual: dict[bytes, bytes] | None = None
    ) -> list[tuple[int, int, bytes]]:
        """(start, end, marker) of every secret the rules find where stage 1 saw them (stage 2):
        on the line of each hit, or on the whole text for a rule whose matches span lines.

        ``contextual``, when given, receives each secret value found (and its marker) that its
        rule would not find standing alone (a password after ``password =``, unlike a ``ghp_``
        token): its other occurrences in the text are found only by searching for it."""
        found: list[tuple[int, int, bytes]] = []
        done_to: dict[int, int] = {}
        alone: set[bytes] = set()
        for index, end in sorted(hits):
            if end <= done_to.get(index, -1):
                continue
            rule = self.rules[index]
            if rule.multiline:
                start, stop = 0, len(data)
            else:
                start = data.rfind(b"\n", 0, max(end - 1, 0)) + 1
                stop = data.find(b"\n", end)
                stop = len(data) if stop < 0 else stop
            done_to[index] = stop
            region = data if (start, stop) == (0, len(data)) else data[start:stop]
            for match in rule.pattern.finditer(region):
                span = _secret_span(rule, match)
                if span is not None and _keep(rule, region, match, span):
                    found.append((start + span[0], start + span[1], rule.marker))
                    if contextual is not None and _MIN_REPEAT <= span[1] - span[0] <= _MAX_REPEAT:
                        secret = region[span[0] : span[1]]
                        if secret not in contextual and secret not in alone:
                            if _found_alone(rule, secret):
                                alone.add(secret)
                            else:
                                contextual[secret] = rule.marker
        return found


def _collect(rule_id: int, start: int, end: int, flags: int, hits: object) -> None:
    assert isinstance(hits, list)
    hits.append((rule_id, end))


def _secret_span(rule: _Rule, match: Any) -> tuple[int, int] | None:
    if rule.secret_group > 0:
        span: tuple[int, int] = match.span(rule.secret_group)
        return span if span[0] >= 0 and span[1] > span[0] else None
    if rule.secret_group < 0:
        for i in rule.unnamed_groups:
            span = match.span(i)
            if span[0] >= 0 and span[1] > span[0]:
                return span
    whole: tuple[int, int] = match.span()
    return whole if whole[1] > whole[0] else None


def _found_alone(rule: _Rule, secret: bytes) -> bool:
    """Whether ``rule`` finds ``secret`` as a text of its own, whole: then it finds it wherever
    else it is written (no rule that judges by context, its line or its match, passes here)."""
    if any(allow.target != "secret" for allow in rule.allowlists):
        return False
    whole = (0, len(secret))
    return any(
        _secret_span(rule, match) == whole and _keep(rule, secret, match, whole)
        for match in rule.pattern.finditer(secret)
    )


def _line(data: bytes, start: int, end: int) -> bytes:
    """The line(s) of ``data`` that hold ``data[start:end]``."""
    stop = data.find(b"\n", end)
    return data[data.rfind(b"\n", 0, start) + 1 : len(data) if stop < 0 else stop]


def _keep(rule: _Rule, data: bytes, match: Any, span: tuple[int, int]) -> bool:
    secret = data[span[0] : span[1]]
    line = None
    if rule.keywords:
        line = _line(data, *match.span()).lower()
        if not any(k in line for k in rule.keywords):
            return False
    if rule.entropy and _entropy(secret) <= rule.entropy:
        return False
    if rule.check is not None and not _CHECKS[rule.check](secret):
        return False
    lowered = secret.lower()
    for allow in rule.allowlists:
        if any(word in lowered for word in allow.stopwords):
            return False
        if allow.regex is not None:
            if allow.target == "match":
                target = match.group()
            elif allow.target == "line":
                target = line if line is not None else _line(data, *match.span())
            else:
                target = secret
            if allow.regex.search(target):
                return False
    return True


_SHORT_TEXT = 512  # bytes; see _Engine.matches
_SHORT_TEXTS = 32  # short texts checked rule by rule before the database's compile starts
_ENGINE: _Engine | None = None
_ENGINE_LOCK = threading.Lock()


def _return_compile_scratch() -> None:
    """Give the heap pages hyperscan's compile freed back to the system. glibc keeps them in
    the compiling thread's arena: a host that compiled the database on a thread of its own
    (`compile_rules_soon`) held ~20 MiB more RSS after ten small programs than one that never
    compiled it, ~15 MiB of it free pages that ``malloc_trim(0)`` returns. Not glibc: nothing."""
    import ctypes  # only a process that compiles the database pays for the import

    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):  # another allocator: it returns memory its own way
        return
    trim(0)


def compile_rules_soon() -> None:
    """Load the rules and compile their database on a thread of their own, for a host that
    will serve for a while (`Host` with ``preload_tokenizer``); returns at once."""
    threading.Thread(
        target=lambda: _engine().compile_soon(), name="codemode-redact-load", daemon=True
    ).start()


def _engine() -> _Engine:
    """The rules, loaded once per process (on first use)."""
    global _ENGINE
    if _ENGINE is None:
        with _ENGINE_LOCK:
            if _ENGINE is None:
                _ENGINE = _Engine(load_rules())
    return _ENGINE


def _replace(data: bytes, spans: list[tuple[int, int, bytes]]) -> bytes:
    """``data`` with each span replaced by its marker; overlapping spans merge (the first
    one's marker names them); a span that touches an existing marker is left alone."""
    merged = _merge(data, spans)
    return _cut_out(data, merged, 0, len(data)) if merged else data


def _merge(data: bytes, spans: list[tuple[int, int, bytes]]) -> list[tuple[int, int, bytes]]:
    """``spans`` sorted, overlapping ones merged (the first one's marker names them), less
    those touching a marker already in ``data``."""
    if b"[REDACTED:" in data:
        markers = [m.span() for m in _MARKER.finditer(data)]
        spans = [s for s in spans if not any(s[0] < m_end and m_start < s[1] for m_start, m_end in markers)]
    if not spans:
        return []
    spans.sort(key=lambda s: (s[0], -s[1]))
    merged: list[tuple[int, int, bytes]] = []
    cur_start, cur_end, cur_marker = spans[0]
    for start, end, marker in spans[1:]:
        if start < cur_end:
            cur_end = max(cur_end, end)
            continue
        merged.append((cur_start, cur_end, cur_marker))
        cur_start, cur_end, cur_marker = start, end, marker
    merged.append((cur_start, cur_end, cur_marker))
    return merged


def _cut_out(data: bytes, merged: list[tuple[int, int, bytes]], begin: int, end: int) -> bytes:
    """``data[begin:end]`` with each of the ``merged`` spans replaced by its marker; a span
    that crosses ``begin`` or ``end`` shows as its marker too (its part inside is never bare)."""
    out: list[bytes] = []
    pos = begin
    for start, stop, marker in merged:
        if stop <= pos:
            continue
        if start >= end:
            break
        out += (data[pos:start] if start > pos else b"", marker)
        pos = stop
    if pos < end:
        out.append(data[pos:end])
    return b"".join(out)


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

    def redact(self, text: str, known: dict[bytes, bytes] | None = None) -> str:
        """Return ``text`` with every recognised secret replaced by a marker.

        ``known``: secret values found earlier in the same result (another of its blocks) and
        their markers, replaced here too wherever they occur; the values found here are added
        to it (as `redact_bytes`). To redact blocks of one result, use `redact_together`."""
        if not text:
            return text
        for value, marker in self._env_s:
            if value in text:
                text = text.replace(value, marker)
        data = text.encode("utf-8", "surrogatepass")
        redacted = _redact_rules(data, known)
        return text if redacted is data else redacted.decode("utf-8", "surrogatepass")

    def redact_together(self, texts: Sequence[str], known: dict[bytes, bytes] | None = None) -> list[str]:
        """The blocks of one result (stdout and stderr, an output's head and tail), each
        redacted, a secret value found by its context in one (``password = 'X'``) cut in every
        other too, before or after it.

        ``known``: the values found, added to it (to redact more of the same result with)."""
        known = {} if known is None else known
        done: list[tuple[str, int]] = []  # each block redacted, and how many values were known after it
        for text in texts:
            done.append((self.redact(text, known), len(known)))
        # A block done before a later one found a value is done again, knowing it.
        return [
            redacted if seen == len(known) else self.redact(text, dict(known))
            for text, (redacted, seen) in zip(texts, done, strict=True)
        ]

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

    def redact_bytes(self, data: bytes, known: dict[bytes, bytes] | None = None) -> bytes:
        """Return ``data`` (any bytes, UTF-8 or not) with every recognised secret replaced.

        ``known``: secret values found earlier in the same stream (`StreamRedactor`) and their
        markers, replaced here too wherever they occur; the values found here are added to it."""
        if not data:
            return data
        for value, marker in self._env_b:
            if value in data:
                data = data.replace(value, marker)
        return _redact_rules(data, known)

    def redact_range(
        self, data: bytes, begin: int, end: int, known: dict[bytes, bytes] | None = None
    ) -> bytes:
        """``data[begin:end]`` redacted with all of ``data`` as its context: a secret found by
        what precedes ``begin`` (``password = '`` before a page's start) or crossing ``begin``
        or ``end`` shows as its marker, never in part. ``known`` as for `redact_bytes`."""
        return _cut_out(data, self.secret_spans(data, known), begin, end)

    def secret_spans(
        self, data: bytes, known: dict[bytes, bytes] | None = None
    ) -> list[tuple[int, int, bytes]]:
        """(start, end, marker) of every secret in ``data``, sorted, overlaps merged (what
        `redact_bytes` replaces); the values found are added to ``known``."""
        spans = _rule_spans(data, known)
        for value, marker in self._env_b:
            at = data.find(value)
            while at >= 0:
                spans.append((at, at + len(value), marker))
                at = data.find(value, at + 1)
        return _merge(data, spans)


def _redact_rules(data: bytes, known: dict[bytes, bytes] | None = None) -> bytes:
    """``data`` with what the rules find replaced, and every other occurrence of each value
    they find (or of a value in ``known``, secrets found earlier in the same stream); ``data``
    itself when there is nothing to replace. Values the rules find are added to ``known``.

    A value its rule finds standing alone (a ``ghp_`` token) is not searched for: the rule finds
    it wherever it is; only the others (a password found by its ``password =``) are."""
    spans = _rule_spans(data, known)
    return _replace(data, spans) if spans else data


def _rule_spans(data: bytes, known: dict[bytes, bytes] | None = None) -> list[tuple[int, int, bytes]]:
    """(start, end, marker) of what `_redact_rules` replaces in ``data`` (unmerged)."""
    engine = _engine()
    hits = engine.matches(data)
    markers: dict[bytes, bytes] = {}  # the values to search for: see `_Engine.spans`
    spans = engine.spans(data, hits, markers) if hits else []
    if not spans and not known:
        return spans
    if known is not None:
        for value, marker in known.items():
            markers.setdefault(value, marker)
        for value, marker in markers.items():
            if len(known) >= _MAX_KNOWN:
                break
            known.setdefault(value, marker)
    spans += _occurrences(data, markers)
    return spans


def context_start(before: bytes) -> int:
    """Where, in the bytes ``before`` a piece of text, redacting that piece must start for
    every secret in it to be seen whole: the start of the line the piece begins in, or the
    start of a private key block still open at the piece (a page starting inside the key)."""
    begin = before.rfind(b"-----BEGIN")
    if begin >= 0 and b"PRIVATE KEY" in before[begin:]:
        opened = [m.start() for m in _PEM_BEGIN.finditer(before, begin)]
        if opened and _PEM_END.search(before, opened[-1]) is None:
            return max(before.rfind(b"\n", 0, opened[-1]), before.rfind(b"\r", 0, opened[-1])) + 1
    return max(before.rfind(b"\n"), before.rfind(b"\r")) + 1


_MIN_REPEAT = 6  # bytes: a shorter secret value is not searched for elsewhere in the text
_MAX_REPEAT = 4096  # bytes: a longer one (a key block) is found by its rule wherever it is
_MAX_KNOWN = 1024  # secret values a stream remembers for its later chunks
_FEW_VALUES = 4  # up to this many values are searched for one by one; more in one literal pass


def _occurrences(data: bytes, markers: dict[bytes, bytes]) -> list[tuple[int, int, bytes]]:
    """(start, end, marker) of every occurrence in ``data`` of each value of ``markers``: once a
    value is a secret somewhere in a text, it is one everywhere in it (``password = 'X' | 'X'``)."""
    found: list[tuple[int, int, bytes]] = []
    values = list(markers)  # the same set chunk after chunk: its database is kept
    if len(values) <= _FEW_VALUES:
        for value in values:
            at = data.find(value)
            while at >= 0:
                found.append((at, at + len(value), markers[value]))
                at = data.find(value, at + 1)
        return found
    values.sort()
    database, scratch = _literal_database(tuple(values))

    def on_match(index: int, start: int, end: int, flags: int, context: object) -> None:
        value = values[index]
        found.append((end - len(value), end, markers[value]))

    database.scan(data, match_event_handler=on_match, scratch=scratch)
    return found


_LITERALS = threading.local()  # per thread: the last literal databases made, and their scratch
_LITERAL_CACHE = 8


def _literal_database(values: tuple[bytes, ...]) -> tuple[hyperscan.Database, hyperscan.Scratch]:
    """A Hyperscan database of ``values`` as literals, and a scratch for it, kept for the next
    call with the same values: a stream that knows a few secrets looks for the same ones in
    every chunk (compiling them each time cost 40 times the scan)."""
    cache: dict[tuple[bytes, ...], tuple[hyperscan.Database, hyperscan.Scratch]] | None
    cache = getattr(_LITERALS, "cache", None)
    if cache is None:
        cache = _LITERALS.cache = {}
    made = cache.get(values)
    if made is None:
        database = hyperscan.Database(mode=hyperscan.HS_MODE_BLOCK)
        database.compile(
            expressions=list(values),
            ids=list(range(len(values))),
            elements=len(values),
            flags=[0] * len(values),  # a literal's start is its end less its length: no SOM to track
            literal=True,
        )
        made = (database, hyperscan.Scratch(database))
        if len(cache) >= _LITERAL_CACHE:
            del cache[next(iter(cache))]
        cache[values] = made
    return made


def redact_json(value: Any, redact: Callable[[str], str]) -> Any:
    """Redact every string inside a JSON value (structured data leaving the host) with
    ``redact`` (a `Redactor`'s ``redact``, or a chain of them)."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, list):
        return [redact_json(v, redact) for v in value]
    if isinstance(value, dict):
        return {k: redact_json(v, redact) for k, v in value.items()}
    return value
