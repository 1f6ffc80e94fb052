"""A SandboxPolicy as JSON, to hand it to a supervisor process that confines a background command."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

from codemode.errors import UserError
from codemode.sandbox._policy import SandboxMode, SandboxPolicy

__all__ = ["policy_from_json", "policy_to_json"]

_VERSION = 1
_KEYS = {"version", "mode", "writable_roots", "network", "network_allow", "temp_dir", "protected"}


def policy_to_json(policy: SandboxPolicy) -> str:
    """Serialise ``policy`` (all fields, paths as strings) to a JSON object.

    Args:
        policy: The policy.

    Returns:
        A JSON text that :func:`policy_from_json` turns back into an equal policy.
    """
    return json.dumps(
        {
            "version": _VERSION,
            "mode": policy.mode.value,
            "writable_roots": [str(p) for p in policy.writable_roots],
            "network": policy.network,
            "network_allow": None if policy.network_allow is None else list(policy.network_allow),
            "temp_dir": None if policy.temp_dir is None else str(policy.temp_dir),
            "protected": [str(p) for p in policy.protected],
        },
        sort_keys=True,
    )


def _paths(data: Mapping[str, object], key: str) -> tuple[Path, ...]:
    value = data.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, str) and v.startswith("/") for v in value):
        raise UserError(f"Sandbox policy JSON: {key!r} must be a list of absolute paths, got {value!r}.")
    return tuple(Path(v) for v in value)


def policy_from_json(text: str) -> SandboxPolicy:
    """Parse the output of :func:`policy_to_json`.

    Args:
        text: The JSON text.

    Returns:
        The policy.

    Raises:
        UserError: The text is not a valid policy (names the offending key or value).
    """
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UserError(f"Sandbox policy JSON is not valid JSON: {exc}.") from exc
    if not isinstance(data, dict):
        raise UserError("Sandbox policy JSON must be an object.")
    unknown = set(data) - _KEYS
    if unknown:
        raise UserError(f"Sandbox policy JSON has unknown keys: {', '.join(sorted(unknown))}.")
    if data.get("version") != _VERSION:
        raise UserError(f"Sandbox policy JSON has version {data.get('version')!r}; expected {_VERSION}.")
    try:
        mode = SandboxMode(str(data.get("mode")))
    except ValueError as exc:
        choices = ", ".join(m.value for m in SandboxMode)
        raise UserError(
            f"Sandbox policy JSON: unknown mode {data.get('mode')!r} (one of {choices})."
        ) from exc
    network = data.get("network")
    if not isinstance(network, bool):
        raise UserError(f"Sandbox policy JSON: 'network' must be true or false, got {network!r}.")
    allow = data.get("network_allow")
    if allow is not None and not (isinstance(allow, list) and all(isinstance(a, str) for a in allow)):
        raise UserError(
            f"Sandbox policy JSON: 'network_allow' must be a list of domains or null, got {allow!r}."
        )
    temp_dir = data.get("temp_dir")
    if temp_dir is not None and not (isinstance(temp_dir, str) and temp_dir.startswith("/")):
        raise UserError(
            f"Sandbox policy JSON: 'temp_dir' must be an absolute path or null, got {temp_dir!r}."
        )
    return SandboxPolicy(
        mode=mode,
        writable_roots=_paths(data, "writable_roots"),
        network=network,
        network_allow=None if allow is None else tuple(allow),
        temp_dir=None if temp_dir is None else Path(temp_dir),
        protected=_paths(data, "protected"),
    )
