"""The ``bash`` tool and its process manager (foreground, hand-off, background PTY processes).

Public surface (wired by the host and the CLI):

* ``ProcessManager(archive, *, handoff_seconds=10.0, max_background_per_session=32,
  redactor=None, environ=None)``: construct it *before* the state's upkeep
  (``State.maintain()``): its own start-up upkeep pins the logs of undelivered completions.
* ``extension()``: the ``bash`` tool plus its guidance text.
* ``pending_notifications(session_id) -> list[Notification]`` (completions, keyword reports,
  Monitor events) and ``ack(session_id, ids) -> claimed ids`` (whoever acks first delivers).
* For the Monitor extension: ``run_spec``, ``start_watcher``, ``watcher``, ``list_watchers``,
  ``await events(...)``, ``await wait(...)``, ``await stop(...)``.
* ``await close_session(session_id)``, ``await aclose()``.
* For the CLI: ``list_processes(session_id | None)``, ``await read(session_id, process_id,
  offset, max_bytes, wait_ms)``, ``await stop(session_id, process_id)``, ``await
  write(session_id, process_id, text)``, ``owner_of(process_id)``.
* For the console: ``process_row(session_id, process_id)``, ``notifications_since(after)``
  (every session's, delivered or not; nothing acknowledged), ``await write(..., operator=True)``
  and ``take_over``/``hand_back``/``taken_over(process_id)`` (a person has the terminal; the
  model's writes are refused with ``taken_over`` meanwhile).

Design notes:

* Foreground: ``bash -c`` in a new session, stdin closed, pipes read on the event loop (in a
  worker thread once output is large); confined commands start through ``Confinement.spawn``
  (``posix_spawn`` of an exec helper that confines itself, then executes bash; the host stays
  unconfined).
* Background: one small supervisor process per command (the ``supervisor`` package) owns the PTY,
  writes the raw log into the archive's blob file and records the exit and the completion in
  SQLite (``_records.py``); it outlives the host.
* A promoted run stays the same piped process; at the hand-off its pipes go to a new
  supervisor that traces it (``PTRACE_SEIZE``, exit stop) for its exit status, so it outlives
  the host like a background process. Where that cannot be done it is not promoted.
* A read or wait that shows an exit delivers the completion; waiting reads are paced (they
  return once output is quiet for 200 ms, at ``max_bytes``, or at the end).
"""

from typing import TYPE_CHECKING

from codemode._lazy import lazy_exports

if TYPE_CHECKING:
    from codemode.tools.bash._completions import Notification
    from codemode.tools.bash._gate import AfterRun, CommandGate, CommandPlan
    from codemode.tools.bash._manager import ProcessManager
    from codemode.tools.bash._packages import PackageManager, find_package_manager, os_release

if not TYPE_CHECKING:  # each name loads its module at first use (codemode._lazy)
    __getattr__, __dir__ = lazy_exports(
        __name__,
        {
            "._completions": ("Notification",),
            "._gate": (
                "AfterRun",
                "CommandGate",
                "CommandPlan",
            ),
            "._manager": ("ProcessManager",),
            "._packages": (
                "PackageManager",
                "find_package_manager",
                "os_release",
            ),
        },
    )

__all__ = [
    "AfterRun",
    "CommandGate",
    "CommandPlan",
    "Notification",
    "PackageManager",
    "ProcessManager",
    "find_package_manager",
    "os_release",
]
