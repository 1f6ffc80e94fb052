"""Redaction throughput, before and after, and recall / false positives on our own fixtures.

Run: ``PYTHONPATH=. python bench/bench_redact.py [--mb 100]``

"Before" is the redactor as it was before the rule set (hand-written regex groups behind
literal gates), loaded from git history into a temporary module; "after" is the current one.
Both redact the same two corpora in the same run:

- build: ordinary command output (log lines, commit hashes, UUIDs, sha256 sums, base64 blobs,
  test results, tracebacks: bench_archive.py's corpus);
- near-miss: tests/state/secret_fixtures.py's false-positive corpus, repeated: builds, git logs,
  checksums, lockfiles, minified JS, and on one line in thirteen a secret-sounding word next to
  something that is not a secret (``secret_name: db-credentials``, ``e.password=void 0``), each
  of which stage 2 has to look at;
- dense: every line holds a key-like token (the fixture families' examples, repeated).

It also times stage 1 alone with Hyperscan against an RE2 set of the same patterns (the other
multi-pattern engine we considered) and counts recall and false positives per engine.
"""

from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import re2  # noqa: E402

from bench.bench_archive import mixed_output  # noqa: E402
from codemode.state._redact import Redactor, _engine  # noqa: E402
from tests.state.secret_fixtures import families, ordinary_output  # noqa: E402

BEFORE_COMMIT = "2c2e55a"  # main just before the rule set replaced the hand-written groups
BEFORE_PATH = "codemode/archive/_redact.py"  # where the redactor lived then (now codemode/state/)


def old_module() -> ModuleType:
    source = subprocess.run(
        ["git", "-C", str(ROOT), "show", f"{BEFORE_COMMIT}:{BEFORE_PATH}"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    path = Path(tempfile.mkdtemp()) / "_redact_before.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("_redact_before", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def corpus(block: str, size: int) -> bytes:
    data = block.encode()
    return (data * (size // len(data) + 1))[:size]


def mbps(fn: Any, data: bytes, repeat: int = 2) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        fn(data)
        best = min(best, time.perf_counter() - start)
    return len(data) / 1e6 / best


def recall(redactor: Any) -> tuple[dict[str, tuple[int, int]], int, int]:
    per_family = {}
    for family, cases in families().items():
        caught = sum(1 for text, secret in cases if secret not in redactor.redact(text))
        per_family[family] = (caught, len(cases))
    text = ordinary_output()
    out = redactor.redact(text)
    lines = text.splitlines()
    fp = sum(1 for a, b in zip(lines, out.splitlines(), strict=False) if a != b)
    return per_family, fp, len(lines)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mb", type=int, default=100, help="size of each corpus in MB")
    args = parser.parse_args()
    size = args.mb * 1_000_000

    before = old_module().Redactor(environ={})
    after = Redactor(environ={})
    after.redact("warm up: compile the rules")
    build = mixed_output(size)
    ordinary = corpus(ordinary_output(), size)
    dense = corpus("\n".join(t for cases in families().values() for t, _ in cases) + "\n", size)

    print(f"redact_bytes MB/s on {args.mb} MB each (best of 2; dense: one pass)")
    print(f"{'corpus':10s} {'before':>9s} {'after':>9s} {'ratio':>7s}")
    for name, data, repeat in (("build", build, 2), ("near-miss", ordinary, 2), ("dense", dense, 1)):
        b = mbps(before.redact_bytes, data, repeat)
        a = mbps(after.redact_bytes, data, repeat)
        print(f"{name:10s} {b:9.1f} {a:9.1f} {a / b:6.2f}x", flush=True)

    engine = _engine()
    sample = ordinary[:20_000_000]
    options = re2.Options()
    options.max_mem = 1 << 31
    rules_set = re2.Set.SearchSet(options)
    for rule in engine.rules:
        rules_set.Add(rule.source.encode())
    rules_set.Compile()
    hs = mbps(engine.matches, sample)
    rs = mbps(rules_set.Match, sample)
    print(
        f"\nstage 1 only, {len(engine.rules)} patterns, 20 MB build: Hyperscan {hs:.0f} MB/s, RE2 set {rs:.0f} MB/s"
    )

    print("\nrecall on tests/state/secret_fixtures.py (examples redacted / examples)")
    print(f"{'family':20s} {'before':>9s} {'after':>9s}")
    rb, fpb, lines = recall(before)
    ra, fpa, _ = recall(after)
    for family in rb:
        print(f"{family:20s} {rb[family][0]:4d}/{rb[family][1]:<4d} {ra[family][0]:4d}/{ra[family][1]:<4d}")
    tb = sum(c for c, _ in rb.values())
    ta = sum(c for c, _ in ra.values())
    n = sum(t for _, t in rb.values())
    print(f"{'total':20s} {tb:4d}/{n:<4d} {ta:4d}/{n:<4d}  ({100 * tb / n:.1f}% -> {100 * ta / n:.1f}%)")
    print(f"false-positive lines in the ordinary corpus ({lines} lines): before {fpb}, after {fpa}")


if __name__ == "__main__":
    main()
