"""The secret rules as data, ready to match: gitleaks' rule set (``secret_rules/gitleaks.toml``,
vendored unchanged) and codemode's own (``secret_rules/codemode.toml``), read into plain specs
(`rule_specs`: from the prebuilt ``rules.json`` when its digest matches the TOML files, else from
the TOML itself) and then into `_Rule`s that `codemode.state._redact` compiles and runs.

The standard library and ``re2`` only, like `_redact` (the background supervisor loads both
without the host).
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypedDict

import re2

from codemode._json import JsonObject

__all__ = [
    "RULES_DIR",
    "AllowSpec",
    "RuleSpec",
    "RuleSpecs",
    "load_rules",
    "rule_specs",
    "rule_specs_from_toml",
    "rules_digest",
]

RULES_DIR = Path(__file__).resolve().with_name("secret_rules")


@dataclass(frozen=True)
class _Allow:
    target: str  # "secret", "match" or "line"
    source: str | None  # the allowlist's regexes as one RE2 alternation, or None
    stopwords: tuple[bytes, ...]

    @functools.cached_property
    def regex(self) -> Any:
        """The compiled alternation (bytes), made at first use, like `_Rule.pattern`."""
        return None if self.source is None else re2.compile(self.source.encode())


@dataclass(frozen=True)
class _Rule:
    id: str
    label: str
    source: str
    prefilter: str  # what stage 1 scans for: the regex, or a cheaper pattern that matches wherever it can
    marker: bytes
    declared_group: int  # the rule's secretGroup, 0 when it names none
    keywords: tuple[bytes, ...]
    entropy: float
    allowlists: tuple[_Allow, ...]
    check: str | None
    multiline: bool  # a match may span lines: stage 2 runs on the whole text, not the hit's line
    min_length: int  # bytes any match takes (0: not known), so a shorter text needs no look

    @functools.cached_property
    def pattern(self) -> Any:
        """The compiled RE2 pattern (bytes), made at first use: compiling all ~280 rules is
        ~50 ms of a cold start, and a short text only needs the rules whose keywords it holds
        (tests/state/test_redact_rules.py compiles every rule)."""
        return re2.compile(self.source.encode())

    @functools.cached_property
    def secret_group(self) -> int:
        """The group that holds the secret: the declared one; else -1 (the first non-empty
        unnamed group) when the pattern has unnamed groups; else 0 (the whole match)."""
        if self.declared_group:
            return self.declared_group
        return -1 if self.unnamed_groups else 0

    @functools.cached_property
    def unnamed_groups(self) -> tuple[int, ...]:
        """The pattern's unnamed groups, in order (asked for on every match otherwise)."""
        named = set(self.pattern.groupindex.values())
        return tuple(i for i in range(1, self.pattern.groups + 1) if i not in named)


class AllowSpec(TypedDict):
    """One allowlist as plain data (``rules.json``)."""

    target: str
    source: str | None
    stopwords: list[str]


class RuleSpec(TypedDict):
    """One rule as plain data (``rules.json``): what `_Rule` is made from."""

    id: str
    label: str
    source: str
    prefilter: str
    declared_group: int
    keywords: list[str]
    entropy: float
    allowlists: list[AllowSpec]
    global_allowlists: bool
    check: str | None
    multiline: bool
    min_length: int


class RuleSpecs(TypedDict):
    """Every rule and gitleaks' global allowlists as plain data (``rules.json``)."""

    rules: list[RuleSpec]
    global_allowlists: list[AllowSpec]


def _allowlists(spec: list[JsonObject]) -> list[AllowSpec]:
    out: list[AllowSpec] = []
    for allow in spec:
        if allow.get("paths") and allow.get("condition", "OR").upper() == "AND":
            continue  # applies only with a file path, and output has none
        sources = allow.get("regexes", [])
        source = "|".join(f"(?:{r})" for r in sources) if sources else None
        stopwords = [w.lower() for w in allow.get("stopwords", [])]
        if source is not None or stopwords:
            out.append(
                {"target": allow.get("regexTarget", "secret"), "source": source, "stopwords": stopwords}
            )
    return out


def _min_length(source: str) -> int:
    """The fewest bytes a match of RE2 pattern ``source`` takes, as Python's own regex parser
    reads it; 0 where that parser does not read it (RE2-only syntax) or cannot bound it.
    POSIX classes (``[[:alnum:]]``) it reads as a class and a ``]``: one byte too many."""
    if "[:" in source:
        return 0
    try:
        low, _ = re._parser.parse(source.encode()).getwidth()  # type: ignore[attr-defined]
    except Exception:  # any syntax it does not know: no bound
        return 0
    return int(low) if 0 <= low < 1 << 20 else 0


