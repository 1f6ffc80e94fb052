"""Vendor the quickjs-ng engine sources that `codemode.engine._qjs` compiles (vendor/quickjs-ng/).

Why vendored: codemode's engine bridge (codemode/engine/_qjs.c) links QuickJS-ng statically,
built with the flags that make it fast (the PyPI binding's wheel builds the engine as a
shared object whose every internal call goes through the PLT: ~2.9x slower on CPU-bound JS,
bench/bench_cpu.py), and it needs engine functions the binding does not wrap. The sources are
the ones the quickjs-ng distribution on PyPI ships (its ``upstream-quickjs`` folder: QuickJS-ng,
MIT), so the engine is the same maintained engine, pinned to one release.

    python scripts/vendor_quickjs.py            # fetch the pinned sdist and (re)write vendor/quickjs-ng
    python scripts/vendor_quickjs.py --check    # the vendored files are what SHA256SUMS lists (offline)

To move to a new release: change SDIST_VERSION and SDIST_SHA256 (from PyPI's page of the
sdist), run the script, rebuild (``pip install -e .``) and run the tests and bench/bench_cpu.py.
"""

from __future__ import annotations

import argparse
import hashlib
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

SDIST_VERSION = "0.17.0.2"  # the quickjs-ng distribution on PyPI (its engine: QuickJS-ng 0.17.0)
SDIST_SHA256 = "43d2e48272208721a7aaea8e3f02d4b9318f12ef20cc4f5421b59d9a470706ef"
# Files of the sdist's upstream-quickjs folder the engine needs (quickjs-libc is not used:
# programs get no std/os modules).
FILES = [
    "builtin-array-fromasync.h",
    "builtin-iterator-zip-keyed.h",
    "builtin-iterator-zip.h",
    "cutils.h",
    "dtoa.c",
    "dtoa.h",
    "libregexp-opcode.h",
    "libregexp.c",
    "libregexp.h",
    "libunicode-table.h",
    "libunicode.c",
    "libunicode.h",
    "list.h",
    "quickjs-atom.h",
    "quickjs-c-atomics.h",
    "quickjs-opcode.h",
    "quickjs.c",
    "quickjs.h",
    "unicode_gen_def.h",
]
ROOT = Path(__file__).resolve().parent.parent
VENDOR = ROOT / "vendor" / "quickjs-ng"
SUMS = VENDOR / "SHA256SUMS"


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def check() -> list[str]:
    """What differs between vendor/quickjs-ng and its SHA256SUMS (empty: nothing)."""
    if not SUMS.exists():
        return [f"{SUMS} is missing: run scripts/vendor_quickjs.py"]
    problems = []
    listed = {}
    for line in SUMS.read_text().splitlines():
        digest, name = line.split(maxsplit=1)
        listed[name] = digest
    for name in FILES:
        path = VENDOR / name
        if name not in listed:
            problems.append(f"{name} is not in SHA256SUMS")
        elif not path.exists():
            problems.append(f"{name} is missing")
        elif _digest(path) != listed[name]:
            problems.append(f"{name} differs from what SHA256SUMS lists (edited by hand?)")
    return problems


def fetch() -> None:
    """Download the pinned sdist, check its digest, and write the engine files and their sums."""
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-binary", ":all:", "--no-deps", "-q", "-d", tmp,
             f"quickjs-ng=={SDIST_VERSION}"],
            check=True,
        )  # fmt: skip
        (sdist,) = Path(tmp).glob("quickjs_ng-*.tar.gz")
        if _digest(sdist) != SDIST_SHA256:
            raise SystemExit(f"{sdist.name}: sha256 {_digest(sdist)} is not the pinned {SDIST_SHA256}")
        VENDOR.mkdir(parents=True, exist_ok=True)
        with tarfile.open(sdist) as archive:
            prefix = f"quickjs_ng-{SDIST_VERSION}/upstream-quickjs/"
            for name in FILES:
                member = archive.extractfile(prefix + name)
                if member is None:
                    raise SystemExit(f"{name} is not in {sdist.name}")
                (VENDOR / name).write_bytes(member.read())
    # The engine's licence (MIT) is the comment that opens quickjs.c.
    header = (VENDOR / "quickjs.c").read_text().split("*/", 1)[0]
    lines = [line.removeprefix("/*").removeprefix(" *").removeprefix(" ") for line in header.splitlines()]
    (VENDOR / "LICENSE").write_text("\n".join(lines).strip() + "\n")
    SUMS.write_text("".join(f"{_digest(VENDOR / name)}  {name}\n" for name in FILES))
    print(f"wrote {len(FILES)} files of quickjs-ng {SDIST_VERSION} to {VENDOR}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only check the vendored files (offline)")
    args = parser.parse_args()
    if not args.check:
        fetch()
    problems = check()
    for problem in problems:
        print(f"vendor/quickjs-ng: {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
