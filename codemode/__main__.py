"""``python -m codemode`` runs the command line."""

from codemode.cli import entry_point

entry_point()
