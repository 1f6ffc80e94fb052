"""explain_denial on the message shapes real tools print (the live ones are in test_enforce.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from codemode.sandbox import ENFORCEMENT_FAILED_MARKER, SandboxMode, SandboxPolicy, explain_denial


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    d = tmp_path / "ws"
    d.mkdir()
    return d


@pytest.fixture
def out(tmp_path: Path) -> Path:
    d = tmp_path / "out"
    d.mkdir()
    return d


def _policy(ws: Path, **kw: object) -> SandboxPolicy:
    return SandboxPolicy(writable_roots=(ws,), **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "shape",
    [
        "touch: cannot touch '{p}': Permission denied",
        "touch: cannot touch ‘{p}’: Permission denied",
        "bash: {p}: Permission denied",
        "/bin/bash: line 1: {p}: Permission denied",
        "/bin/sh: 1: cannot create {p}: Permission denied",
        "PermissionError: [Errno 13] Permission denied: '{p}'",
        "mkdir: cannot create directory '{p}': Permission denied",
        "Error: EACCES: permission denied, open '{p}'",
        "open {p}: permission denied",
        "rm: cannot remove '{p}': Operation not permitted",
        "cp: cannot create regular file '{p}': Read-only file system",
        "ln: failed to create hard link '{p}' => '/etc/hostname': Invalid cross-device link",
    ],
)
def test_common_shapes_name_the_path(ws: Path, out: Path, shape: str) -> None:
    target = out / "file.txt"
    line = explain_denial("some output\n" + shape.format(p=target) + "\n", _policy(ws))
    assert line is not None
    assert str(target) in line
    assert "writable root" in line and "\n" not in line


def test_paths_inside_the_roots_are_not_blamed(ws: Path) -> None:
    assert explain_denial(f"bash: {ws}/script.sh: Permission denied", _policy(ws)) is None
    assert explain_denial("touch: cannot touch 'x': Permission denied", _policy(ws), cwd=ws) is None


def test_relative_paths_resolve_against_cwd(ws: Path, out: Path) -> None:
    line = explain_denial("touch: cannot touch 'x': Permission denied", _policy(ws), cwd=out)
    assert line is not None and str(out / "x") in line
    # without a cwd a relative path cannot be judged
    assert explain_denial("touch: cannot touch 'x': Permission denied", _policy(ws)) is None


def test_symlink_inside_pointing_out_is_blamed_with_its_target(ws: Path, out: Path) -> None:
    (ws / "link").symlink_to(out / "target")
    line = explain_denial("bash: link: Permission denied", _policy(ws), cwd=ws)
    assert line is not None and str(out / "target") in line


def test_temp_dir_and_devices_are_writable(ws: Path, tmp_path: Path) -> None:
    tmp = tmp_path / "t"
    tmp.mkdir()
    policy = _policy(ws, temp_dir=tmp)
    assert explain_denial(f"cannot create {tmp}/x: Permission denied", policy) is None
    assert explain_denial("bash: /dev/null: Permission denied", policy) is None


def test_full_access_never_blames_the_sandbox(ws: Path, out: Path) -> None:
    policy = _policy(ws, mode=SandboxMode.FULL_ACCESS)
    assert explain_denial(f"touch: cannot touch '{out}/x': Permission denied", policy) is None


def test_read_only_says_to_change_the_mode(ws: Path) -> None:
    policy = _policy(ws, mode=SandboxMode.READ_ONLY)
    line = explain_denial(f"touch: cannot touch '{ws}/x': Permission denied", policy)
    assert line is not None and "read-only" in line and "change the sandbox mode" in line


def test_state_directory_is_named_as_such(ws: Path, tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    policy = _policy(ws, protected=(state,))
    line = explain_denial(f"bash: {state}/codemode.db: Permission denied", policy)
    assert line is not None and "state directory" in line and "never" in line


def test_paths_the_host_cannot_write_either_are_not_blamed(ws: Path, tmp_path: Path) -> None:
    if os.geteuid() == 0:
        pytest.skip("root can write any directory, so plain permissions never refuse here")
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    assert explain_denial(f"touch: cannot touch '{locked}/x': Permission denied", _policy(ws)) is None


def test_ordinary_failures_are_not_denials(ws: Path) -> None:
    policy = _policy(ws, network=False)
    for output in [
        "",
        "error: file not found",
        "FAILED tests/test_x.py::test_y - AssertionError",
        "Exit code 1",
    ]:
        assert explain_denial(output, policy) is None


@pytest.mark.parametrize(
    ("output", "endpoint"),
    [
        (
            "bash: connect: Permission denied\nbash: /dev/tcp/10.0.0.1/80: Permission denied",
            "10.0.0.1 port 80",
        ),
        (
            "curl: (7) Failed to connect to example.com port 443 after 3 ms: Couldn't connect to server",
            "example.com port 443",
        ),
        (
            "urllib3.exceptions.NewConnectionError: <HTTPSConnection(host='pypi.org', port=443)>: "
            "Failed to establish a new connection: [Errno 13] Permission denied",
            "pypi.org port 443",
        ),
        (
            "fatal: unable to access 'https://github.com/x/y.git/': Failed to connect to github.com",
            "github.com",
        ),
        (
            "PermissionError: [Errno 13] Permission denied\n  s.connect(('127.0.0.1', 8000))",
            "127.0.0.1 port 8000",
        ),
    ],
)
def test_network_denials_when_the_network_is_off(ws: Path, output: str, endpoint: str) -> None:
    line = explain_denial(output, _policy(ws, network=False))
    assert line is not None and endpoint in line and "turn the network on" in line
    assert explain_denial(output, _policy(ws, network=True)) is None


def test_signal_to_an_outside_process(ws: Path) -> None:
    line = explain_denial(f"bash: line 1: kill: ({os.getpid()}) - Operation not permitted", _policy(ws))
    assert line is not None and str(os.getpid()) in line and '"stop"' in line


def test_enforcement_failure_is_reported_even_unconfined(ws: Path) -> None:
    output = (
        f"{ENFORCEMENT_FAILED_MARKER} landlock_restrict_self failed with errno 9; the command was not run."
    )
    line = explain_denial(output, _policy(ws))
    assert line is not None and "not run" in line and "errno 9" in line


@pytest.mark.parametrize(
    ("output", "network", "advice"),
    [
        ("git@github.com: Permission denied (publickey).", True, "report the credential problem"),
        (
            "fatal: Authentication failed for 'https://github.com/x/y.git/'",
            True,
            "report the credential problem",
        ),
        ("curl: (6) Could not resolve host: example.com", False, "example.com: the network is off"),
        (
            "E: Could not open lock file /var/lib/dpkg/lock-frontend - open (13: Permission denied)\n"
            "E: Unable to acquire the dpkg frontend lock (/var/lib/dpkg/lock-frontend), are you root?",
            True,
            'argv ["sudo", ...] as the last resort',
        ),
        ("Failed to connect to bus: Operation not permitted", True, "needs a system service or root"),
    ],
)
def test_advice_by_cause(ws: Path, output: str, network: bool, advice: str) -> None:
    line = explain_denial(output, _policy(ws, network=network))
    assert line is not None and advice in line and "\n" not in line, line
