"""The PTY of a background run and the input it takes (from an authenticated abstract socket)."""

from __future__ import annotations

import fcntl
import hmac
import os
import socket
import struct
import termios

READ = 1 << 16
_TOKEN_BYTES = 64  # hex of 32 random bytes


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


def serve_input(server: socket.socket, token: bytes, sink: int) -> None:
    """Accept input connections for the life of the process (a daemon thread).

    A connection must start with ``token``; the rest of its bytes go to ``sink`` (the pipe the
    copier forwards to the PTY), in order, one connection at a time.
    """
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
                if not hmac.compare_digest(received, token):
                    continue
                while chunk := conn.recv(READ):
                    view = memoryview(chunk)
                    while view:
                        view = view[os.write(sink, view) :]
                conn.sendall(b"ok")
            except OSError:
                continue
