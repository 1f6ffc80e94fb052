"""The QuickJS Code Mode engine: runs one JavaScript program per fresh context."""

from typing import TYPE_CHECKING

from codemode._lazy import lazy_exports

if TYPE_CHECKING:
    from codemode.engine._header import HeaderError, HeaderOptions, parse_header
    from codemode.engine._loop import LoopSpawner
    from codemode.engine._outcome import CallGate, EngineLimits, GuestError, ProgramOutcome
    from codemode.engine._qjs import ENGINE_VERSION
    from codemode.engine._runtime import Engine, RunView
    from codemode.engine._zygote_client import worker_report

if not TYPE_CHECKING:  # each name loads its module at first use (codemode._lazy)
    __getattr__, __dir__ = lazy_exports(
        __name__,
        {
            "._header": (
                "HeaderError",
                "HeaderOptions",
                "parse_header",
            ),
            "._loop": ("LoopSpawner",),
            "._outcome": (
                "CallGate",
                "EngineLimits",
                "GuestError",
                "ProgramOutcome",
            ),
            "._zygote_client": ("worker_report",),
            "._qjs": ("ENGINE_VERSION",),
            "._runtime": (
                "Engine",
                "RunView",
            ),
        },
    )

__all__ = [
    "ENGINE_VERSION",
    "CallGate",
    "Engine",
    "EngineLimits",
    "GuestError",
    "HeaderError",
    "HeaderOptions",
    "LoopSpawner",
    "ProgramOutcome",
    "RunView",
    "parse_header",
    "worker_report",
]
