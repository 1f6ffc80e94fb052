"""Builds codemode's one C extension, the engine bridge (codemode/engine/_qjs.c), with QuickJS-ng
(vendor/quickjs-ng, see scripts/vendor_quickjs.py) linked in statically. Everything else about
the project is in pyproject.toml.

The flags are what makes the engine fast (bench/bench_cpu.py): with hidden visibility the
engine's calls to its own functions are direct (the quickjs-ng wheel on PyPI calls them
through the PLT, ~2.9x slower on CPU-bound JS). It needs a C compiler (gcc or clang) and the
Python headers; it compiles in ~25 s.
"""

from __future__ import annotations

import sys

from setuptools import Extension, setup

if not sys.platform.startswith("linux"):
    # The bridge waits with futexes and wakes the event loop with an eventfd; the sandbox is
    # Linux-only too (Landlock, seccomp).
    raise SystemExit("codemode runs on Linux only")

ENGINE = "vendor/quickjs-ng"

setup(
    ext_modules=[
        Extension(
            "codemode.engine._qjs",
            sources=[
                "codemode/engine/_qjs.c",
                f"{ENGINE}/quickjs.c",
                f"{ENGINE}/libregexp.c",
                f"{ENGINE}/libunicode.c",
                f"{ENGINE}/dtoa.c",
            ],
            include_dirs=[ENGINE],
            define_macros=[("NDEBUG", None), ("_GNU_SOURCE", None)],
            extra_compile_args=[
                "-O2",
                "-g0",
                "-fvisibility=hidden",
                "-fno-semantic-interposition",
                "-Wno-sign-compare",
                "-Wno-unused-parameter",
                "-Wno-unused-but-set-variable",  # the engine's, where NDEBUG drops its asserts
                "-Werror=incompatible-pointer-types",
                "-Werror=implicit-function-declaration",
            ],
            extra_link_args=["-Wl,--exclude-libs,ALL"],
            libraries=["m", "pthread"],
        )
    ]
)
