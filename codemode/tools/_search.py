"""Ranking tools for ``searchTools``: an inverted index built once per change of the tools.

A tool's words are those of its name, its argument names and its description (camelCase and
snake_case split). A query term scores, weighted by its rarity (idf): the tool's whole name
(10), a word of the name (5) or a word sharing a prefix with it either way (3), an argument name
(2), a word of the description (1.5) or one starting with it (0.75). Scoring walks only the
postings of the query's terms (and of the words they prefix), so a query over 5,000 tools
costs well under a millisecond instead of scanning every tool (85-95 ms before).

What a program passes is bounded (`check_query`, `check_name`): a query of 1 MB once took the
host 120 s of CPU (every prefix of a long word was sliced and looked up). Prefixes are now
looked up only as long as the longest word of a name, so the cost is linear in the query.
"""

from __future__ import annotations

import bisect
import heapq
import math
import re
from collections.abc import Iterable, Mapping

from codemode.errors import ErrorCode, ToolError
from codemode.tools._model import Tool

__all__ = [
    "MAX_NAME_CHARS",
    "MAX_QUERY_CHARS",
    "SearchIndex",
    "argument_names",
    "check_name",
    "check_query",
    "words",
]

MAX_QUERY_CHARS = 1_000
"""Longest ``searchTools`` query accepted (a few words are what ranks well)."""
MAX_NAME_CHARS = 256
"""Longest tool name ``describeTool`` looks up or suggests close names for (MCP names are at
most 128 characters; a namespace adds its own)."""

_WORD = re.compile(r"[a-z0-9]+")


def words(text: str) -> list[str]:
    """The lowercase words of a text; camelCase and snake_case split ("readFile" -> read, file)."""
    spaced = re.sub(r"([a-z0-9])([A-Z])", r"\1 \2", text)
    return _WORD.findall(spaced.lower())


def argument_names(schema: Mapping[str, object]) -> list[str]:
    """The argument names of an input schema: its properties, or those of each object of a union
    at its root (bash: one object per action), each name once."""
    defs = schema.get("$defs")
    options = schema.get("anyOf") or schema.get("oneOf")
    names: dict[str, None] = dict.fromkeys(_property_names(schema))
    for option in options if isinstance(options, list) else []:
        if isinstance(option, dict) and isinstance(option.get("$ref"), str) and isinstance(defs, dict):
            option = defs.get(option["$ref"].rsplit("/", 1)[-1], {})
        if isinstance(option, dict):
            names.update(dict.fromkeys(_property_names(option)))
    return list(names)


def _property_names(schema: Mapping[str, object]) -> list[str]:
    properties = schema.get("properties")
    return list(properties) if isinstance(properties, dict) else []


def check_query(query: str) -> None:
    """Refuse a ``searchTools`` query longer than `MAX_QUERY_CHARS`.

    Raises:
        ToolError: Too long (code ``invalid_arguments``), saying the limit and what to pass.
    """
    if len(query) > MAX_QUERY_CHARS:
        raise ToolError(
            f"searchTools: the query has {len(query):,} characters; at most {MAX_QUERY_CHARS:,} are "
            'accepted. Search with a few words, e.g. searchTools("read file").',
            code=ErrorCode.INVALID_ARGUMENTS,
        )


def check_name(name: str) -> None:
    """Refuse a tool name longer than `MAX_NAME_CHARS` (no tool has one).

    Raises:
        ToolError: Too long (code ``unknown_tool``), saying the limit and what to do.
    """
    if len(name) > MAX_NAME_CHARS:
        raise ToolError(
            f"Unknown tool {name[:40]!r}... ({len(name):,} characters): tool names are at most "
            f'{MAX_NAME_CHARS} characters. Use searchTools("<what you need>") to find tools and '
            "describeTool(name) with a name it returned.",
            code=ErrorCode.UNKNOWN_TOOL,
        )


def _add(index: dict[str, set[str]], word: str, name: str) -> None:
    index.setdefault(word, set()).add(name)


class SearchIndex:
    """Postings of the tools' words, per field, with their document frequencies."""

    def __init__(self, tools: Iterable[Tool]) -> None:
        self._by_name: dict[str, str] = {}  # lowercased whole name -> name
        self._name: dict[str, set[str]] = {}
        self._params: dict[str, set[str]] = {}
        self._desc: dict[str, set[str]] = {}
        self._freq: dict[str, int] = {}
        count = 0
        for t in tools:
            count += 1
            self._by_name[t.name.lower()] = t.name
            name_words = set(words(t.name))
            param_words = {w for p in argument_names(t.input_schema) for w in words(p)}
            desc_words = set(words(t.description))
            for w in name_words:
                _add(self._name, w, t.name)
            for w in param_words:
                _add(self._params, w, t.name)
            for w in desc_words:
                _add(self._desc, w, t.name)
            for w in name_words | param_words | desc_words:
                self._freq[w] = self._freq.get(w, 0) + 1
        self._count = max(count, 1)
        self._name_vocab = sorted(self._name)
        self._longest_name_word = max(map(len, self._name), default=0)
        self._desc_vocab = sorted(self._desc)

    @staticmethod
    def _starting_with(vocab: list[str], term: str) -> list[str]:
        start = bisect.bisect_left(vocab, term)
        end = bisect.bisect_left(vocab, term + "\x7f")
        return vocab[start:end]

    def search(self, query: str, limit: int) -> list[str]:
        """The names of the best ``limit`` tools for ``query``, best first (ties by name)."""
        scores: dict[str, float] = {}

        def add(names: Iterable[str], points: float) -> None:
            for name in names:
                scores[name] = scores.get(name, 0.0) + points

        for term in words(query):
            idf = 1.0 + math.log(self._count / (1 + self._freq.get(term, 0)) + 1)
            whole = self._by_name.get(term)
            if whole is not None:
                add((whole,), 10 * idf)
            exact = self._name.get(term, set())
            add(exact, 5 * idf)
            # A name word that starts with the term, or that the term starts with (words of 3+).
            near = {w for w in self._starting_with(self._name_vocab, term) if len(w) > 2}
            longest = min(len(term), self._longest_name_word + 1)  # (no longer prefix can be a name word)
            near.update(term[:i] for i in range(3, longest) if term[:i] in self._name)
            near.discard(term)
            add({n for w in near for n in self._name[w]} - exact, 3 * idf)
            add(self._params.get(term, ()), 2 * idf)
            described = self._desc.get(term, set())
            add(described, 1.5 * idf)
            if len(term) > 2:
                longer = {
                    n for w in self._starting_with(self._desc_vocab, term) if w != term for n in self._desc[w]
                }
                add(longer - described, 0.75 * idf)
        best = heapq.nsmallest(limit, scores.items(), key=lambda item: (-item[1], item[0]))
        return [name for name, _ in best]
