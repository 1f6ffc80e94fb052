"""The ``bash`` tool and its process manager (foreground, hand-off, background PTY processes)."""

from codemode.tools._bash._manager import Notification, ProcessManager

__all__ = ["Notification", "ProcessManager"]
