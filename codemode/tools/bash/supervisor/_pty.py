"""The PTY of a background run and the input it takes (from an authenticated abstract socket);
reading the last of what a PTY or pipe holds."""

from __future__ import annotations

import fcntl
import hashlib
import hmac
import os
import socket
import struct
import termios
from collections.abc import Iterator

READ = 1 << 16
_TOKEN_BYTES = 64  # hex of 32 random bytes


def read_left(fd: int) -> Iterator[bytes]:
    """What pipe or PTY ``fd`` holds now, read without waiting: the last of a command's output
    once the time to drain it is over. Only what is there when it starts (``FIONREAD``), so a
    descendant that goes on writing cannot keep the reader here."""
    try:
        left: int = struct.unpack("i", fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0"))[0]
    except OSError:
        return
    while left > 0:
        try:
            data = os.read(fd, min(left, READ))
        except OSError:  # EAGAIN, or EIO from a PTY whose other side is gone
            return
        if not data:
            return
        left -= len(data)
        yield data


def open_pty(rows: int, cols: int) -> tuple[int, str]:
    """A new PTY: the master fd (kept here) and the terminal's path (opened by the command).

    Echo is off (input written by the model is not shown twice); the window is ``rows`` x
    ``cols``.
    """
    master, slave = os.openpty()
    try:
        attrs = termios.tcgetattr(slave)
        attrs[3] &= ~termios.ECHO
        termios.tcsetattr(slave, termios.TCSANOW, attrs)
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
        path = os.ttyname(slave)
    finally:
        os.close(slave)
    os.set_inheritable(master, False)
    return master, path


def control_token(token: bytes) -> bytes:
    """The token of a window-size change: derived from the input token (as long, so a
    connection is told apart by its first bytes; input bytes never follow this one)."""
    return hashlib.sha256(b"codemode-pty-resize:" + token).hexdigest().encode()


def serve_input(server: socket.socket, token: bytes, sink: int, master: int | None = None) -> None:
    """Accept input connections for the life of the process (a daemon thread).

    A connection must start with ``token``; the rest of its bytes go to ``sink`` (the pipe the
    copier forwards to the PTY), in order, one connection at a time. One that starts with
    `control_token` instead sends ``ROWS COLS`` (ASCII, at most 32 bytes): the PTY's window
    (``master``) takes that size, and the kernel tells the command (SIGWINCH).
    """
    resize = control_token(token)
    while True:
        try:
            conn, _ = server.accept()
        except OSError:
            return
        with conn:
            conn.settimeout(10)
            try:
                received = b""
                while len(received) < len(token):
                    chunk = conn.recv(len(token) - len(received))
                    if not chunk:
                        break
                    received += chunk
                if master is not None and hmac.compare_digest(received, resize):
                    _resize(conn, master)
                    continue
                if not hmac.compare_digest(received, token):
                    continue
                while chunk := conn.recv(READ):
                    view = memoryview(chunk)
                    while view:
                        view = view[os.write(sink, view) :]
                conn.sendall(b"ok")
            except OSError:
                continue


def _resize(conn: socket.socket, master: int) -> None:
    """Read ``ROWS COLS`` from ``conn`` and set the PTY's window to it (answer ``ok``)."""
    data = b""
    while len(data) < 32 and (chunk := conn.recv(32 - len(data))):
        data += chunk
    try:
        rows, cols = (int(part) for part in data.split())
    except ValueError:
        return
    if 1 <= rows <= 1000 and 1 <= cols <= 1000:
        fcntl.ioctl(master, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
        conn.sendall(b"ok")
