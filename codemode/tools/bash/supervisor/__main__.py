"""Start one supervisor: ``python -I -S codemode/tools/bash/supervisor SITE_DIRS...``, spec on stdin.

Run as a directory (``__package__`` is empty), this registers codemode's packages as bare
packages (their ``__init__`` is not run: it would import the whole host) so that the supervisor's
modules and the stdlib-only modules it shares with the host import normally; ``SITE_DIRS`` (the
site directory of codemode's dependencies: the host starts it without site processing) join
``sys.path``.
"""

import sys
import types
from pathlib import Path


def _bare_packages() -> None:
    """Make ``codemode``'s packages on the supervisor's import path importable without their
    ``__init__``."""
    here = Path(__file__).resolve().parent
    root = here.parents[2]  # codemode/
    for name, path in (
        ("codemode", root),
        ("codemode.state", root / "state"),
        ("codemode.sandbox", root / "sandbox"),
        ("codemode.tools", root / "tools"),
        ("codemode.tools.bash", root / "tools" / "bash"),
        ("codemode.tools.bash.supervisor", here),
    ):
        if name not in sys.modules:
            package = types.ModuleType(name)
            package.__path__ = [str(path)]
            sys.modules[name] = package


if not __package__:
    if sys.path and Path(sys.path[0]).resolve() == Path(__file__).resolve().parent:
        del sys.path[0]  # its own directory: its modules are not top-level
    sys.path.extend(arg for arg in sys.argv[1:] if arg not in sys.path)
    _bare_packages()

from codemode.tools.bash.supervisor._supervise import main  # noqa: E402

sys.exit(main())
