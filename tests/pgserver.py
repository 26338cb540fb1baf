"""A throwaway PostgreSQL server from the system's binaries, for tests and benchmarks.

It is stopped however the process that started it ends:

- normally: the context manager stops it, and an ``atexit`` hook stops any left over;
- SIGTERM or SIGHUP (``timeout``, a CI runner cancelling, a closed terminal): a handler
  stops this process's clusters, then lets the signal end the process as it would have;
- SIGKILL: the watchdog (tests/watchdog.py) stops it and deletes its folder;
- and should the watchdog be killed too, every new cluster first sweeps the folders of
  clusters whose owner (the pid and start time in the file ``owner``) is gone.
"""

from __future__ import annotations

import atexit
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg

from tests import watchdog
from tests.system import apt_install

PG_BIN_DIRS = sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True)


def _temporary_root() -> Path:
    """TMPDIR if set; else a RAM file system (/dev/shm) with a few GB free, where
    initdb, CREATE DATABASE and DuckDB's commits cost a third of what they cost on a
    disk (tens of megabytes of new files, fsyncs); else the system's temporary folder."""
    shm = Path("/dev/shm")
    if "TMPDIR" not in os.environ and os.access(shm, os.W_OK | os.X_OK):
        free = os.statvfs(shm)
        if free.f_bavail * free.f_frsize >= 4 << 30:
            return shm
    return Path(tempfile.gettempdir())


# Where clusters (and the suite's per-worker TMPDIRs) live: fixed when this module is
# imported, so that a later change of TMPDIR (the suite gives each worker its own) does
# not hide them from the next sweep.
ROOT = _temporary_root()
PREFIX = "idp-pg-"
OWNER = "owner"  # "<pid> <start time>" of the process that started the cluster

_live: dict[Path, Cluster] = {}  # this process's clusters, until removed
_guard = threading.RLock()  # re-entered when a signal arrives while it is held
_handled: set[int] = set()


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


def owner_alive(marker: Path) -> bool:
    """Whether the process named in an ``owner`` file still runs (True when unreadable:
    a folder being set up, or not ours to judge)."""
    try:
        pid, started = marker.read_text().split()
    except (OSError, ValueError):
        return True
    return watchdog.process_start(int(pid)) == started


def mark_owner(folder: Path) -> None:
    (folder / OWNER).write_text(f"{os.getpid()} {watchdog.process_start(os.getpid())}")


def _postmaster(data: Path) -> int | None:
    """The pid of the server running on a data folder, if one runs (checked against
    /proc, so a stale postmaster.pid whose pid was reused names nothing)."""
    try:
        pid = int((data / "postmaster.pid").read_text().split()[0])
        command = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, ValueError, IndexError):
        return None
    return pid if str(data).encode() in command and state != "Z" else None


def stop_postmaster(data: Path) -> None:
    """Stop the server of a data folder, if one runs, as ``pg_ctl -m immediate`` does
    (SIGQUIT: nothing to keep), whichever PostgreSQL version it is; wait until it is gone."""
    pid = _postmaster(data)
    if pid is None:
        return
    try:
        os.kill(pid, signal.SIGQUIT)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + 20
    while _postmaster(data) is not None and time.monotonic() < deadline:
        time.sleep(0.05)


def sweep(pattern: str = f"{PREFIX}*", root: Path = ROOT) -> list[Path]:
    """Stop every PostgreSQL in the folders ``root/pattern`` whose owner has died (their
    own ``data``, or a ``data`` one level down), and delete the folders; returns them."""
    swept = []
    for marker in root.glob(f"{pattern}/{OWNER}"):
        if owner_alive(marker):
            continue
        folder = marker.parent
        for data in [folder / "data", *folder.glob("*/data")]:
            stop_postmaster(data)
        shutil.rmtree(folder, ignore_errors=True)
        swept.append(folder)
    return swept


def _stop_all() -> None:
    """Stop and delete every cluster this process still has (atexit, signals)."""
    for cluster in list(_live.values()):
        cluster.discard()


def _on_signal(signum, frame) -> None:
    _stop_all()
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)  # end as the signal would have ended the process


def _install_handlers() -> None:
    """SIGTERM and SIGHUP stop the clusters first (only where nobody else handles them,
    and only from the main thread, where Python allows it)."""
    if threading.current_thread() is not threading.main_thread():
        return
    for signum in (signal.SIGTERM, signal.SIGHUP):
        if signum in _handled:
            continue
        if signal.getsignal(signum) in (signal.SIG_DFL, None):
            signal.signal(signum, _on_signal)
        _handled.add(signum)


atexit.register(_stop_all)


class Cluster:
    """A PostgreSQL cluster in a temporary folder; tests may stop and start it."""

    def __init__(self, settings: dict[str, str] | None) -> None:
        sweep()
        _install_handlers()
        self.base = Path(tempfile.mkdtemp(prefix=PREFIX, dir=ROOT))
        mark_owner(self.base)
        self.data = self.base / "data"
        self._prefix: list[str] = []
        if os.geteuid() == 0:  # PostgreSQL refuses root: run as the postgres user
            user = pwd.getpwnam("postgres")
            os.chown(self.base, user.pw_uid, user.pw_gid)
            self._prefix = ["runuser", "-u", "postgres", "--"]
        with _guard:
            _live[self.base] = self
        watchdog.watch_folder(self.base)
        self.port = _free_port()
        self.url = f"postgresql://idp@127.0.0.1:{self.port}/postgres"
        self._options = f"-h 127.0.0.1 -p {self.port} -k {self.base} -F" + "".join(
            f" -c {key}={value}" for key, value in (settings or {}).items())
        try:
            self._run(_pg_binary("initdb"), "-D", str(self.data), "-U", "idp",
                      "--auth=trust", "-E", "UTF8", "--no-sync")
        except BaseException:
            self.remove()
            raise

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
        with _guard:
            if _live.pop(self.base, None) is not None:
                watchdog.unwatch_folder(self.base)

    def discard(self) -> None:
        """Stop (immediately) and delete."""
        stop_postmaster(self.data)
        self.remove()


@contextmanager
def postgres_cluster(settings: dict[str, str] | None = None) -> Iterator[Cluster]:
    """A fresh, started cluster on 127.0.0.1, stopped (and deleted) on exit."""
    cluster = Cluster(settings)
    try:
        cluster.start()
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
