"""``idp-proxy`` command runs forked from a process that has imported the command already.

A run of the installed script costs half a second of CPU, three fifths of it importing
sqlglot, DuckDB and the engine, and the suite makes about two hundred. Each run here is
still a process of its own: its own pid, environment, working directory, standard streams
and exit status, entering through the console script's entry point (``proxy.cli:main``).
It is forked from a "zygote" (one per test process) that imported those modules once and
opened, started and drew nothing: no file, connection, thread or random pool is shared.
What a fork cannot show, a fresh interpreter's start-up and lazy imports, the tests that
run the installed script itself check (test_cli's --help, test_progress, test_readme,
test_walkthrough).
"""

from __future__ import annotations

import atexit
import json
import os
import select
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import traceback
from pathlib import Path

SCRIPT = str(Path(sys.executable).parent / "idp-proxy")
# What the commands import when they run: imported by the zygote before any fork.
_WARM = ("proxy.cli", "proxy.admin", "proxy.engine", "proxy.ledger", "proxy.users",
         "proxy.backends", "proxy.backends.duckdb_backend", "proxy.backends.postgres_backend",
         "proxy.publish", "proxy.demo", "sqlglot.dialects.duckdb", "sqlglot.dialects.postgres",
         "psycopg", "numpy", "duckdb")


def run(args: list[str], *, env: dict[str, str] | None = None, cwd: str | Path | None = None,
        input: str | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    """Like ``subprocess.run([SCRIPT, *args], capture_output=True, text=True, ...)``."""
    with tempfile.TemporaryDirectory(prefix="idp-cli-") as folder:
        streams = [str(Path(folder) / name) for name in ("in", "out", "err")]
        Path(streams[0]).write_text(input or "")
        request = {"args": [SCRIPT, *args], "env": dict(os.environ if env is None else env),
                   "cwd": str(cwd or os.getcwd()), "streams": streams}
        with socket.socket(socket.AF_UNIX) as conn:
            conn.connect(_zygote())
            conn.sendall(json.dumps(request).encode() + b"\n")
            conn.settimeout(timeout)
            replies = conn.makefile("rb")
            pid = int(replies.readline())
            try:
                code = int(replies.readline())
            except TimeoutError:
                os.kill(pid, signal.SIGKILL)
                raise subprocess.TimeoutExpired(request["args"], timeout) from None
        out, err = (Path(path).read_text(errors="replace") for path in streams[1:])
    return subprocess.CompletedProcess(request["args"], code, out, err)


_started: dict[str, str] = {}
_starting = threading.Lock()


def _zygote() -> str:
    """The socket of this test process's zygote, started on first use; it exits when this
    process does (its stdin, a pipe from here, reaches end of file)."""
    with _starting:
        if "path" not in _started:
            folder = tempfile.mkdtemp(prefix="idp-zygote-")
            path = str(Path(folder) / "socket")
            process = subprocess.Popen([sys.executable, __file__, path],
                                       stdin=subprocess.PIPE, stdout=subprocess.PIPE)
            if process.stdout.readline() != b"ready\n":
                raise RuntimeError("the CLI zygote did not start")
            atexit.register(process.stdin.close)
            _started["path"] = path
        return _started["path"]


def _serve(path: str) -> None:
    """The zygote: import, then fork a runner for each connection until stdin closes."""
    import gc
    import importlib

    for name in _WARM:
        importlib.import_module(name)
    gc.freeze()  # the collector leaves the imported objects alone: their pages stay shared
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(path)
    listener.listen(64)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # runners are reaped by the kernel
    print("ready", flush=True)
    while True:
        ready, _, _ = select.select([listener, sys.stdin], [], [])
        if sys.stdin in ready:
            return
        conn, _ = listener.accept()
        if os.fork() == 0:
            listener.close()
            _runner(conn)
        conn.close()


def _runner(conn: socket.socket) -> None:
    """Forks the command's process, tells the caller its pid, then its exit status."""
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    request = json.loads(conn.makefile("rb").readline())
    pid = os.fork()
    if pid == 0:
        conn.close()
        _command(request)
    conn.sendall(f"{pid}\n".encode())
    _, status = os.waitpid(pid, 0)
    conn.sendall(f"{os.waitstatus_to_exitcode(status)}\n".encode())
    os._exit(0)


def _command(request: dict) -> None:
    """Runs the command and ends the process as an interpreter's exit would (threads
    joined, atexit handlers, streams flushed), without tearing down the imported modules:
    that touched every page of the zygote's heap and doubled a short command's time."""
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    for fd, (path, flags) in enumerate(zip(request["streams"], (
            os.O_RDONLY, os.O_WRONLY | os.O_CREAT, os.O_WRONLY | os.O_CREAT))):
        opened = os.open(path, flags, 0o600)
        os.dup2(opened, fd)
        os.close(opened)
    sys.argv = request["args"]
    from proxy.cli import main

    try:
        main()
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (exc.code is not None)
        if isinstance(exc.code, str):
            print(exc.code, file=sys.stderr)
    except BaseException:  # noqa: BLE001 -- uncaught: a traceback and status 1, as python
        traceback.print_exc()
        code = 1
    threading._shutdown()
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    sys.path[0] = str(Path(SCRIPT).parent)  # as the console script's: not tests/
    _serve(sys.argv[1])
