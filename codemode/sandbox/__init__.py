"""Sandbox policy (plain data) and its Landlock enforcement."""

from codemode.sandbox._policy import SandboxMode, SandboxPolicy

__all__ = ["SandboxMode", "SandboxPolicy"]
