"""Running a program (or one direct tool call) for a Host: the options header, the engine run,
the result fit to the budget, recorded and replayed by call id. The Host owns one `Runner`."""

from codemode.runner._runner import Runner

__all__ = ["Runner"]
