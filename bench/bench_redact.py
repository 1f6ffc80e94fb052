"""Redaction: throughput, recall on high-value secrets, and false positives on ordinary files.

Run: ``python bench/bench_redact.py [--mb 20] [--runs 5]``

Throughput (``Redactor.redact_bytes``, MB/s) on six corpora of ``--mb`` MB each, measured in
``--runs`` rounds; each round times every corpus once, in an order rotated round by round (so a
burst of load on the machine does not fall on one corpus only); the median is printed with
``os.getloadavg()`` as it was after the last round (this machine is shared: read MB/s beside it):

- build: ordinary command output (log lines, hashes, UUIDs, base64 blobs, test results);
- near-miss: tests/state/secret_fixtures.py's ordinary corpus: secret-sounding words next to
  things that are not secrets, each of which the second stage has to look at;
- source: the text files of the installed site-packages and vendor/quickjs-ng, concatenated;
- secret/KB: build output with one secret line (a fixture's) after each KB;
- secret/line: every line holds a secret;
- stream: build output through a `StreamRedactor` in 64 KiB chunks, after 20 passwords.

Recall: the share of tests/state/high_value_secrets.py's examples whose secret is gone, per kind
and in all, and of tests/state/secret_fixtures.py's families. False positives: every text file
of site-packages and vendor/quickjs-ng redacted whole, the share changed (and which rules changed
them), and the lockfiles of tests/security/test_redaction_false_positives.py, lines changed;
with ``--wide``, also every text file of the Python install (its stdlib and site-packages).
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import sysconfig
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.bench_archive import mixed_output  # noqa: E402
from codemode.state._redact import Redactor, _engine  # noqa: E402
from codemode.state._stream import StreamRedactor  # noqa: E402
from tests.security.test_redaction_false_positives import LOCKFILES  # noqa: E402
from tests.state.high_value_secrets import high_value  # noqa: E402
from tests.state.secret_fixtures import families, ordinary_output  # noqa: E402

ORDINARY_ROOTS = (Path(sysconfig.get_paths()["purelib"]), ROOT / "vendor" / "quickjs-ng")


def text_files(roots: tuple[Path, ...] = ORDINARY_ROOTS) -> Iterator[tuple[Path, bytes]]:
    """Every regular file under ``roots`` that is UTF-8 text (no NUL byte)."""
    for root in roots:
        for path in sorted(root.rglob("*")):
            if path.is_symlink() or not path.is_file():
                continue
            data = path.read_bytes()
            if not data or b"\0" in data:
                continue
            try:
                data.decode("utf-8")
            except UnicodeDecodeError:
                continue
            yield path, data


def repeated(block: bytes, size: int) -> bytes:
    return (block * (size // max(len(block), 1) + 1))[:size]


def secret_lines() -> list[str]:
    cases = [t for c in families().values() for t, _ in c] + [t for c in high_value().values() for t, _ in c]
    return [t for t in cases if "\n" not in t]


def one_secret_per_kb(size: int) -> bytes:
    rng = random.Random(1)
    secrets = secret_lines()
    filler = mixed_output(2_000_000).decode("utf-8", "replace").splitlines()
    out: list[str] = []
    n = k = 0
    while n < size:
        block = 0
        while block < 1000:
            line = filler[k % len(filler)]
            k += 1
            out.append(line)
            block += len(line) + 1
        out.append(rng.choice(secrets))
        n += block + len(out[-1]) + 1
    return ("\n".join(out) + "\n").encode()[:size]


def streamed(redactor: Redactor) -> Callable[[bytes], bytes]:
    """Redaction of a stream that has already met 20 passwords, fed in 64 KiB chunks."""
    stream = StreamRedactor(redactor)
    stream.feed("".join(f"password_{i} = 'Zq{i}x!Wm{i * 7}pT{i}'\n" for i in range(20)).encode())

    def redact(data: bytes) -> bytes:
        return b"".join(stream.feed(data[i : i + 65536]) for i in range(0, len(data), 65536))

    return redact


def throughput(size: int, runs: int) -> None:
    redactor = Redactor(environ={})
    redactor.redact("warm up: load the rules")
    _engine().matches(b"x" * 10_000)  # and compile the Hyperscan database
    source = b"".join(data for _, data in text_files())
    corpora = {
        "build": mixed_output(size),
        "near-miss": repeated(ordinary_output().encode(), size),
        "source": repeated(source, size),
        "secret/KB": one_secret_per_kb(size),
        "secret/line": repeated(("\n".join(secret_lines()) + "\n").encode(), size // 4),
    }
    for data in corpora.values():
        redactor.redact_bytes(data[:1_000_000])  # compile the patterns each corpus needs
    corpora["stream"] = corpora["build"]
    names = list(corpora)
    times: dict[str, list[float]] = {name: [] for name in names}
    for run in range(runs):
        for name in names[run % len(names) :] + names[: run % len(names)]:
            data = corpora[name]
            redact = streamed(redactor) if name == "stream" else redactor.redact_bytes
            start = time.perf_counter()
            redact(data)
            times[name].append(len(data) / 1e6 / (time.perf_counter() - start))
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"redact_bytes MB/s, median of {runs} rotated runs ({size / 1e6:.0f} MB each; loadavg {load})")
    for name in names:
        runs_text = " ".join(f"{x:.0f}" for x in sorted(times[name]))
        print(f"  {name:12s} {statistics.median(times[name]):8.1f}   (runs: {runs_text})")


def recall() -> None:
    redactor = Redactor(environ={})
    print("\nrecall on high-value secrets (tests/state/high_value_secrets.py)")
    total = caught = 0
    for kind, cases in high_value().items():
        hit = sum(1 for text, secret in cases if secret not in redactor.redact(text))
        total += len(cases)
        caught += hit
        if hit < len(cases):
            print(f"  {kind:32s} {hit}/{len(cases)}")
    print(f"  all {len(high_value())} kinds: {caught}/{total} = {100 * caught / total:.1f}%")
    total = caught = 0
    for cases in families().values():
        caught += sum(1 for text, secret in cases if secret not in redactor.redact(text))
        total += len(cases)
    print(f"  secret_fixtures.py families: {caught}/{total} = {100 * caught / total:.1f}%")


def false_positives(roots: tuple[Path, ...], lockfiles: bool = True) -> None:
    redactor = Redactor(environ={})
    engine = _engine()
    files = changed = 0
    size = 0
    by_rule: Counter[str] = Counter()
    examples: list[str] = []
    for path, data in text_files(roots):
        files += 1
        size += len(data)
        if redactor.redact_bytes(data) == data:
            continue
        changed += 1
        hits = engine.matches(data)
        rules = {marker.decode() for _, _, marker in engine.spans(data, hits)}
        by_rule.update(rules)
        if len(examples) < 12:
            examples.append(f"    {path}: {', '.join(sorted(rules))}")
    names = " + ".join(str(r) for r in roots)
    print(f"\nfalse positives: text files of {names} ({files} files, {size / 1e6:.0f} MB)")
    print(f"  files changed: {changed}/{files} = {100 * changed / files:.2f}%")
    print("  by marker: " + ", ".join(f"{m} {n}" for m, n in by_rule.most_common()))
    print("\n".join(examples))
    if not lockfiles:
        return
    for name, make in LOCKFILES.items():
        text = make()
        out = redactor.redact(text)
        lines = text.splitlines()
        diff = sum(1 for a, b in zip(lines, out.splitlines(), strict=True) if a != b)
        print(f"  {name:18s} lines changed: {diff}/{len(lines)}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mb", type=int, default=20, help="size of each corpus in MB")
    parser.add_argument("--runs", type=int, default=5, help="timed rounds (the median is printed)")
    parser.add_argument(
        "--wide",
        action="store_true",
        help="also every text file of the Python install (stdlib and its site-packages)",
    )
    args = parser.parse_args()
    throughput(args.mb * 1_000_000, args.runs)
    recall()
    false_positives(ORDINARY_ROOTS)
    if args.wide:
        false_positives((Path(sysconfig.get_paths()["stdlib"]),), lockfiles=False)


if __name__ == "__main__":
    main()
