"""How the supervisor starts (``supervisor/__main__.py``): the host's command line, and what
it imports on the way (the standard library, psutil and codemode's stdlib-only modules)."""

from __future__ import annotations

import subprocess
import sys

from codemode.tools.bash import _background

# The only codemode modules a supervisor may load: itself and the stdlib-only modules it shares
# with the host (and the bare packages that hold them, whose __init__ does not run).
_ALLOWED_CODEMODE = {
    "codemode",
    "codemode.sandbox",
    "codemode.sandbox._procstat",
    "codemode.sandbox._spawn",
    "codemode.state",
    "codemode.state._capped",
    "codemode.state._processes",
    "codemode.tools",
    "codemode.tools.bash",
}


def _imported(stderr: str) -> set[str]:
    """The modules named in ``-X importtime`` output."""
    names = set()
    for line in stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            name = line.rsplit("|", 1)[1].strip()
            if name != "imported package":
                names.add(name)
    return names


def test_the_supervisor_imports_only_the_standard_library_and_its_own_modules() -> None:
    # Its command line as the host starts it; an empty spec stops it after every import.
    argv = [
        sys.executable,
        "-I",
        "-S",
        "-X",
        "importtime",
        str(_background.SUPERVISOR),
        *_background._SUPERVISOR_PATHS,
    ]
    done = subprocess.run(argv, input=b"", capture_output=True, cwd="/", timeout=60, check=False)
    stderr = done.stderr.decode()
    assert done.returncode != 0
    assert "JSONDecodeError" in stderr  # it got as far as reading the spec
    names = _imported(stderr)
    assert "codemode.tools.bash.supervisor._supervise" in names
    assert "psutil" not in names  # a process's identity is read from /proc (`_procstat`)
    outside = {
        name
        for name in names
        if name.split(".")[0] not in sys.stdlib_module_names
        and name.split(".")[0] != "codemode"
        and name not in {"org", "org.python", "org.python.core"}  # probed by the standard library
    }
    assert outside == set()
    codemode = {name for name in names if name.split(".")[0] == "codemode"}
    assert {
        name for name in codemode if not name.startswith("codemode.tools.bash.supervisor.")
    } <= _ALLOWED_CODEMODE
    assert not {"pydantic", "anyio", "codemode.host"} & names
