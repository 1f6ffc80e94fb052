"""The user's MCP servers as configuration: the ``mcpServers`` JSON format MCP clients use.

```json
{"mcpServers": {
  "github": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-github"],
             "env": {"GITHUB_TOKEN": "${GITHUB_TOKEN}"}, "cwd": "~", "timeout": 60},
  "docs": {"url": "https://example.com/mcp", "headers": {"Authorization": "Bearer ${DOCS_TOKEN}"}},
  "local": {"command": "./server.py", "sandbox": "workspace-write"}
}}
```

``${VAR}`` (and ``${VAR:-default}``) in ``command``, ``args``, ``env``, ``cwd``, ``url`` and
``headers`` is expanded from the environment when the file is read; an unset variable without a
default is an error naming it. Values of ``env`` and ``headers`` are secrets: they are never
printed, and `McpServerConfig.redactor` redacts them wherever a server echoes them.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Literal, NotRequired, TypedDict

import pydantic

from codemode.errors import UserError
from codemode.state import Redactor

__all__ = [
    "McpServerConfig",
    "McpServerReport",
    "PublicConfig",
    "Reachability",
    "ServerInfo",
    "load_mcp_config",
    "parse_mcp_config",
]

DEFAULT_CALL_TIMEOUT = 60.0
_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


class PublicConfig(TypedDict):
    """What may be shown of a server's configuration (`McpServerConfig.public`): ``command``,
    ``args`` and ``sandbox`` (``unconfined`` when None) for a stdio server, ``url`` for an HTTP
    one; ``env`` and ``headers``: their names only, when there are any."""

    name: str
    transport: Literal["stdio", "http"]
    timeout: float
    command: NotRequired[str]
    args: NotRequired[list[str]]
    sandbox: NotRequired[str]
    env: NotRequired[list[str]]
    url: NotRequired[str | None]
    headers: NotRequired[list[str]]


class ServerInfo(TypedDict):
    """A connected server's name and version, as it gave them."""

    name: str
    version: str


class Reachability(TypedDict):
    """Whether a server is reachable, with how many tools (``server``: its name and version),
    or why not (``reason``, ``log_tail``: the end of its log)."""

    reachable: bool
    tools: int
    server: NotRequired[ServerInfo]
    reason: NotRequired[str]
    log_tail: NotRequired[str]


class McpServerReport(PublicConfig, Reachability):
    """One server in ``codemode doctor`` (`Host.mcp_servers_report`): its shown configuration,
    its identifier and log file, and whether it is reachable."""

    identifier: str
    log: str


class McpServerConfig(pydantic.BaseModel):
    """One upstream MCP server: a stdio command or a streamable HTTP ``url`` (exactly one).

    Attributes:
        name: The server's name as configured (its key under ``mcpServers``).
        command: Program to start (stdio transport).
        args: Its arguments.
        env: Extra environment variables for it (secrets: never printed).
        cwd: Its working directory (default: the workspace).
        url: Streamable HTTP endpoint.
        headers: HTTP headers sent with every request (secrets: never printed).
        timeout: Seconds one tool call may take before it is cancelled upstream.
        sandbox: None (default): the command runs unconfined, as other MCP clients run it;
            ``workspace-write`` or ``read-only``: started through codemode's sandbox.
        connect_timeout: Seconds to start the server and list its tools.
    """

    model_config = pydantic.ConfigDict(extra="forbid", frozen=True)

    name: str
    command: str | None = None
    args: tuple[str, ...] = ()
    env: dict[str, str] = pydantic.Field(default_factory=dict, repr=False)
    cwd: str | None = None
    url: str | None = None
    headers: dict[str, str] = pydantic.Field(default_factory=dict, repr=False)
    timeout: float = pydantic.Field(DEFAULT_CALL_TIMEOUT, gt=0)
    connect_timeout: float = pydantic.Field(30.0, gt=0)
    sandbox: Literal["workspace-write", "read-only"] | None = None

    @pydantic.model_validator(mode="after")
    def _one_transport(self) -> McpServerConfig:
        if (self.command is None) == (self.url is None):
            raise ValueError('give either "command" (stdio) or "url" (streamable HTTP)')
        if self.url is not None and (self.sandbox is not None or self.args or self.env or self.cwd):
            raise ValueError('"args", "env", "cwd" and "sandbox" are for stdio servers (with "command")')
        if self.command is not None and self.headers:
            raise ValueError('"headers" are for HTTP servers (with "url")')
        return self

    @property
    def transport(self) -> Literal["stdio", "http"]:
        """``stdio`` or ``http``."""
        return "stdio" if self.command is not None else "http"

    def redactor(self) -> Redactor:
        """The redactor for the values of ``env`` and ``headers`` (the one `Redactor`, over
        those values under secret-looking names, so it redacts every one of them)."""
        secrets = {f"MCP_{_upper(self.name)}_{_upper(k)}_SECRET": v for k, v in self.env.items()}
        secrets.update({f"MCP_{_upper(self.name)}_{_upper(k)}_SECRET": v for k, v in self.headers.items()})
        # "Bearer <token>": the token alone too, where a server echoes it without the scheme.
        for key, value in self.headers.items():
            scheme, _, token = value.partition(" ")
            if token and scheme.lower() in ("bearer", "token", "basic"):
                secrets[f"MCP_{_upper(self.name)}_{_upper(key)}_TOKEN"] = token
        return Redactor(secrets)

    def public(self, redact: Callable[[str], str] = str) -> PublicConfig:
        """What may be shown (doctor, errors): no env or header values, only their names;
        ``redact`` is applied to the texts a ``${VAR}`` may have filled (name, command, args, url)."""
        shown: PublicConfig = {
            "name": redact(self.name),
            "transport": self.transport,
            "timeout": self.timeout,
        }
        if self.command is not None:
            shown["command"] = redact(self.command)
            shown["args"] = [redact(a) for a in self.args]
            shown["sandbox"] = self.sandbox or "unconfined"
            if self.env:
                shown["env"] = sorted(self.env)
        else:
            shown["url"] = None if self.url is None else redact(self.url)
            if self.headers:
                shown["headers"] = sorted(self.headers)
        return shown


