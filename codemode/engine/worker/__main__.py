"""Start the engine's zygote: ``python -I -S codemode/engine/worker FD``, FD its socket to the host.

Run as a directory (``__package__`` is empty), this registers codemode's packages as bare
packages (their ``__init__`` is not run: it would import the whole host, ~40 MiB a worker) so
that the few stdlib-only modules a worker needs import normally.
"""

import sys
import types
from pathlib import Path


def _bare_packages() -> None:
    """Make ``codemode``'s packages importable without their ``__init__``."""
    here = Path(__file__).resolve().parent
    root = here.parents[1]  # codemode/
    for name, path in (
        ("codemode", root),
        ("codemode.engine", root / "engine"),
        ("codemode.engine.worker", here),
        ("codemode.sandbox", root / "sandbox"),
    ):
        if name not in sys.modules:
            package = types.ModuleType(name)
            package.__path__ = [str(path)]
            sys.modules[name] = package


if not __package__:
    if sys.path and Path(sys.path[0]).resolve() == Path(__file__).resolve().parent:
        del sys.path[0]  # its own directory: its modules are not top-level
    _bare_packages()

from codemode.engine.worker._zygote import main  # noqa: E402

main()
