"""File watchers and dev servers: commands that never end by themselves (a table), and the check
of one argv against it."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["WATCHERS", "Watcher", "watcher"]


@dataclass(frozen=True)
class Watcher:
    """Commands that watch for changes (or serve) until stopped.

    Attributes:
        names: Executable names.
        flags: Options that make it watch (empty with ``subcommands`` empty: it always does).
        subcommands: First arguments that make it watch; ``""`` means no subcommand at all.
        why: What it does, for the message.
    """

    names: frozenset[str]
    flags: frozenset[str] = frozenset()
    subcommands: frozenset[str] = frozenset()
    why: str = "watches for changes"


def _watch(
    names: str, flags: str = "", subcommands: tuple[str, ...] = (), why: str = "watches for changes"
) -> Watcher:
    return Watcher(frozenset(names.split()), frozenset(flags.split()), frozenset(subcommands), why)


WATCHERS: tuple[Watcher, ...] = (
    _watch("nodemon chokidar onchange watchexec entr fswatch watchmedo ptw pytest-watch cargo-watch"),
    _watch("live-server browser-sync webpack-dev-server", why="serves and reloads on changes"),
    _watch("watch", why="reruns a command forever"),
    _watch("tsc webpack rollup babel sass coffee tailwindcss mocha ava esbuild", "-w"),
    _watch("vite", subcommands=("", "dev", "serve"), why="runs a dev server"),
    _watch("next nuxt nuxi astro remix svelte-kit", subcommands=("dev",), why="runs a dev server"),
    _watch("vitest", subcommands=("watch", "dev")),
    _watch("parcel", subcommands=("", "serve", "watch"), why="runs a dev server"),
    _watch("ng", subcommands=("serve",), why="runs a dev server"),
    _watch("webpack", subcommands=("serve",), why="runs a dev server"),
    _watch("react-scripts", subcommands=("start",), why="runs a dev server"),
    _watch("cargo", subcommands=("watch",)),
    _watch("tail", "-f -F --follow", why="follows a file"),
    _watch("inotifywait", "-m --monitor"),
    _watch("uvicorn hypercorn gunicorn flask", "--reload", why="serves and reloads on changes"),
)
_WATCHERS_BY_NAME: dict[str, list[Watcher]] = {}
for _rule in WATCHERS:
    for _name in _rule.names:
        _WATCHERS_BY_NAME.setdefault(_name, []).append(_rule)
_WATCH_FLAGS = frozenset({"--watch", "--watchAll", "--watch=true", "--watchAll=true"})


def watcher(words: Sequence[str | None]) -> str | None:
    """Why this argv is a watcher (a phrase), or None when it is not one."""
    if not words or words[0] is None:
        return None
    args = [w for w in words[1:] if w is not None]
    if any(a in _WATCH_FLAGS for a in args):
        return "watches for changes (--watch)"
    name = os.path.basename(words[0])
    for rule in _WATCHERS_BY_NAME.get(name, ()):
        if rule.flags:
            short = {f for f in rule.flags if len(f) == 2 and f[0] == "-" and f[1] != "-"}
            for arg in args:
                if arg in rule.flags or arg.split("=", 1)[0] in rule.flags:
                    return rule.why
                if short and arg.startswith("-") and not arg.startswith("--"):
                    if any(f"-{c}" in short for c in arg[1:]):
                        return rule.why
            continue
        if rule.subcommands:
            first = next((a for a in args if not a.startswith("-")), "")
            if first in rule.subcommands:
                return rule.why
            continue
        return rule.why
    return None