def _spec(
    spec: JsonObject, label: str, global_allow: bool, multiline: bool, prefilter: str | None
) -> RuleSpec:
    source: str = spec["regex"]
    own_prefilter: str = spec.get("prefilter", source)
    return {
        "id": spec["id"],
        "label": label,
        "source": source,
        "prefilter": prefilter or own_prefilter,
        "declared_group": int(spec.get("secretGroup", 0)),
        "keywords": [k.lower() for k in spec.get("keywords", [])],
        "entropy": float(spec.get("entropy", 0.0)),
        "allowlists": _allowlists(spec.get("allowlists", [])),
        "global_allowlists": global_allow,  # gitleaks' rules also take its global allowlist
        "check": spec.get("check"),
        "multiline": multiline,
        "min_length": _min_length(source),
    }


def rule_specs_from_toml(rules_dir: Path = RULES_DIR) -> RuleSpecs:
    """Every rule as plain data, gitleaks' first (less those codemode.toml turns off), then
    codemode's, and gitleaks' global allowlists: what ``secret_rules/rules.json`` holds
    (scripts/build_secret_rules.py)."""
    with (rules_dir / "gitleaks.toml").open("rb") as f:
        gitleaks = tomllib.load(f)
    with (rules_dir / "codemode.toml").open("rb") as f:
        ours = tomllib.load(f)
    changes = ours.get("gitleaks", {})
    disabled = set(changes.get("disabled", []))
    labels: dict[str, str] = changes.get("labels", {})
    multiline = set(changes.get("multiline", []))
    prefilters: dict[str, str] = changes.get("prefilters", {})
    specs = [
        _spec(
            spec,
            labels.get(spec["id"], spec["id"]),
            True,
            spec["id"] in multiline,
            prefilters.get(spec["id"]),
        )
        for spec in gitleaks["rules"]
        if "regex" in spec and spec["id"] not in disabled
    ]
    specs += [
        _spec(spec, spec.get("label", spec["id"]), False, bool(spec.get("multiline", False)), None)
        for spec in ours["rules"]
    ]
    return {"rules": specs, "global_allowlists": _allowlists([gitleaks.get("allowlist", {})])}


def rules_digest(rules_dir: Path = RULES_DIR) -> str:
    """What ``rules.json`` was built from: the SHA-256 of both rule files."""
    digest = hashlib.sha256()
    for name in ("gitleaks.toml", "codemode.toml"):
        digest.update((rules_dir / name).read_bytes())
    return digest.hexdigest()


def rule_specs(rules_dir: Path = RULES_DIR) -> RuleSpecs:
    """The rules as plain data: from ``rules.json`` when it was built from the rule files as
    they are (JSON reads in ~0.5 ms, the TOML in ~10 ms of every cold start), else from them."""
    try:
        cached = json.loads((rules_dir / "rules.json").read_text("utf-8"))
        if cached.pop("digest") == rules_digest(rules_dir):
            specs: RuleSpecs = cached
            return specs
    except (OSError, ValueError, KeyError, TypeError):
        pass
    return rule_specs_from_toml(rules_dir)


def load_rules(rules_dir: Path = RULES_DIR) -> list[_Rule]:
    """Every rule (see `rule_specs`), ready to match."""
    specs = rule_specs(rules_dir)

    def allowlists(items: list[AllowSpec]) -> tuple[_Allow, ...]:
        return tuple(
            _Allow(a["target"], a["source"], tuple(w.encode() for w in a["stopwords"])) for a in items
        )

    shared = allowlists(specs["global_allowlists"])  # one compiled copy for every rule
    return [
        _Rule(
            id=spec["id"],
            label=spec["label"],
            source=spec["source"],
            prefilter=spec["prefilter"],
            marker=f"[REDACTED:{spec['label']}]".encode(),
            declared_group=spec["declared_group"],
            keywords=tuple(k.encode() for k in spec["keywords"]),
            entropy=spec["entropy"],
            allowlists=allowlists(spec["allowlists"]) + (shared if spec["global_allowlists"] else ()),
            check=spec["check"],
            multiline=spec["multiline"],
            min_length=spec["min_length"],
        )
        for spec in specs["rules"]
    ]
