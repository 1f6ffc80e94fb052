"""The QuickJS Code Mode engine: runs one JavaScript program per fresh context."""

from codemode.engine._header import HeaderError, HeaderOptions, parse_header
from codemode.engine._loop import LoopSpawner
from codemode.engine._outcome import CallGate, EngineLimits, GuestError, ProgramOutcome
from codemode.engine._processes import worker_report
from codemode.engine._qjs import ENGINE_VERSION
from codemode.engine._runtime import Engine, RunView

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
