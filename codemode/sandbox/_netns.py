"""A confined command's way to the host's filtering proxy (a network allowlist).

The command gets a network namespace of its own with loopback only (``launcher.c``, word
``net=FD``); the launcher listens there on ``127.0.0.1:PROXY_PORT`` and hands that socket to
the host over a socketpair made here, whose host end the proxy (:mod:`codemode.network`)
serves. The layers behind it: Landlock allows TCP connect to that one port (it matches ports,
not addresses, so it is the second layer, not the only one), and seccomp refuses every socket
but unix, netlink route and TCP (no UDP, no raw or packet sockets, no vsock).
"""

from __future__ import annotations

import socket

from codemode.network import network_proxy

__all__ = ["open_proxy_channel"]


def open_proxy_channel(allow: tuple[str, ...]) -> tuple[int, list[str]]:
    """A socketpair whose host end the proxy serves with ``allow``.

    Returns:
        The command's end (an O_CLOEXEC fd the caller owns and closes after spawning) and the
        list the proxy appends the command's refused connections to.

    Raises:
        OSError: The socketpair cannot be made.
    """
    host_end, command_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET | socket.SOCK_CLOEXEC)
    try:
        channel = network_proxy().attach(host_end, allow)
    except BaseException:
        host_end.close()
        command_end.close()
        raise
    return command_end.detach(), channel.refusals
