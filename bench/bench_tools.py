"""searchTools over 5,000 registered tools, and the run_code description's size for them.

Target: a search <= 5 ms, the description < 2,000 tokens. The baseline is scoring every tool
per query (what the index replaced), run in the same process.

    PYTHONPATH=. python bench/bench_tools.py
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "tools"))
from test_search import reference

from codemode import Host

WORDS = "alpha beta gamma delta epsilon zeta theta kappa lambda sigma".split()
QUERIES = ["gamma records", "svc42", "cluster kappa lookup", "lookup", "sig", "service 499"]


async def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "ws").mkdir()
        async with Host(workspace=Path(tmp) / "ws", state_dir=Path(tmp) / "state") as host:
            for i in range(5000):
                host.add_tool(
                    lambda query="": query,
                    name=f"svc{i // 10}_{WORDS[i % 10]}_{i}",
                    description=f"Look up {WORDS[i % 10]} records in service {i // 10} of the {WORDS[(i * 7) % 10]} cluster.",
                )
            start = time.perf_counter()
            host.search_tools("warm")
            first = time.perf_counter() - start
            indexed, scanned = [], []
            for query in QUERIES * 5:
                start = time.perf_counter()
                host.search_tools(query)
                indexed.append(time.perf_counter() - start)
            for query in QUERIES:
                start = time.perf_counter()
                reference(host.registry, query, 10)
                scanned.append(time.perf_counter() - start)
            description = host.run_code_description()
            tokens = host.counter.count(description)
    fast, slow = statistics.median(indexed), statistics.median(scanned)
    print(f"{len(host.registry)} tools")
    print(
        f"searchTools median {fast * 1e3:6.2f} ms   (target <= 5 ms; scoring every tool: {slow * 1e3:.1f} ms, {slow / fast:.0f}x)"
    )
    print(f"first search after the tools changed (builds the index): {first * 1e3:.1f} ms")
    exact = "" if host.counter.exact else " (byte counter: no tiktoken cache, an upper bound)"
    print(f"run_code description: {tokens} tokens{exact}, {len(description)} chars   (target < 2,000)")


if __name__ == "__main__":
    anyio.run(main)
