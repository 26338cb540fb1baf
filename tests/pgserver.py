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


class Cluster:
    """A PostgreSQL cluster in a temporary folder; tests may stop and start it."""

    def __init__(self, settings: dict[str, str] | None) -> None:
        self.base = Path(tempfile.mkdtemp(prefix="idp-pg-"))
        self.data = self.base / "data"
        self._prefix: list[str] = []
        if os.geteuid() == 0:  # PostgreSQL refuses root: run as the postgres user
            user = pwd.getpwnam("postgres")
            os.chown(self.base, user.pw_uid, user.pw_gid)
            self._prefix = ["runuser", "-u", "postgres", "--"]
        self.port = _free_port()
        self.url = f"postgresql://idp@127.0.0.1:{self.port}/postgres"
        self._options = f"-h 127.0.0.1 -p {self.port} -k {self.base} -F" + "".join(
            f" -c {key}={value}" for key, value in (settings or {}).items())
        self._run(_pg_binary("initdb"), "-D", str(self.data), "-U", "idp", "--auth=trust",
                  "-E", "UTF8", "--no-sync")

    def _run(self, *args: str) -> None:
        subprocess.run(self._prefix + list(args), check=True, capture_output=True, text=True)

    def start(self) -> None:
        self._run(_pg_binary("pg_ctl"), "-D", str(self.data), "-l", str(self.base / "log"),
                  "-w", "-o", self._options, "start")
        for _ in range(50):
            try:
                psycopg.connect(self.url).close()
                return
            except psycopg.OperationalError:
                time.sleep(0.2)

    def stop(self, mode: str = "fast") -> None:
        self._run(_pg_binary("pg_ctl"), "-D", str(self.data), "-m", mode, "-w", "stop")

    def remove(self) -> None:
        shutil.rmtree(self.base, ignore_errors=True)


@contextmanager
def postgres_cluster(settings: dict[str, str] | None = None) -> Iterator[Cluster]:
    """A fresh, started cluster on 127.0.0.1, stopped (and deleted) on exit."""
    cluster = Cluster(settings)
    cluster.start()
    try:
        yield cluster
    finally:
        try:
            cluster.stop("immediate")
        except subprocess.CalledProcessError:
            pass  # a test left it stopped
        cluster.remove()


@contextmanager
def throwaway_postgres(settings: dict[str, str] | None = None) -> Iterator[str]:
    """The URL of a fresh cluster (see ``postgres_cluster``)."""
    with postgres_cluster(settings) as cluster:
        yield cluster.url
