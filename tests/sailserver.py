"""Throwaway Spark Connect servers for the Spark backend's tests: a Sail server here
(pysail: a Spark Connect server in Rust), a real Spark one in tests/sparkserver.py; one
per test process, in its own folder, stopped at exit, and by the watchdog
(tests/watchdog.py) should the test process be killed.

Sail is started as ``sail spark server`` in a subprocess (it writes tables under
``spark-warehouse`` in its working directory), then waited for until its port accepts
connections. The pyspark client must be older than 4.3: Sail 0.7.2 answers a 4.3
client's every request with "session … is not running" (pyproject's ``[spark]`` extra
pins it)."""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

from tests import watchdog

# url -> pid of each Spark Connect server this process runs (tests/killed_run.py reports them)
live: dict[str, int] = {}


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@contextmanager
def connect_server(command: Sequence[str], port: int, folder: Path, name: str,
                   timeout: float, env: Mapping[str, str] | None = None) -> Iterator[str]:
    """``sc://127.0.0.1:PORT`` of the Spark Connect server ``command`` starts on
    ``port``, run in ``folder`` (its output in ``folder/<name>.log``), once the port
    accepts connections; the server's process is stopped at the end (SIGTERM, then
    SIGKILL after 30 s), and only that one."""
    folder.mkdir(parents=True, exist_ok=True)
    log_path = folder / f"{name}.log"
    with open(log_path, "wb") as log:
        server = subprocess.Popen(list(command), cwd=folder, stdout=log,
                                  stderr=subprocess.STDOUT, env=env)
    watchdog.watch_server(server.pid)
    url = f"sc://127.0.0.1:{port}"
    live[url] = server.pid
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"the {name} server did not start within {timeout:.0f} s: "
                                       f"{log_path.read_text()[-500:]}") from None
                time.sleep(0.05)
        yield url
    finally:
        server.terminate()
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        watchdog.unwatch_server(server.pid)
        del live[url]


@contextmanager
def throwaway_sail(folder: Path, timeout: float = 30.0) -> Iterator[str]:
    """``sc://127.0.0.1:PORT`` of a Sail server running in ``folder``."""
    sail = shutil.which("sail", path=str(Path(sys.executable).parent)) or shutil.which("sail")
    if sail is None:
        raise RuntimeError("no `sail` command: pip install pysail")
    port = free_port()
    with connect_server([sail, "spark", "server", "--ip", "127.0.0.1", "--port", str(port)],
                        port, folder, "sail", timeout) as url:
        yield url
