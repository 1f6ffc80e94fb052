"""A throw-away PostgreSQL cluster for the tests: the distribution's ``initdb`` and ``pg_ctl``,
listening on a Unix socket only (no TCP port), one schema per test.

As root (CI) the server runs as the ``postgres`` user, which PostgreSQL requires. Where no
PostgreSQL is installed the tests that need it skip, unless ``CODEMODE_REQUIRE_POSTGRES=1``
(CI sets it, after ``apt-get install postgresql``): then they fail.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
import tempfile
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest

__all__ = ["Cluster", "start_cluster"]


@dataclass(frozen=True)
class Cluster:
    """A running cluster: its data directory and the directory of its socket."""

    data: Path
    socket_dir: Path
    as_user: list[str]  # the command prefix that runs a program as the server's user
    bin_dir: Path

    def url(self, schema: str | None = None) -> str:
        """A libpq connection string to database ``postgres`` (its search path ``schema``)."""
        options = f" options='-c search_path={schema}'" if schema else ""
        return f"host={self.socket_dir} user=codemode dbname=postgres{options}"

    def new_schema(self) -> str:
        """A new empty schema's connection string: each test its own tables."""
        import psycopg

        schema = f"t_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f"CREATE SCHEMA {schema}".encode())
        return self.url(schema)

    def stop(self) -> None:
        """Stop the server and remove its directory."""
        subprocess.run(
            [*self.as_user, str(self.bin_dir / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "stop"],
            capture_output=True,
            timeout=60,
            check=False,
        )
        shutil.rmtree(self.socket_dir, ignore_errors=True)


def _bin_dir() -> Path | None:
    found = shutil.which("initdb")
    if found and Path(found).resolve().with_name("pg_ctl").exists():
        return Path(found).resolve().parent
    versions = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    return Path(versions[-1]).parent if versions else None


def start_cluster() -> Cluster:
    """Initialise and start a cluster in a new directory under ``/tmp`` (one the server's user
    can reach); skips (or fails, see the module) when PostgreSQL is not installed."""
    bin_dir = _bin_dir()
    if bin_dir is None:
        message = "PostgreSQL is not installed (initdb not found)"
        if os.environ.get("CODEMODE_REQUIRE_POSTGRES") == "1":
            pytest.fail(message)
        pytest.skip(message)
    base = Path(tempfile.mkdtemp(prefix="codemode-pg-", dir="/tmp"))
    as_user: list[str] = []
    if os.getuid() == 0:  # the server refuses to run as root
        user = pwd.getpwnam("postgres")
        os.chown(base, user.pw_uid, user.pw_gid)
        as_user = ["runuser", "-u", "postgres", "--"]
    data, socket_dir = base / "data", base
    subprocess.run(
        [*as_user, str(bin_dir / "initdb"), "-D", str(data), "-A", "trust", "-U", "codemode", "--no-sync"],
        capture_output=True,
        timeout=120,
        check=True,
    )
    settings = f"-k {socket_dir} -c listen_addresses='' -c fsync=off -c max_connections=200"
    subprocess.run(
        [
            *as_user,
            str(bin_dir / "pg_ctl"),
            "-D",
            str(data),
            "-o",
            settings,
            "-l",
            str(base / "log"),
            "-w",
            "start",
        ],
        capture_output=True,
        timeout=120,
        check=True,
    )
    return Cluster(data, socket_dir, as_user, bin_dir)
