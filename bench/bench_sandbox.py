"""Cost of Landlock confinement: `true` started through subprocess, confined vs full-access.

Both sides take the same code path (prepare_confinement, Confinement.popen, wait, close);
full-access just is unconfined there. Also shown: ``Confinement.spawn`` (posix_spawn of the
exec helper, what the bash tool uses) and the ``preexec_fn=conf.preexec`` path, which forces a
full fork() of the host. Runs are interleaved so drift on a shared machine hits all
alike. Target: confined median <= 1.3x full-access median.

    PYTHONPATH=. python bench/bench_sandbox.py [N]
"""

from __future__ import annotations

import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from codemode.sandbox import SandboxMode, SandboxPolicy, landlock_status, prepare_confinement

_DEVNULL = os.open(os.devnull, os.O_RDWR | os.O_CLOEXEC)


def one_run(policy: SandboxPolicy, via: str = "popen") -> float:
    start = time.perf_counter()
    with prepare_confinement(policy) as conf:
        env = {**os.environ, **conf.env}
        if via == "preexec":
            proc: Any = subprocess.Popen(["true"], preexec_fn=conf.preexec, env=env)
        elif via == "spawn":
            proc = conf.spawn(["true"], env=env, cwd=".", stdin=_DEVNULL, stdout=_DEVNULL, stderr=_DEVNULL)
        else:
            proc = conf.popen(["true"], env=env)
    proc.wait()
    return time.perf_counter() - start


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 200
    status = landlock_status()
    print(f"Landlock ABI {status.abi}")
    with tempfile.TemporaryDirectory() as tmp:
        ws, tmpdir = Path(tmp, "ws"), Path(tmp, "tmp")
        ws.mkdir()
        tmpdir.mkdir()
        confined = SandboxPolicy(writable_roots=(ws,), temp_dir=tmpdir)
        cases = {
            "full-access": (
                SandboxPolicy(mode=SandboxMode.FULL_ACCESS, writable_roots=(ws,), temp_dir=tmpdir),
                "popen",
            ),
            "workspace-write": (confined, "popen"),
            "workspace-write, network off": (
                SandboxPolicy(writable_roots=(ws,), temp_dir=tmpdir, network=False),
                "popen",
            ),
            "read-only": (confined.with_mode(SandboxMode.READ_ONLY), "popen"),
            "workspace-write via spawn": (confined, "spawn"),
            "workspace-write via preexec_fn": (confined, "preexec"),
        }
        times: dict[str, list[float]] = {name: [] for name in cases}
        for policy, via in cases.values():  # warm-up (and the exec helper's one-time self-test)
            for _ in range(5):
                one_run(policy, via)
        order = list(cases)
        for _ in range(n):
            random.shuffle(order)  # no case always runs right after another
            for name in order:
                policy, via = cases[name]
                times[name].append(one_run(policy, via))
    base = statistics.median(times["full-access"])
    for name, samples in times.items():
        median = statistics.median(samples)
        print(f"{name:32s} median {median * 1e3:7.3f} ms   ratio {median / base:5.2f}x   (N={n})")
    ratio = statistics.median(times["workspace-write"]) / base
    # Same-round ratios cancel the drift of a shared machine better than a ratio of medians.
    paired = statistics.median(
        c / f for c, f in zip(times["workspace-write"], times["full-access"], strict=True)
    )
    verdict = "OK" if max(ratio, paired) <= 1.3 else "OVER"
    print(f"confined/full-access: {ratio:.2f}x of medians, {paired:.2f}x median same-round ratio")
    print(f"target <= 1.30x: {verdict}")


if __name__ == "__main__":
    main()
