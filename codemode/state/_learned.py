"""Result types learned from upstream MCP tools, kept per server and tool."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping

from codemode.state._database import SqlDatabase, host_faults

__all__ = ["LearnedTypes"]


class LearnedTypes:
    """JSON Schemas observed from tools' results (``upstream_result_types``). Every method
    raises `HostFault` when the database fails."""

    def __init__(self, db: SqlDatabase) -> None:
        self._db = db

    @host_faults
    def for_server(self, server: str) -> dict[str, dict[str, object]]:
        """The server's learned schemas, by the tool's original name."""
        with self._db.connection() as conn:
            rows = conn.execute(
                "SELECT tool, schema FROM upstream_result_types WHERE server = ?", (server,)
            ).fetchall()
        return {tool: json.loads(schema) for tool, schema in rows}

    @host_faults
    def put(self, server: str, tool: str, schema: Mapping[str, object]) -> None:
        """Keep the schema observed for one tool (replacing an older one)."""
        self._db.execute(
            "INSERT INTO upstream_result_types (server, tool, schema, observed) VALUES (?, ?, ?, ?)"
            " ON CONFLICT (server, tool) DO UPDATE SET schema = excluded.schema, observed = excluded.observed",
            (server, tool, json.dumps(schema, sort_keys=True), time.time()),
        )
