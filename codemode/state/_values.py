"""Store values: the JSON values a program keeps per session (``store.get/set/delete/keys``)."""

from __future__ import annotations

import json
import time

from codemode.errors import ErrorCode, ToolError
from codemode.state._database import SqlDatabase, host_faults

__all__ = [
    "STORE_KEY_MAX_CHARS",
    "STORE_SESSION_MAX_BYTES",
    "STORE_VALUE_MAX_BYTES",
    "SessionValues",
    "ValueStore",
]

STORE_VALUE_MAX_BYTES = 1024 * 1024
"""Largest store value (UTF-8 bytes of its JSON text)."""
STORE_SESSION_MAX_BYTES = 16 * 1024 * 1024
"""Largest total of one session's store values plus keys (UTF-8 bytes)."""
STORE_KEY_MAX_CHARS = 256
"""Longest store key."""


def _check_key(key: str) -> None:
    if not isinstance(key, str) or not 1 <= len(key) <= STORE_KEY_MAX_CHARS:
        shown = key if not isinstance(key, str) else f"{len(key)} characters"
        raise ToolError(
            f"store key must be a string of 1 to {STORE_KEY_MAX_CHARS} characters (got {shown})",
            {"field": "key", "limit": STORE_KEY_MAX_CHARS},
            code=ErrorCode.TOOL_FAILED,
        )


class ValueStore:
    """Every session's store values in the state database.

    Every method raises `HostFault` when the database fails (never the model's fault).
    """

    def __init__(self, db: SqlDatabase) -> None:
        self._db = db

    def for_session(self, session_id: str) -> SessionValues:
        """The values of one session: what a program's ``store`` reaches."""
        return SessionValues(self, session_id)

    @host_faults
    def get(self, session_id: str, key: str) -> str | None:
        """Return the JSON text stored under ``key``, or ``None`` when the key is missing.

        A stored JSON ``null`` comes back as the text ``"null"``, so missing and null differ.

        Raises:
            ToolError: The key is not 1 to 256 characters.
        """
        _check_key(key)
        with self._db.connection() as conn:
            row = conn.execute(
                "SELECT value FROM store_values WHERE session_id = ? AND key = ?", (session_id, key)
            ).fetchone()
        return None if row is None else str(row[0])

    @host_faults
    def set(self, session_id: str, key: str, value_json: str) -> None:
        """Store a JSON value under ``key`` for the session (replacing any old value).

        Raises:
            ToolError: The key is not 1 to 256 characters, the text is not JSON, the value is
                over 1 MiB, or the session's values would total over 16 MiB.
        """
        _check_key(key)
        if not isinstance(value_json, str):
            raise ToolError("store value must be JSON text", {"field": "value"}, code=ErrorCode.TOOL_FAILED)
        size = len(value_json.encode("utf-8"))
        if size > STORE_VALUE_MAX_BYTES:
            raise ToolError(
                f"store value for {key!r} is {size} bytes of JSON; the limit is "
                f"{STORE_VALUE_MAX_BYTES} bytes (1 MiB) per value: store less, or split it over several keys",
                {"field": "value", "limit": STORE_VALUE_MAX_BYTES, "size": size},
                code=ErrorCode.TOOL_FAILED,
            )
        try:
            json.loads(value_json)
        except ValueError as exc:
            raise ToolError(
                f"store value for {key!r} is not valid JSON: {exc}",
                {"field": "value"},
                code=ErrorCode.TOOL_FAILED,
            ) from exc
        cost = size + len(key.encode("utf-8"))
        with self._db.transaction("store_values") as conn:
            (used,) = conn.execute(
                f"SELECT COALESCE(SUM(size + {self._db.bytes_of('key')}), 0) FROM store_values"
                " WHERE session_id = ? AND key != ?",
                (session_id, key),
            ).fetchone()
            used = int(used)
            if used + cost > STORE_SESSION_MAX_BYTES:
                raise ToolError(
                    f"store is full for this session: {used} bytes used, this value needs {cost} more, the "
                    f"limit is {STORE_SESSION_MAX_BYTES} bytes (16 MiB) per session; delete keys you no "
                    "longer need (store.delete)",
                    {"limit": STORE_SESSION_MAX_BYTES, "used": used, "size": cost},
                    code=ErrorCode.TOOL_FAILED,
                )
            conn.execute(
                "INSERT INTO store_values (session_id, key, value, size, updated) VALUES (?, ?, ?, ?, ?)"
                " ON CONFLICT (session_id, key) DO UPDATE SET value = excluded.value, size = excluded.size,"
                " updated = excluded.updated",
                (session_id, key, value_json, size, time.time()),
            )

    @host_faults
    def delete(self, session_id: str, key: str) -> bool:
        """Delete ``key``; return whether it existed.

        Raises:
            ToolError: The key is not 1 to 256 characters.
        """
        _check_key(key)
        return bool(
            self._db.execute("DELETE FROM store_values WHERE session_id = ? AND key = ?", (session_id, key))
        )

    @host_faults
    def keys(self, session_id: str) -> list[str]:
        """The session's keys, sorted."""
        with self._db.connection() as conn:
            rows = conn.execute(
                "SELECT key FROM store_values WHERE session_id = ? ORDER BY key", (session_id,)
            ).fetchall()
        return [str(row[0]) for row in rows]


class SessionValues:
    """One session's store values (`ValueStore` bound to a session id): the store interface a
    program's ``store`` calls reach through the tool context. Same errors as `ValueStore`."""

    def __init__(self, store: ValueStore, session_id: str) -> None:
        self._store = store
        self.session_id = session_id

    def get(self, key: str) -> str | None:
        """The JSON text under ``key``, or None (`ValueStore.get`)."""
        return self._store.get(self.session_id, key)

    def set(self, key: str, value_json: str) -> None:
        """Store JSON text under ``key`` (`ValueStore.set`)."""
        self._store.set(self.session_id, key, value_json)

    def delete(self, key: str) -> bool:
        """Delete ``key``; whether it existed (`ValueStore.delete`)."""
        return self._store.delete(self.session_id, key)

    def keys(self) -> list[str]:
        """The keys, sorted (`ValueStore.keys`)."""
        return self._store.keys(self.session_id)
