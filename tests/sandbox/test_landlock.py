"""Landlock status probing and the fail-closed paths; these run on any kernel (no real Landlock needed)."""

from __future__ import annotations

import pytest

from codemode.errors import SandboxUnavailable
from codemode.sandbox import SandboxMode, landlock_status, prepare_confinement
from tests.sandbox.sandbox_support import REAL_ABI, Dirs, bash

READ_ONLY = SandboxMode.READ_ONLY
FULL = SandboxMode.FULL_ACCESS


def test_status_matches_the_kernel() -> None:
    status = landlock_status()
    assert status.abi == REAL_ABI
    print(f"Landlock ABI on this machine: {REAL_ABI}")
    if REAL_ABI >= 3:
        assert status.confined_modes_available
        assert {"write_file", "make_reg", "refer", "truncate"} <= set(status.fs_rights)
        assert status.network_rules == (REAL_ABI >= 4)
        assert ("ioctl_dev" in status.fs_rights) == (REAL_ABI >= 5)
        assert (status.scopes == ("abstract_unix_socket", "signal")) == (REAL_ABI >= 6)
        text = "\n".join(status.describe())
        assert f"ABI {REAL_ABI}" in text and "filesystem rights enforced: execute" in text
    else:
        assert status.reason


def test_status_is_cached_until_cleared(monkeypatch: pytest.MonkeyPatch) -> None:
    first = landlock_status()
    monkeypatch.setenv("CODEMODE_SIMULATE_NO_LANDLOCK", "1")
    assert landlock_status() is first
    landlock_status.cache_clear()  # type: ignore[attr-defined]
    assert landlock_status().abi == 0


def test_abi_cap_reports_the_older_abi(monkeypatch: pytest.MonkeyPatch) -> None:
    if REAL_ABI < 4:
        pytest.skip(f"needs a kernel with ABI >= 4; this one has {REAL_ABI}")
    monkeypatch.setenv("CODEMODE_SIMULATE_LANDLOCK_ABI", "3")
    status = landlock_status()
    assert status.abi == 3 and not status.network_rules and "ioctl_dev" not in status.fs_rights
    assert "capped" in (status.reason or "")
    assert "unavailable (needs ABI 4)" in "\n".join(status.describe())


@pytest.fixture
def no_landlock(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CODEMODE_SIMULATE_NO_LANDLOCK", "1")
    landlock_status.cache_clear()  # type: ignore[attr-defined]


@pytest.mark.usefixtures("no_landlock")
def test_simulated_missing_landlock_refuses_confined_modes(dirs: Dirs) -> None:
    status = landlock_status()
    assert status.abi == 0 and "simulated" in (status.reason or "")
    assert "refused" in "\n".join(status.describe())
    for mode in (SandboxMode.WORKSPACE_WRITE, READ_ONLY):
        with pytest.raises(SandboxUnavailable, match="full-access") as info:
            prepare_confinement(dirs.policy(mode))
        assert "Landlock ABI 3" in str(info.value) and "not run" in str(info.value)


@pytest.mark.usefixtures("no_landlock")
def test_simulated_missing_landlock_still_runs_full_access(dirs: Dirs) -> None:
    policy = dirs.policy(FULL)
    with prepare_confinement(policy) as conf:
        assert not conf.confined and conf.env == {"TMPDIR": str(dirs.tmp)}
    result = bash(policy, f"touch {dirs.out}/free && echo $TMPDIR")
    assert result.returncode == 0 and result.stdout.strip() == str(dirs.tmp)
    assert (dirs.out / "free").exists()


def test_full_access_is_unconfined(dirs: Dirs) -> None:
    policy = dirs.policy(FULL, network=False)
    with prepare_confinement(policy) as conf:
        assert not conf.confined and conf.fds()["ruleset_fd"] is None and conf.fds()["seccomp_fd"] is None
    result = bash(policy, f"touch {dirs.out}/x && echo ok > {dirs.state}/db")
    assert result.returncode == 0, result.stderr
