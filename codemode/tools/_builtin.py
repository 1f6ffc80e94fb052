"""codemode's own extensions (files, archive, bash, monitor), registered as `LazyExtension`:
their modules, mostly pydantic argument and result models, load at the first use of one of
their tools. Importing them was ~30 ms of every start (``bench/bench_cold.py``).

Each entry declares its tools' names and which declare ``destructive=True``; the registry
checks both when it loads the extension, and ``tests/tools/test_builtin.py`` loads them all.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from codemode.tools._model import Extension, LazyExtension

if TYPE_CHECKING:
    from codemode.tools.bash import ProcessManager


def _files() -> Extension:
    from codemode.tools.files import file_tools

    return Extension("files", file_tools())


def _archive() -> Extension:
    from codemode.tools._read_archive import read_archive_tool

    return Extension("archive", [read_archive_tool()])


def builtin_extensions(processes: ProcessManager) -> list[LazyExtension]:
    """The built-in extensions over ``processes`` (the bash and monitor tools use it)."""

    def monitor() -> Extension:
        from codemode.tools.monitor import monitor_extension

        return monitor_extension(processes)

    return [
        LazyExtension(
            "files", ("read_file", "edit_file", "write_file"), frozenset({"edit_file", "write_file"}), _files
        ),
        LazyExtension("archive", ("read_archive",), frozenset(), _archive),
        LazyExtension("bash", ("bash",), frozenset({"bash"}), processes.extension),
        LazyExtension(
            "monitor",
            ("monitor_start", "monitor_list", "monitor_stop", "monitor_events", "monitor_wait"),
            frozenset({"monitor_stop"}),
            monitor,
        ),
    ]
