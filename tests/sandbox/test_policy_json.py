"""SandboxPolicy <-> JSON, as handed to a supervisor process."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from codemode.errors import UserError
from codemode.sandbox import SandboxMode, SandboxPolicy, policy_from_json, policy_to_json


@pytest.mark.parametrize(
    "policy",
    [
        SandboxPolicy(),
        SandboxPolicy(
            mode=SandboxMode.READ_ONLY,
            writable_roots=(Path("/a"), Path("/b c")),
            network=False,
            temp_dir=Path("/tmp/x"),
            protected=(Path("/state"),),
        ),
        SandboxPolicy(mode=SandboxMode.FULL_ACCESS, temp_dir=None),
    ],
)
def test_round_trip(policy: SandboxPolicy) -> None:
    text = policy_to_json(policy)
    assert policy_from_json(text) == policy
    assert json.loads(text)["mode"] == policy.mode.value


@pytest.mark.parametrize(
    ("mutate", "needle"),
    [
        (lambda d: d.update(mode="yolo"), "unknown mode 'yolo'"),
        (lambda d: d.update(network="yes"), "'network' must be true or false"),
        (
            lambda d: d.update(writable_roots=["relative"]),
            "'writable_roots' must be a list of absolute paths",
        ),
        (lambda d: d.update(temp_dir=3), "'temp_dir'"),
        (lambda d: d.update(extra=1), "unknown keys: extra"),
        (lambda d: d.update(version=99), "version 99"),
    ],
)
def test_bad_json_names_what_is_wrong(mutate: object, needle: str) -> None:
    data = json.loads(policy_to_json(SandboxPolicy(writable_roots=(Path("/w"),))))
    mutate(data)  # type: ignore[operator]
    with pytest.raises(UserError, match=needle):
        policy_from_json(json.dumps(data))


def test_not_json_at_all() -> None:
    with pytest.raises(UserError, match="not valid JSON"):
        policy_from_json("{")
    with pytest.raises(UserError, match="must be an object"):
        policy_from_json("[]")
