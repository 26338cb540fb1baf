"""A throwaway Sail server (pysail: a Spark Connect server in Rust) for the Spark
backend's tests: one per test process, in its own folder (Sail writes tables under
``spark-warehouse`` in its working directory), stopped at exit, and by the watchdog
(tests/watchdog.py) should the test process be killed.

Started as ``sail spark server`` in a subprocess, then waited for until its port
accepts connections. The pyspark client must be older than 4.3: Sail 0.7.2 answers a
4.3 client's every request with "session … is not running" (pyproject's ``[spark]``
extra pins it)."""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests import watchdog

# url -> pid of each Sail server this process runs (tests/killed_run.py reports them)
live: dict[str, int] = {}


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@contextmanager
def throwaway_sail(folder: Path, timeout: float = 30.0) -> Iterator[str]:
    """``sc://127.0.0.1:PORT`` of a Sail server running in ``folder``."""
    sail = shutil.which("sail", path=str(Path(sys.executable).parent)) or shutil.which("sail")
    if sail is None:
        raise RuntimeError("no `sail` command: pip install pysail")
    port = _free_port()
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "sail.log", "wb") as log:
        server = subprocess.Popen([sail, "spark", "server", "--ip", "127.0.0.1",
                                   "--port", str(port)], cwd=folder, stdout=log,
                                  stderr=subprocess.STDOUT)
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
                    raise RuntimeError("the Sail server did not start: "
                                       f"{(folder / 'sail.log').read_text()[-500:]}") from None
                time.sleep(0.05)
        yield url
    finally:
        server.terminate()
        try:
            server.wait(10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        watchdog.unwatch_server(server.pid)
        del live[url]
