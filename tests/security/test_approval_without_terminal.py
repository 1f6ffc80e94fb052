"""A flag that asks with no one to ask refuses, loudly: ``codemode call``/``run`` with
``--approve-commands`` asks at the terminal, and without one exits with a usage error before
anything runs. Real ``codemode`` subprocesses; the terminal is a real pseudo-terminal."""

from __future__ import annotations

import json
import os
import selectors
import subprocess
import sys
import time
from pathlib import Path

import pytest

_BOUND_SECONDS = 60.0  # an upper bound for a wait, never a timing assertion


def _args(tmp_path: Path, *words: str) -> list[str]:
    (tmp_path / "ws").mkdir(exist_ok=True)
    return [
        sys.executable,
        "-m",
        "codemode",
        *words,
        "--workspace",
        str(tmp_path / "ws"),
        "--state-dir",
        str(tmp_path / "state"),
        "--approve-commands",
    ]


def _env(tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "CODEMODE_HOME": str(tmp_path / "state")}


@pytest.mark.parametrize("subcommand", ["call", "run"])
def test_approve_commands_without_a_terminal_refuses_before_running_anything(
    subcommand: str, tmp_path: Path
) -> None:
    if subcommand == "call":
        words = ["call", "bash", json.dumps({"command": "touch marker"})]
    else:
        program = tmp_path / "prog.js"
        program.write_text('await tools.bash({command: "touch marker"}); print("ran")')
        words = ["run", str(program)]
    done = subprocess.run(
        _args(tmp_path, *words),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        env=_env(tmp_path),
        timeout=_BOUND_SECONDS,
        check=False,
    )
    assert done.returncode == 2, done
    assert "--approve-commands asks at the terminal" in done.stderr
    assert "there is no terminal here" in done.stderr and "nothing was run" in done.stderr
    assert "Traceback" not in done.stderr and done.stdout == ""
    assert not (tmp_path / "ws" / "marker").exists()


def test_approve_commands_with_a_read_only_command_still_needs_a_terminal(tmp_path: Path) -> None:
    # Refused up front, whatever the command: the flag itself has no one to ask.
    done = subprocess.run(
        _args(tmp_path, "call", "bash", json.dumps({"command": "ls"})),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        env=_env(tmp_path),
        timeout=_BOUND_SECONDS,
        check=False,
    )
    assert done.returncode == 2 and "--approve-commands" in done.stderr


class _Terminal:
    """A ``codemode`` subprocess on a pseudo-terminal: stdin, stdout and stderr all on it."""

    def __init__(self, argv: list[str], env: dict[str, str]) -> None:
        self.master, slave = os.openpty()
        self.proc = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave, env=env, close_fds=True)
        os.close(slave)
        self.seen = b""

    def read_until(self, text: str | None) -> str:
        """What the terminal showed up to and including ``text`` (None: up to its end, when the
        child exits); fails past the bound."""
        deadline = time.monotonic() + _BOUND_SECONDS
        with selectors.DefaultSelector() as selector:
            selector.register(self.master, selectors.EVENT_READ)
            while text is None or text.encode() not in self.seen:
                left = deadline - time.monotonic()
                assert left > 0, f"never saw {text!r}; the terminal showed {self.seen!r}"
                if selector.select(left):
                    try:
                        chunk = os.read(self.master, 4096)
                    except OSError:  # EIO: the child closed the terminal
                        chunk = b""
                    if not chunk:
                        break
                    self.seen += chunk
        assert text is None or text.encode() in self.seen, f"never saw {text!r}; it showed {self.seen!r}"
        return self.seen.decode(errors="replace")

    def answer(self, text: str) -> None:
        os.write(self.master, text.encode())

    def finish(self) -> int:
        self.read_until(None)
        code = self.proc.wait(timeout=_BOUND_SECONDS)
        os.close(self.master)
        return code


@pytest.mark.parametrize(("answer", "created"), [("n\n", False), ("y\n", True), ("\n", False)])
def test_approve_commands_asks_at_a_terminal(answer: str, created: bool, tmp_path: Path) -> None:
    terminal = _Terminal(
        _args(tmp_path, "call", "bash", json.dumps({"command": "touch marker && echo made"})), _env(tmp_path)
    )
    try:
        shown = terminal.read_until("[N]o: ")
        assert "approve run `touch marker && echo made`?" in shown
        assert not (tmp_path / "ws" / "marker").exists()  # asked before it ran
        terminal.answer(answer)
        code = terminal.finish()
    finally:
        if terminal.proc.poll() is None:
            terminal.proc.kill()
            terminal.proc.wait()
    shown = terminal.seen.decode(errors="replace")
    assert (tmp_path / "ws" / "marker").exists() is created
    if created:
        assert code == 0 and "made" in shown
    else:
        assert code == 1 and "refused at the terminal" in shown


def test_a_read_only_command_is_not_asked_about_at_a_terminal(tmp_path: Path) -> None:
    (tmp_path / "ws").mkdir()
    (tmp_path / "ws" / "listed.txt").write_text("x")
    terminal = _Terminal(_args(tmp_path, "call", "bash", json.dumps({"command": "ls"})), _env(tmp_path))
    try:
        shown = terminal.read_until("listed.txt")
        assert terminal.finish() == 0
    finally:
        if terminal.proc.poll() is None:
            terminal.proc.kill()
            terminal.proc.wait()
    assert "approve" not in shown
