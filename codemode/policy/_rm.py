"""The ``rm`` that confined commands find first on PATH: workspace files go to the trash.

Standard library only (it runs as ``python -I -S`` inside the sandbox). It takes GNU rm's
options and messages; each operand inside the workspace (``CODEMODE_TRASH_ROOT``) is moved,
whole, into a new entry of the session's trash inbox (``CODEMODE_TRASH_INBOX``), which the host
then files into the workspace's trash. Operands outside the workspace, and ``--help`` /
``--version``, go to the real ``rm``. An entry is built under a dot name and renamed into place
complete, so the host never files half of one.
"""

from __future__ import annotations

import os
import stat
import sys
import time

# Only what every run needs is imported up front: a Python start is most of this shim's cost.

_USAGE = "Try 'rm --help' for more information."


def _real_rm() -> str:
    """The rm this shim stands in front of: the next one on PATH (never a shim directory)."""
    shim = os.path.realpath(os.environ.get("CODEMODE_SHIM_DIR") or "/nonexistent")
    for folder in os.environ.get("PATH", "").split(os.pathsep):
        if not folder or os.path.basename(folder) == ".codemode-bin" or os.path.realpath(folder) == shim:
            continue
        candidate = os.path.join(folder, "rm")
        if os.access(candidate, os.X_OK) and not os.path.isdir(candidate):
            return candidate
    return "/bin/rm"


def _say(text: str) -> None:
    sys.stderr.write(f"rm: {text}\n")


def _kind(st: os.stat_result) -> str:
    if stat.S_ISLNK(st.st_mode):
        return "symbolic link"
    if stat.S_ISDIR(st.st_mode):
        return "directory"
    return "regular empty file" if st.st_size == 0 else "regular file"


def main(args: list[str]) -> int:
    """Remove (move to the trash) as GNU rm would; the exit status."""
    root = os.environ.get("CODEMODE_TRASH_ROOT")
    inbox = os.environ.get("CODEMODE_TRASH_INBOX")
    real = _real_rm()
    if not root or not inbox:
        os.execv(real, [real, *args])
    options: list[str] = []
    operands: list[str] = []
    force = recursive = empty_dirs = verbose = False
    interactive = "never"
    only = False
    for arg in args:
        if only or arg == "-" or not arg.startswith("-"):
            operands.append(arg)
            continue
        if arg == "--":
            only = True
            continue
        options.append(arg)
        if arg in ("--help", "--version"):
            os.execv(real, [real, arg])
        if arg.startswith("--"):
            name, _, value = arg.partition("=")
            if name == "--force":
                force, interactive = True, "never"
            elif name == "--recursive":
                recursive = True
            elif name == "--dir":
                empty_dirs = True
            elif name == "--verbose":
                verbose = True
            elif name == "--interactive":
                interactive = {"": "always", "always": "always", "once": "never", "never": "never"}.get(
                    value, "always"
                )
                force = False if interactive == "always" else force
            elif name not in ("--one-file-system", "--preserve-root", "--no-preserve-root"):
                _say(f"unrecognized option '{arg}'\n{_USAGE}")
                return 1
            continue
        for letter in arg[1:]:
            if letter == "f":
                force, interactive = True, "never"
            elif letter in "rR":
                recursive = True
            elif letter == "d":
                empty_dirs = True
            elif letter == "v":
                verbose = True
            elif letter == "i":
                interactive, force = "always", False
            elif letter == "I":
                pass  # asks once for many files; moving to the trash is undoable, so no question
            else:
                _say(f"invalid option -- '{letter}'\n{_USAGE}")
                return 1
    if not operands:
        if force:
            return 0
        _say(f"missing operand\n{_USAGE}")
        return 1
    root = os.path.realpath(root)
    status = 0
    outside: list[str] = []
    for operand in operands:
        trimmed = operand.rstrip("/") or "/"
        base = os.path.basename(trimmed)
        if base in (".", ".."):
            _say(f"refusing to remove '.' or '..' directory: skipping '{operand}'")
            status = 1
            continue
        parent = os.path.realpath(os.path.dirname(os.path.abspath(trimmed)))
        full = os.path.join(parent, base)
        if full == root or root.startswith(full + os.sep):
            _say(
                f"refusing to remove '{operand}': it holds the workspace (protected deletes); remove what is inside by name"
            )
            status = 1
            continue
        if not full.startswith(root + os.sep):
            outside.append(operand)
            continue
        try:
            st = os.lstat(full)
        except FileNotFoundError:
            if not force:
                _say(f"cannot remove '{operand}': No such file or directory")
                status = 1
            continue
        except OSError as exc:
            _say(f"cannot remove '{operand}': {exc.strerror}")
            status = 1
            continue
        if stat.S_ISDIR(st.st_mode) and not recursive:
            if not empty_dirs:
                _say(f"cannot remove '{operand}': Is a directory")
                status = 1
                continue
            if os.listdir(full):
                _say(f"cannot remove '{operand}': Directory not empty")
                status = 1
                continue
        if interactive == "always":
            sys.stderr.write(f"rm: remove {_kind(st)} '{operand}'? ")
            sys.stderr.flush()
            if not sys.stdin.readline().strip().lower().startswith("y"):
                continue
        error = _move(full, st, inbox, operand)
        if error is not None:
            _say(f"cannot remove '{operand}': {error}")
            status = 1
        elif verbose:
            print(f"removed {'directory ' if stat.S_ISDIR(st.st_mode) else ''}'{operand}'")
    if outside:
        pid = os.posix_spawn(real, [real, *options, "--", *outside], os.environ)
        status = max(status, os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
    return status


def _json(text: str) -> str:
    """``text`` as a JSON string (the json module costs this shim a third of its start-up).
    Control characters and the lone surrogates of undecodable file names are escaped."""
    out = ['"']
    for char in text:
        code = ord(char)
        if char in '"\\':
            out.append("\\" + char)
        elif code < 0x20 or 0xD800 <= code <= 0xDFFF:
            out.append(f"\\u{code:04x}")
        else:
            out.append(char)
    out.append('"')
    return "".join(out)


def _move(full: str, st: os.stat_result, inbox: str, operand: str) -> str | None:
    """Move ``full`` into a new inbox entry; an error message, or None."""
    entry_id = time.strftime("%Y%m%d-%H%M%S-") + os.urandom(3).hex()
    building = os.path.join(inbox, f".{entry_id}")
    try:
        os.makedirs(building, mode=0o700)
        kind = "directory" if stat.S_ISDIR(st.st_mode) else "symlink" if stat.S_ISLNK(st.st_mode) else "file"
        fields = {"id": entry_id, "path": full, "operand": operand, "cwd": os.getcwd(), "kind": kind}
        text = ", ".join(f"{_json(k)}: {_json(v)}" for k, v in fields.items())
        with open(os.path.join(building, "meta.json"), "w", encoding="utf-8") as handle:
            handle.write(f'{{{text}, "deleted_at": {time.time()!r}}}')
        item = os.path.join(building, "item")
        try:
            os.rename(full, item)
        except OSError as exc:
            if exc.errno != 18:  # EXDEV: another file system; copy, then delete
                raise
            import shutil

            shutil.move(full, item)
        os.rename(building, os.path.join(inbox, entry_id))
    except OSError as exc:
        import shutil

        shutil.rmtree(building, ignore_errors=True)
        return exc.strerror or str(exc)
    return None


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
