"""Attack class: a FIFO or device where the HTTP front reads its token, tenants, database URL or
archive store URL file.

A file the operator names may lie where a command can write (the workspace), and a command can
put a FIFO there (an open for reading would wait for a writer forever: the server never starts)
or a link to ``/dev/zero`` (an endless read). The front reads a regular file only, without
blocking, and says what it found; a link to a regular file (a mounted secret) still works."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import pytest

from codemode import UserError
from codemode._cli._common import archive_url, database_url
from codemode._cli._mcp import _mcp_tenants, _mcp_token

TOKEN = "a-token-of-twenty-four-chars"


def _args(tmp_path: Path, **files: Path) -> argparse.Namespace:
    names = {
        "token_file": None,
        "tenants_file": None,
        "database_url_file": None,
        "archive_url_file": None,
        **{k: str(v) for k, v in files.items()},
    }
    return argparse.Namespace(token=None, state_dir=tmp_path / "state", **names)


@pytest.mark.parametrize("option", ["token_file", "tenants_file", "database_url_file", "archive_url_file"])
@pytest.mark.parametrize("kind", ["fifo", "dev_zero"])
def test_a_fifo_or_device_is_refused_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, option: str, kind: str
) -> None:
    monkeypatch.delenv("CODEMODE_MCP_TOKEN", raising=False)
    monkeypatch.delenv("CODEMODE_DATABASE_URL", raising=False)
    monkeypatch.delenv("CODEMODE_ARCHIVE_URL", raising=False)
    planted = tmp_path / "secret"
    if kind == "fifo":
        os.mkfifo(planted)
    else:
        planted.symlink_to("/dev/zero")
    args = _args(tmp_path, **{option: planted})
    read = {"token_file": _mcp_token, "database_url_file": database_url, "archive_url_file": archive_url}.get(
        option
    )
    with pytest.raises(UserError, match="not a regular file"):
        read(args) if read is not None else _mcp_tenants(args, "")


def test_a_link_to_a_regular_file_is_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CODEMODE_MCP_TOKEN", raising=False)
    (tmp_path / "state").mkdir()
    real = tmp_path / "state" / "..data-token"
    real.write_text(TOKEN + "\n")
    link = tmp_path / "state" / "token"
    link.symlink_to(real.name)
    assert _mcp_token(_args(tmp_path, token_file=link)) == TOKEN
    tenants = tmp_path / "state" / "tenants"
    tenants.write_text(f"alice {TOKEN}\n")
    parsed = _mcp_tenants(_args(tmp_path, tenants_file=tenants), "")
    assert parsed is not None and parsed.tenant_of(TOKEN) == "alice"
