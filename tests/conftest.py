"""Shared fixtures: a throwaway PostgreSQL server started from the system's binaries,
DuckDB databases in temporary folders, and loaders that put the same rows into both."""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import duckdb
import psycopg
import pytest

ROOT = Path(__file__).resolve().parent.parent
PG_BIN_DIRS = sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True)


def _install_postgres() -> None:
    """SPEC §8: the suite installs the server when the machine lacks it (as root,
    from Debian's packages); elsewhere it says what to install."""
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        raise RuntimeError("PostgreSQL server binaries not found: install the 'postgresql' "
                           "package (Debian/Ubuntu) and run the tests again")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    subprocess.run(["apt-get", "update", "-q"], check=True, env=env, capture_output=True)
    subprocess.run(["apt-get", "install", "-y", "-q", "postgresql"], check=True, env=env,
                   capture_output=True)


def _pg_binary(name: str) -> str:
    global PG_BIN_DIRS
    if not PG_BIN_DIRS:
        _install_postgres()
        PG_BIN_DIRS = sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True)
    for directory in PG_BIN_DIRS:
        if (directory / name).exists():
            return str(directory / name)
    found = shutil.which(name)
    if found:
        return found
    raise RuntimeError(f"PostgreSQL binary {name} not found: install the 'postgresql' package "
                       "(.ci/run does this)")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="session")
def postgres_url():
    """A fresh PostgreSQL cluster on 127.0.0.1, stopped at the end of the session.

    PostgreSQL refuses to run as root, so as root the cluster runs as the ``postgres``
    system user, in a temporary folder that user owns.
    """
    base = Path(tempfile.mkdtemp(prefix="idp-pg-"))
    data = base / "data"
    as_root = os.geteuid() == 0
    prefix: list[str] = []
    if as_root:
        user = pwd.getpwnam("postgres")
        os.chown(base, user.pw_uid, user.pw_gid)
        prefix = ["runuser", "-u", "postgres", "--"]
    port = _free_port()
    run = lambda *args: subprocess.run(prefix + list(args), check=True,  # noqa: E731
                                       capture_output=True, text=True)
    run(_pg_binary("initdb"), "-D", str(data), "-U", "idp", "--auth=trust", "-E", "UTF8",
        "--no-sync")
    run(_pg_binary("pg_ctl"), "-D", str(data), "-l", str(base / "log"), "-w", "-o",
        f"-h 127.0.0.1 -p {port} -k {base} -F", "start")
    url = f"postgresql://idp@127.0.0.1:{port}/postgres"
    try:
        for _ in range(50):
            try:
                psycopg.connect(url).close()
                break
            except psycopg.OperationalError:
                time.sleep(0.2)
        yield url
    finally:
        run(_pg_binary("pg_ctl"), "-D", str(data), "-m", "immediate", "stop")
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def fresh_postgres(postgres_url):
    """A new empty database for one test (its own ledger, its own tables)."""
    name = f"t{os.getpid()}_{time.monotonic_ns()}"
    with psycopg.connect(postgres_url, autocommit=True) as con:
        con.execute(f'CREATE DATABASE "{name}"')
    yield postgres_url.rsplit("/", 1)[0] + f"/{name}"
    with psycopg.connect(postgres_url, autocommit=True) as con:
        con.execute(f'DROP DATABASE "{name}" WITH (FORCE)')


@pytest.fixture
def duckdb_url(tmp_path):
    return f"duckdb:///{tmp_path / 'data.duckdb'}"


def load_table(url: str, table: str, columns: dict[str, list], types: dict[str, str]) -> None:
    """Create ``table`` with the given columns and rows in either backend."""
    names = list(columns)
    rows = list(zip(*columns.values()))
    ddl = f'CREATE TABLE "{table}" (' + ", ".join(f'"{n}" {types[n]}' for n in names) + ")"
    if url.startswith("duckdb"):
        con = duckdb.connect(url.removeprefix("duckdb:///"))
        con.execute(ddl)
        if rows:  # one statement: the columns travel as list parameters and are unnested
            unnest = ", ".join(f"unnest(${i + 1}::{types[n]}[])" for i, n in enumerate(names))
            con.execute(f'INSERT INTO "{table}" SELECT {unnest}', list(columns.values()))
        con.close()
        return
    with psycopg.connect(url, autocommit=True) as con:
        con.execute(ddl)
        with con.cursor() as cur, cur.copy(f'COPY "{table}" FROM STDIN') as copy:
            for row in rows:
                copy.write_row(row)


@pytest.fixture(params=["duckdb", "postgres"])
def backend_url(request, tmp_path):
    """Each test using this runs once per backend."""
    if request.param == "duckdb":
        return f"duckdb:///{tmp_path / 'data.duckdb'}"
    return request.getfixturevalue("fresh_postgres")
