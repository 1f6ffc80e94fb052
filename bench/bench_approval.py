"""The approval round trip: a Promise.all of 32 write_file calls with an approval callback that
answers at once, against the same program on a host without one (same run, rotating order).

    PYTHONPATH=. python bench/bench_approval.py [N]
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

import anyio

from codemode import ApprovalRequest, Decision, Host

PROGRAM = "await Promise.all(Array.from({length: 32}, (_, i) => tools.write_file({path: `f${i}.txt`, content: 'x', overwrite: true})));"


async def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 30
    batches: list[int] = []

    async def approve(requests: list[ApprovalRequest]) -> list[Decision]:
        batches.append(len(requests))
        return [Decision.allow() for _ in requests]

    with tempfile.TemporaryDirectory() as tmp:
        hosts = {}
        for name, callback in (("no callback", None), ("immediate callback", approve)):
            ws = Path(tmp, name.replace(" ", "-"))
            ws.mkdir()
            hosts[name] = Host(workspace=ws, state_dir=Path(tmp, "state-" + ws.name), approve=callback)
            await hosts[name].open()
        times: dict[str, list[float]] = {name: [] for name in hosts}
        for round_ in range(n + 2):
            for name in list(hosts)[:: 1 if round_ % 2 else -1]:
                start = time.perf_counter()
                result = await hosts[name].run_code(PROGRAM)
                assert result.ok, result.text
                if round_ >= 2:  # warm-up rounds
                    times[name].append(time.perf_counter() - start)
        for host in hosts.values():
            await host.aclose()
    base = statistics.median(times["no callback"])
    asked = statistics.median(times["immediate callback"])
    assert set(batches) == {32}, batches  # every program's 32 calls arrived as one batch
    print(f"32 write_file calls in one Promise.all: {base * 1e3:.2f} ms without a callback")
    print(
        f"  with an approval callback (one batch of 32): {asked * 1e3:.2f} ms, +{(asked - base) * 1e3:.2f} ms ({asked / base:.2f}x)"
    )


if __name__ == "__main__":
    anyio.run(main)
