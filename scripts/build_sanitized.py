"""Build the engine bridge once with AddressSanitizer and UndefinedBehaviorSanitizer, apart.

    python scripts/build_sanitized.py [--out DIR] [--source REV]

Copies what the build and the engine's tests need (codemode/, tests/, vendor/quickjs-ng,
setup.py, pyproject.toml) into DIR (default /tmp/codemode-sanitized) and builds the extension
there with ``-fsanitize=address,undefined -fno-omit-frame-pointer``; the working tree's own
build is left alone. ``--source REV`` takes codemode/engine/_qjs.c from a git revision instead
(to check that a test catches what an older bridge did). Run tests against that copy from DIR,
with the environment this prints (``.ci/sanitize`` does)::

    cd DIR && env $(python scripts/build_sanitized.py --print-env) python -m pytest tests/engine

A Python extension built with ASan needs the ASan runtime loaded first (LD_PRELOAD); leaks are
not checked (the interpreter's own are reported), any other error stops the process.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT = Path("/tmp/codemode-sanitized")
FLAGS = "-O1 -g1 -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined"
_COPIED = ["codemode", "tests", "vendor/quickjs-ng", "setup.py", "pyproject.toml", "README.md", "MANIFEST.in"]
# Builds the bridge alone, with the sanitizers' flags added to its own: setup.py's Extension is
# taken as it is (setup() only records it), and nothing else setup.py builds is built here.
_BUILD = """
import sys, runpy, setuptools
from setuptools.command.build_ext import build_ext
found = {}
setuptools.setup = lambda **kw: found.update(kw)
runpy.run_path("setup.py")
ext = next(e for e in found["ext_modules"] if e.name == "codemode.engine._qjs")
ext.extra_compile_args = [a for a in ext.extra_compile_args if a not in ("-g0", "-O2")] + FLAGS.split()
ext.extra_link_args = [*ext.extra_link_args, "-fsanitize=address,undefined"]
dist = setuptools.Distribution({"ext_modules": [ext], "script_name": "setup.py"})
dist.cmdclass["build_ext"] = build_ext
cmd = dist.get_command_obj("build_ext")
cmd.inplace = 1
cmd.build_temp = sys.argv[1] + "/build-temp"
dist.run_command("build_ext")
""".replace("FLAGS", repr(FLAGS))
_SKIP = shutil.ignore_patterns("__pycache__", "*.so", "*.pyc", ".mypy_cache", ".pytest_cache")


def _runtime(name: str) -> str:
    path = subprocess.run(
        ["gcc", f"-print-file-name={name}"], capture_output=True, text=True, check=True
    ).stdout.strip()
    if not os.path.isabs(path):
        raise SystemExit(f"build_sanitized: gcc does not know {name}; install gcc's sanitizer runtimes")
    return path


def sanitizer_env(out: Path) -> dict[str, str]:
    """The variables a process needs to run the sanitized bridge in ``out``."""
    return {
        "LD_PRELOAD": _runtime("libasan.so"),
        "ASAN_OPTIONS": "detect_leaks=0:halt_on_error=1:abort_on_error=1",
        "UBSAN_OPTIONS": "halt_on_error=1:print_stacktrace=1",
        "PYTHONPATH": str(out),
    }


def build(out: Path, source_rev: str | None) -> None:
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    for name in _COPIED:
        src = ROOT / name
        if src.is_dir():
            shutil.copytree(src, out / name, ignore=_SKIP)
        elif src.exists():
            shutil.copy2(src, out / name)
    if source_rev is not None:
        old = subprocess.run(
            ["git", "show", f"{source_rev}:codemode/engine/_qjs.c"], cwd=ROOT, capture_output=True, check=True
        ).stdout
        (out / "codemode/engine/_qjs.c").write_bytes(old)
    started = time.monotonic()
    subprocess.run([sys.executable, "-c", _BUILD, str(out)], cwd=out, check=True, stdout=subprocess.DEVNULL)
    print(f"build_sanitized: built in {time.monotonic() - started:.0f} s into {out}", file=sys.stderr)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--source", metavar="REV", help="take codemode/engine/_qjs.c from this git revision")
    parser.add_argument(
        "--print-env", action="store_true", help="only print the run environment (NAME=value)"
    )
    args = parser.parse_args()
    if not args.print_env:
        build(args.out, args.source)
    for name, value in sanitizer_env(args.out).items():
        print(f"{name}={value}")


if __name__ == "__main__":
    main()
