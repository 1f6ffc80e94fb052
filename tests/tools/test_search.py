"""searchTools' index ranks exactly as scoring every tool would (the reference below is the
scan it replaced), and stays current as tools come and go."""

from __future__ import annotations

import math
import random

from codemode.tools import ToolRegistry, make_tool
from codemode.tools._search import argument_names, words

WORDS = "read write file files git status commit deploy service logs query record records user users".split()


def reference(registry: ToolRegistry, query: str, limit: int) -> list[str]:
    """Score every tool (the ranking's definition)."""
    tools = list(registry)
    fields = {
        t.name: (
            words(t.name),
            [w for p in argument_names(t.input_schema) for w in words(p)],
            words(t.description),
        )
        for t in tools
    }
    freq: dict[str, int] = {}
    for name_words, param_words, desc_words in fields.values():
        for w in set(name_words) | set(param_words) | set(desc_words):
            freq[w] = freq.get(w, 0) + 1
    scored = []
    for t in tools:
        name_words, param_words, desc_words = fields[t.name]
        score = 0.0
        for term in words(query):
            idf = 1.0 + math.log(len(tools) / (1 + freq.get(term, 0)) + 1)
            if term == t.name.lower():
                score += 10 * idf
            if term in name_words:
                score += 5 * idf
            elif any(w.startswith(term) or term.startswith(w) for w in name_words if len(w) > 2):
                score += 3 * idf
            if term in param_words:
                score += 2 * idf
            if term in desc_words:
                score += 1.5 * idf
            elif any(w.startswith(term) for w in desc_words if len(term) > 2):
                score += 0.75 * idf
        if score > 0:
            scored.append((-score, t.name))
    return [name for _, name in sorted(scored)[:limit]]


def _registry(rng: random.Random, n: int) -> ToolRegistry:
    registry = ToolRegistry()
    for i in range(n):
        name = "_".join(rng.sample(WORDS, 2)) + f"_{i}"
        params = rng.sample(WORDS, 2)
        namespace: dict[str, object] = {}
        exec(
            f"def {name}({params[0]}: str = '', {params[1]}Count: int = 0) -> str:\n    return ''", namespace
        )
        fn = namespace[name]
        fn.__doc__ = " ".join(rng.choices(WORDS, k=8)).capitalize() + "."  # type: ignore[attr-defined]
        registry.add(make_tool(fn))  # type: ignore[arg-type]
    return registry


def test_the_index_ranks_as_scoring_every_tool_does() -> None:
    rng = random.Random(7)
    registry = _registry(rng, 300)
    queries = ["git status", "records", "rec", "deploy service logs", "userscount", "filesystem", "x"]
    queries += [" ".join(rng.sample(WORDS, 2)) for _ in range(30)] + [w[:3] for w in WORDS]
    for query in queries:
        assert [r["name"] for r in registry.search(query, limit=10)] == reference(registry, query, 10), query


def test_the_index_follows_tools_added_and_removed() -> None:
    registry = _registry(random.Random(3), 20)
    assert registry.search("zebra") == []

    def zebra_lookup(stripes: int = 0) -> str:
        """Find a zebra."""
        return ""

    registry.add(make_tool(zebra_lookup))
    assert [r["name"] for r in registry.search("zebra")] == ["zebra_lookup"]
    registry.remove("zebra_lookup")
    assert registry.search("zebra") == []
