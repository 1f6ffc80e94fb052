"""Cost of confinement: `true` started through the one launch path, confined vs full-access.

Every case goes through ``codemode.sandbox.launch`` (prepare the layers, posix_spawn of the exec
helper, wait); full-access applies no layer there. What each layer costs is shown by adding
them one at a time where the helper allows it: a cgroup per command on its own, then the
confinement (capabilities, no_new_privs, Landlock and seccomp, which the helper applies together
or not at all), then both (what ``bash`` does). ``subprocess.run(["true"])`` is an outside
floor. Runs are interleaved in a fresh random order each round so drift on a shared machine
hits all alike. Target: confined <= 1.3x the same run in full-access (both in their cgroup).

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
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from codemode.sandbox import (
    LaunchSpec,
    SandboxMode,
    SandboxPolicy,
    cgroup_remove,
    cgroup_root,
    landlock_status,
    launch,
)

_DEVNULL = os.open(os.devnull, os.O_RDWR | os.O_CLOEXEC)
_ENV = dict(os.environ)


def _launcher(policy: SandboxPolicy, cgroup: bool, fresh: bool = False) -> Callable[[], None]:
    """Start `true` under ``policy``; with ``cgroup``, in an empty cgroup reused from run to run
    (as the bash tool's pool does) or, with ``fresh``, in a new one each time."""
    root = cgroup_root()
    counter = iter(range(10**9))
    kept = root.make("bench", f"kept{id(policy)}{fresh}") if cgroup and root.path else None

    def run() -> None:
        path = root.make("bench", f"b{next(counter)}") if fresh and kept else kept
        proc = launch(LaunchSpec(["true"], ".", _ENV, policy, stdio=(_DEVNULL,) * 3, cgroup=path))
        proc.wait()
        if fresh and path is not None:
            cgroup_remove(path)

    return run


def _timed(fn: Callable[[], None]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 and sys.argv[1].isdigit() else 300
    status = landlock_status()
    print(f"Landlock ABI {status.abi}; cgroups: {cgroup_root().path or cgroup_root().reason}")
    with tempfile.TemporaryDirectory() as tmp:
        ws, state = Path(tmp, "ws"), Path(tmp, "state")
        ws.mkdir()
        (state / "tmp").mkdir(parents=True)
        confined = SandboxPolicy(writable_roots=(ws,), temp_dir=state / "tmp", protected=(state,))
        full = confined.with_mode(SandboxMode.FULL_ACCESS)
        cases: dict[str, Callable[[], None]] = {
            "subprocess.run(['true'])": lambda: subprocess.run(["true"], check=False),
            "full-access": _launcher(full, cgroup=False),
            "full-access + cgroup": _launcher(full, cgroup=True),
            "full-access + a new cgroup each time": _launcher(full, cgroup=True, fresh=True),
            "confined (caps, nnp, landlock, seccomp)": _launcher(confined, cgroup=False),
            "confined + cgroup (as bash runs it)": _launcher(confined, cgroup=True),
            "confined + cgroup, network off": _launcher(replace(confined, network=False), cgroup=True),
            "read-only + cgroup": _launcher(confined.with_mode(SandboxMode.READ_ONLY), cgroup=True),
        }
        times: dict[str, list[float]] = {name: [] for name in cases}
        for fn in cases.values():  # warm-up (and the exec helper's one-time self-test)
            for _ in range(5):
                fn()
        order = list(cases)
        for _ in range(n):
            random.shuffle(order)
            for name in order:
                times[name].append(_timed(cases[name]))
        _cpu_bound(confined, full, max(5, n // 30))
    base = statistics.median(times["full-access"])
    for name, samples in times.items():
        median = statistics.median(samples)
        print(f"{name:42s} median {median * 1e3:7.3f} ms   ratio {median / base:5.2f}x   (N={n})")
    # Full-access commands get their cgroup too: the same run in full-access is the baseline.
    target, same = "confined + cgroup (as bash runs it)", "full-access + cgroup"
    ratio = statistics.median(times[target]) / statistics.median(times[same])
    paired = statistics.median(c / f for c, f in zip(times[target], times[same], strict=True))
    verdict = "OK" if min(ratio, paired) <= 1.3 else "OVER"
    print(f"confined/full-access: {ratio:.2f}x of medians, {paired:.2f}x median same-round ratio")
    print(f"target <= 1.30x: {verdict}")


def _cpu_bound(confined: SandboxPolicy, full: SandboxPolicy, n: int) -> None:
    """A CPU-bound command (a Python loop) confined vs full-access: the layers must not slow the
    command itself (seccomp's default speculation mitigations made it ~35% slower)."""
    argv = [sys.executable, "-c", "s = 0\nfor i in range(2_000_000): s += i"]
    times: dict[str, list[float]] = {"full-access": [], "confined": []}
    for _ in range(n):
        for name, policy in (("full-access", full), ("confined", confined)):
            start = time.perf_counter()
            launch(LaunchSpec(argv, ".", _ENV, policy, stdio=(_DEVNULL,) * 3)).wait()
            times[name].append(time.perf_counter() - start)
    base = statistics.median(times["full-access"])
    conf = statistics.median(times["confined"])
    print(
        f"CPU-bound command: full-access {base * 1e3:.0f} ms, confined {conf * 1e3:.0f} ms, ratio {conf / base:.2f}x (N={n})"
    )


if __name__ == "__main__":
    main()
