"""A throwaway PostgreSQL server from the system's binaries, for tests and benchmarks."""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg

from tests.system import apt_install

PG_BIN_DIRS = sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True)


def _pg_binary(name: str) -> str:
    global PG_BIN_DIRS
    if not PG_BIN_DIRS:
        apt_install("postgresql")  # SPEC §8: installed when the machine lacks it
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


@contextmanager
def throwaway_postgres(settings: dict[str, str] | None = None) -> Iterator[str]:
    """A fresh PostgreSQL cluster on 127.0.0.1, stopped (and deleted) on exit.

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
    run = lambda *args: subprocess.run(prefix + list(args), check=True,
                                       capture_output=True, text=True)
    run(_pg_binary("initdb"), "-D", str(data), "-U", "idp", "--auth=trust", "-E", "UTF8",
        "--no-sync")
    options = f"-h 127.0.0.1 -p {port} -k {base} -F"
    options += "".join(f" -c {key}={value}" for key, value in (settings or {}).items())
    run(_pg_binary("pg_ctl"), "-D", str(data), "-l", str(base / "log"), "-w", "-o", options,
        "start")
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