def _upper(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9]", "_", text).upper()


def _expand(value: str, environ: Mapping[str, str], where: str) -> str:
    def one(match: re.Match[str]) -> str:
        name, default = match.group(1), match.group(2)
        found = environ.get(name)
        if found is not None:
            return found
        if default is not None:
            return default
        raise UserError(
            f"{where}: ${{{name}}} is not set in the environment (set it, or write ${{{name}:-default}})"
        )

    return _VAR.sub(one, value)


def parse_mcp_config(
    data: Any, *, source: str = "the MCP configuration", environ: Mapping[str, str] | None = None
) -> list[McpServerConfig]:
    """Servers from a parsed ``{"mcpServers": {...}}`` object (or the bare mapping of servers).

    Raises:
        UserError: The shape is wrong, a server is invalid, or a ``${VAR}`` is not set
            (the message names the server and the field, never a secret's value).
    """
    env = os.environ if environ is None else environ
    if isinstance(data, dict) and "mcpServers" in data:
        data = data["mcpServers"]
    if not isinstance(data, dict):
        raise UserError(f'{source}: expected {{"mcpServers": {{"name": {{...}}}}}}')
    servers: list[McpServerConfig] = []
    for name, raw in data.items():
        where = f"{source}: server {name!r}"
        if not isinstance(raw, dict):
            raise UserError(f'{where}: expected an object with "command" or "url"')
        fields = dict(raw)
        fields.pop("type", None)  # "stdio" / "http" / "streamable-http": the fields say which
        if fields.pop("disabled", False) is True:
            continue
        for key in ("command", "cwd", "url"):
            if isinstance(fields.get(key), str):
                fields[key] = _expand(fields[key], env, f"{where}, {key}")
        if isinstance(fields.get("args"), list):
            fields["args"] = [
                _expand(a, env, f"{where}, args") if isinstance(a, str) else a for a in fields["args"]
            ]
        for key in ("env", "headers"):
            if isinstance(fields.get(key), dict):
                fields[key] = {
                    k: _expand(v, env, f"{where}, {key}.{k}") if isinstance(v, str) else v
                    for k, v in fields[key].items()
                }
        try:
            servers.append(McpServerConfig(name=name, **fields))
        except pydantic.ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in e['loc']) or 'server'}: {e['msg']}"
                for e in exc.errors(include_url=False)
            )
            raise UserError(f"{where}: {problems}") from None
    return servers


def load_mcp_config(path: str | Path, *, environ: Mapping[str, str] | None = None) -> list[McpServerConfig]:
    """Servers from an ``mcpServers`` JSON file.

    Raises:
        UserError: The file cannot be read or parsed, or a server is invalid.
    """
    file = Path(path).expanduser()
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except OSError as exc:
        raise UserError(f"cannot read the MCP configuration {file}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise UserError(f"the MCP configuration {file} is not valid JSON: {exc}") from None
    return parse_mcp_config(data, source=str(file), environ=environ)
