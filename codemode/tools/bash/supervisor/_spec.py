"""The spec a supervisor reads on stdin (JSON from the host's ``_background``), as TypedDicts."""

from __future__ import annotations

from typing import TypedDict

from codemode.sandbox._spawn import Layers


class SpecLayers(Layers):
    """The prepared layers' fds, and the command cgroup's ``cgroup.procs`` (opened by the host)."""

    cgroup_procs_fd: int | None


class WatchOptions(TypedDict, total=False):
    """A Monitor watcher's limits (its ``monitor_start`` arguments, and its ``description``)."""

    description: str | None
    timeout_seconds: float
    max_events: int | None
    idle_timeout_seconds: float | None
    coalesce_ms: float
    max_events_per_minute: int


class Spec(TypedDict, total=False):
    """One supervisor's task, by ``mode``: ``pty`` (a background run), ``watch`` (a Monitor
    watcher) or ``adopt`` (a promoted run: ``pid``, ``pid_started``, ``pipes``)."""

    mode: str
    process_id: str
    command: str
    db_path: str
    log_path: str
    cgroup: str | None
    cwd: str
    env: dict[str, str]
    layers: SpecLayers
    input_name: str
    input_token: str
    pty_size: list[int]
    report_on: list[str] | None
    timeout_seconds: float | None
    watch: WatchOptions  # null in the other modes, which never read it
    pid: int
    pid_started: int  # clock ticks since boot (`codemode.sandbox.process_start`)
    pipes: list[int]
