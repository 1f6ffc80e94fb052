"""Builds codemode's one C extension, the engine bridge (codemode/engine/_qjs.c), with QuickJS-ng
(vendor/quickjs-ng, see scripts/vendor_quickjs.py) linked in statically. Everything else about
the project is in pyproject.toml.

The flags are what makes the engine fast (bench/bench_cpu.py): with hidden visibility the
engine's calls to its own functions are direct (the quickjs-ng wheel on PyPI calls them
through the PLT, ~2.9x slower on CPU-bound JS). It needs a C compiler (gcc or clang) and the
Python headers; it compiles in ~25 s.

The same compiler also links the sandbox's launcher (codemode/sandbox/launcher.c) into an
executable shipped inside the package, codemode/sandbox/codemode-launcher: statically where the
C library allows it (no dynamic loader between the host's posix_spawn and the command), else
dynamically. It is built by every build_ext: a wheel, ``pip install -e .`` and
``python setup.py build_ext --inplace``.
"""

from __future__ import annotations

import os
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.errors import LinkError

if not sys.platform.startswith("linux"):
    # The bridge waits with futexes and wakes the event loop with an eventfd; the sandbox is
    # Linux-only too (Landlock, seccomp).
    raise SystemExit("codemode runs on Linux only")

ENGINE = "vendor/quickjs-ng"
LAUNCHER_SOURCE = "codemode/sandbox/launcher.c"
LAUNCHER = "codemode/sandbox/codemode-launcher"
LAUNCHER_FLAGS = ["-O2", "-g0", "-Wall", "-Wextra", "-Werror=implicit-function-declaration"]


class BuildWithLauncher(build_ext):
    """build_ext that also links the launcher into the package (build_lib, then the source tree
    when building in place or editable)."""

    def build_extensions(self) -> None:
        super().build_extensions()
        target = os.path.join(self.build_lib, LAUNCHER)
        objects = self.compiler.compile(
            [LAUNCHER_SOURCE], output_dir=self.build_temp, extra_postargs=LAUNCHER_FLAGS
        )
        os.makedirs(os.path.dirname(target), exist_ok=True)
        try:
            self.compiler.link_executable(objects, target, extra_postargs=["-static"])
        except LinkError:  # no static C library (libc.a): the dynamic launcher works the same
            self.compiler.link_executable(objects, target)

    def copy_extensions_to_source(self) -> None:
        super().copy_extensions_to_source()
        self.copy_file(os.path.join(self.build_lib, LAUNCHER), LAUNCHER, level=self.verbose)

    def get_outputs(self) -> list[str]:
        if self.inplace:  # the keys of get_output_mapping, the launcher's among them
            return super().get_outputs()
        return [*super().get_outputs(), os.path.join(self.build_lib, LAUNCHER)]

    def get_output_mapping(self) -> dict[str, str]:
        mapping = dict(super().get_output_mapping())
        if self.inplace:
            mapping[os.path.join(self.build_lib, LAUNCHER)] = LAUNCHER
        return mapping


setup(
    cmdclass={"build_ext": BuildWithLauncher},
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
    ],
)
