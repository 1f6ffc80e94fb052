"""A command rebinding a name for the commands after it: the directory first on every command's
PATH (the host's ``rm`` shim) is the host's, beneath its state dir, readable and executable but
never writable from inside the sandbox. It used to be ``$TMPDIR/.codemode-bin``, which the
command writes: a program copied there as ``ls`` ran in place of ``ls`` in every later command
of the session (a denied command ran under an allowed name)."""

from __future__ import annotations

from pathlib import Path

import pytest

from codemode.sandbox._landlock import landlock_status
from tests.security._host_driver import run_host

pytestmark = pytest.mark.skipif(landlock_status().abi < 3, reason="confined commands need Landlock ABI >= 3")

_PLANT = (
    'for d in "${PATH%%:*}" "$TMPDIR/.codemode-bin"; do '
    'mkdir -p "$d" 2>/dev/null; printf \'#!/bin/sh\\necho REBOUND\\n\' > "$d/ls" 2>/dev/null '
    '&& chmod +x "$d/ls" && echo "planted in $d"; done; echo tried'
)


def test_a_program_planted_first_on_path_does_not_run_as_a_later_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg"))
    workspace, state = tmp_path / "ws", tmp_path / "state"
    workspace.mkdir()
    (workspace / "kept").write_text("x\n")
    answers = run_host(
        workspace,
        state,
        [
            {"command": _PLANT},
            {"command": "ls"},
            {"command": 'echo "first=${PATH%%:*}"'},
            {"command": "touch gone && rm gone && echo removed"},  # the real shim still runs
        ],
    )
    assert "tried" in answers[0]["text"]
    assert "REBOUND" not in answers[1]["text"] and "kept" in answers[1]["text"]
    first = answers[2]["text"].split("first=", 1)[1].split()[0]
    assert Path(first).resolve() == (state / "bin").resolve()
    assert f"planted in {first}" not in answers[0]["text"]
    assert "removed" in answers[3]["text"]
    assert [t["path"] for t in answers[3]["data"]["trashed"]] == [str(workspace / "gone")]
