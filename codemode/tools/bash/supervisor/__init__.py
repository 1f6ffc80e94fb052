"""The supervisor of one background process: owns its output, writes its log, records its exit.

Three kinds (``mode`` in the spec): a background run (``pty``: it starts the command on a PTY,
passes input to it, sends keyword reports, stops it at its ``timeout_seconds``); a Monitor
watcher (``watch``: it starts the command with piped output; each complete stdout line is an
event, coalesced and rate limited, stderr only goes to the log; its limits stop it); and a
promoted run (``adopt``: the host passes the pipes of a foreground command it started, and the
supervisor traces the command, which is not its child, to learn its exit status).

Started by the host as ``python -I -S <this package's directory> SITE_DIRS...`` in a new
session, with the JSON spec on stdin (``__main__.py``). It forks once so the host can reap the
first process at once; the second lives on without the host (init adopts it). It imports only
the standard library (the redactor for its notification line adds hyperscan and re2), and of
``codemode`` only the stdlib-only modules it shares with the host: the record SQL
(``codemode/state/_processes.py``), the capped log (``codemode/state/_capped.py``), the
launch primitive (``codemode/sandbox/_spawn.py``) and process identity
(``codemode/sandbox/_procstat.py``). Run as a directory, ``__main__`` registers
codemode's packages bare (their ``__init__`` would import the whole host, pydantic and anyio
with it) and then imports those modules normally; so a hundred supervisors stay cheap.
(``python -m codemode.tools.bash.supervisor`` also runs it, with the whole package loaded.)

Modules: ``_supervise`` (the life of one supervisor, ``main``), ``_pty`` (the terminal and its
input socket), ``_copier`` (copying output to the log, ending the command's tree), ``_hooks``
(keyword reports, the output's tail, a watcher's events), ``_trace`` (a promoted run's exit
status).

Steps: open a PTY and start ``bash -c COMMAND`` on it through the sandbox's exec helper (the
host prepared every layer and passed their fds: the same launch path as foreground commands),
record pid and start time, answer the host with one JSON line on stdout, then copy PTY output
to the log file and input to the PTY until the command exits; end what is left in its cgroup;
finally record the exit code and queue the completion in one transaction.

Input arrives on an abstract unix socket whose name is in the process record; a connection is
accepted only after it sends the record's secret token (the state database, which holds it,
is out of reach of confined commands, and Landlock's scoping keeps them from abstract sockets
outside their sandbox), so no other command can type into this one.
"""

from codemode.tools.bash.supervisor._pty import control_token, read_left

__all__ = ["control_token", "read_left"]
