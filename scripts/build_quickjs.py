"""Rebuild the installed quickjs-ng binding from its own sdist with flags that make it ~2.9x
faster on CPU-bound JS, in place (needs a C compiler; optional).

Why: the quickjs-ng wheels on PyPI compile QuickJS as a shared library with default symbol
visibility and semantic interposition. Every call from the interpreter loop to an exported
engine function (JS_FreeValue, JS_DupValue, ...) then goes through the PLT and cannot be
inlined: a primes loop takes 376 ms with the wheel and 131 ms with the same source built with
``-fvisibility=hidden -fno-semantic-interposition`` (jsbox, which links QuickJS-ng statically,
takes 143 ms). ``bench/bench_cpu.py`` measures it. Nothing else changes: same version, same
module, same API.

    python scripts/build_quickjs.py            # rebuild into the current environment
    python scripts/build_quickjs.py --check    # say which build is installed
"""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

# BUILDING_QJS_SHARED keeps the engine's API exported (JS_EXTERN): the watchdog calls
# JS_SetInterruptHandler through ctypes (codemode/engine/_watchdog.py). Exported or not, with
# -fno-semantic-interposition the engine's calls to its own functions stay direct.
FLAGS = "-O3 -fvisibility=hidden -fno-semantic-interposition -DBUILDING_QJS_SHARED"


def installed_so() -> Path:
    """The binding's shared object."""
    import _quickjs  # the binding's C module, installed beside the quickjs package

    return Path(_quickjs.__file__)


def interposable(so: Path) -> bool | None:
    """Whether the build calls its own exports through the PLT (the slow build); None when
    binutils' readelf is not there to tell."""
    if shutil.which("readelf") is None:
        return None
    out = subprocess.run(["readelf", "-r", "-W", str(so)], capture_output=True, text=True, check=False).stdout
    # Only the engine itself calls JS_ThrowReferenceError: through the PLT in the slow build.
    return any("JS_ThrowReferenceError" in line and "JUMP_SLOT" in line for line in out.splitlines())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only say which build is installed")
    args = parser.parse_args()
    so = installed_so()
    version = importlib.metadata.version("quickjs-ng")
    slow = interposable(so)
    kind = {
        True: "the PyPI build (interposable exports)",
        False: "a fast build",
        None: "unknown (no readelf)",
    }[slow]
    print(f"quickjs-ng {version} at {so}: {kind}")
    if args.check or slow is False:
        return 0
    if shutil.which(os.environ.get("CC", "cc")) is None:
        print("no C compiler found (set CC); nothing changed", file=sys.stderr)
        return 1
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-binary", ":all:", "--no-deps", "-q", "-d", tmp,
             f"quickjs-ng=={version}"],
            check=True,
        )  # fmt: skip
        (sdist,) = Path(tmp).glob("quickjs_ng-*.tar.gz")
        subprocess.run(["tar", "xzf", str(sdist), "-C", tmp], check=True)
        source = next(p for p in Path(tmp).iterdir() if p.is_dir())
        build = Path(tmp, "build")
        env = {**os.environ, "CFLAGS": FLAGS}
        built_ok = subprocess.run(
            [sys.executable, "setup.py", "-q", "build_ext", "-b", str(build)],
            cwd=source, env=env, capture_output=True, text=True, check=False,
        )  # fmt: skip
        if built_ok.returncode != 0:
            print(built_ok.stdout[-4000:] + built_ok.stderr[-4000:], file=sys.stderr)
            print("the build failed (above); nothing changed", file=sys.stderr)
            return 1
        (built,) = build.glob("_quickjs*.so")
        shutil.copy2(built, so)
    print(f"rebuilt with {FLAGS}: {so}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
