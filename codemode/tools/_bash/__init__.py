"""The ``bash`` tool and its process manager (foreground, hand-off, background PTY processes).

Public surface (wired by the host and the CLI):

* ``ProcessManager(archive, *, handoff_seconds=10.0, max_background_per_session=32,
  redactor=None, environ=None)``: construct it *before* the state's upkeep
  (``State.maintain()``): its own start-up upkeep pins the logs of undelivered completions.
* ``extension()``: the ``bash`` tool plus its guidance text.
* ``pending_notifications(session_id) -> list[Notification]`` and ``ack(session_id, ids)``.
* ``await close_session(session_id)``, ``await aclose()``.
* For the CLI: ``list_processes(session_id | None)``, ``await read(session_id, process_id,
  offset, max_bytes, wait_ms)``, ``await stop(session_id, process_id)``, ``await
  write(session_id, process_id, text)``, ``owner_of(process_id)``.

Design notes:

* Foreground: ``bash -c`` in a new session, stdin closed, pipes read on the event loop (in a
  worker thread once output is large); confined commands start through ``Confinement.spawn``
  (``posix_spawn`` of an exec helper that confines itself, then executes bash; the host stays
  unconfined).
* Background: one small supervisor process per command (``_supervisor.py``) owns the PTY,
  writes the raw log into the archive's blob file and records the exit and the completion in
  SQLite (``_records.py``); it outlives the host.
* A promoted run stays the same piped process and depends on this host for its output; it is
  stopped at ``aclose()`` and reported ``lost`` (exit code unknown) if the host dies.
"""

from codemode.tools._bash._gate import AfterRun, CommandGate, CommandPlan
from codemode.tools._bash._manager import Notification, ProcessManager

__all__ = ["AfterRun", "CommandGate", "CommandPlan", "Notification", "ProcessManager"]
