"""``idp-proxy`` command runs forked from a process that has imported the command already.

A run of the installed script costs half a second of CPU, three fifths of it importing
sqlglot, DuckDB and the engine, and the suite makes about two hundred. Each run here is
still a process of its own: its own pid, environment, working directory, standard streams
and exit status, entering through the console script's entry point (``proxy.cli:main``).
It is forked from a "zygote" (one per test process) that imported those modules once and
opened, started and drew nothing: no file, connection, thread or random pool is shared.
What a fork cannot show, a fresh interpreter's start-up and lazy imports, the tests that
run the installed script itself check (test_cli's --help, test_progress, test_readme,
test_walkthrough from a wheel).
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
        input: str | None = None, timeout: float = 120, user: int | None = None
        ) -> subprocess.CompletedProcess:
    """Like ``subprocess.run([SCRIPT, *args], capture_output=True, text=True, ...)``;
    ``user``: the uid (and gid) to run as, from root (the interpreter's files may be out
    of that user's reach: the zygote has imported what the commands use)."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err, \
            tempfile.TemporaryFile() as stdin:
        stdin.write((input or "").encode())
        stdin.seek(0)
        process = start(args, env=env, cwd=cwd, stdin=stdin.fileno(), stdout=out.fileno(),
                        stderr=err.fileno(), user=user)
        try:
            code = process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            raise
        out.seek(0)
        err.seek(0)
        return subprocess.CompletedProcess(process.args, code,
                                           out.read().decode(errors="replace"),
                                           err.read().decode(errors="replace"))


def start(args: list[str], *, env: dict[str, str] | None = None, cwd: str | Path | None = None,
          stdin: int = 0, stdout: int = 1, stderr: int = 2, user: int | None = None) -> Forked:
    """Like ``subprocess.Popen([SCRIPT, *args], ...)``; the streams are descriptors of this
    process (inherited by default) or ``subprocess.PIPE`` for ``stderr`` (read as text);
    ``user`` as run's."""
    piped = stderr == subprocess.PIPE
    if piped:
        reader, stderr = os.pipe()
    request = {"args": [SCRIPT, *args], "env": dict(os.environ if env is None else env),
               "cwd": str(cwd or os.getcwd()), "user": user}
    conn = socket.socket(socket.AF_UNIX)
    try:
        conn.connect(_zygote())
        socket.send_fds(conn, [json.dumps(request).encode() + b"\n"], [stdin, stdout, stderr])
    except BaseException:
        conn.close()
        raise
    finally:
        if piped:
            os.close(stderr)
    return Forked(request["args"], conn, open(reader, errors="replace") if piped else None)


class Forked:
    """What the tests use of ``subprocess.Popen`` for a command the zygote started: its
    runner reports the pid, then the exit status (the runner reaps the process, so a pid
    is signalled only while no status has come)."""

    def __init__(self, args: list[str], conn: socket.socket, stderr) -> None:
        self.args, self.stderr, self.returncode = args, stderr, None
        self._conn, self._received = conn, b""
        self.pid = int(self._line(None))

    def _line(self, timeout: float | None) -> bytes:
        while b"\n" not in self._received:
            if not select.select([self._conn], [], [], timeout)[0]:
                raise subprocess.TimeoutExpired(self.args, timeout)
            chunk = self._conn.recv(64)
            if not chunk:
                raise RuntimeError("the CLI zygote's runner ended without a status")
            self._received += chunk
        line, _, self._received = self._received.partition(b"\n")
        return line

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            self.returncode = int(self._line(timeout))
            self._conn.close()
        return self.returncode

    def poll(self) -> int | None:
        try:
            return self.wait(0)
        except subprocess.TimeoutExpired:
            return None

    def send_signal(self, signum: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, signum)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)


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
    data, streams, _, _ = socket.recv_fds(conn, 1 << 16, 3)
    while not data.endswith(b"\n"):
        data += conn.recv(1 << 16)
    pid = os.fork()
    if pid == 0:
        conn.close()
        _command(json.loads(data), streams)
    for fd in streams:
        os.close(fd)
    try:
        conn.sendall(f"{pid}\n".encode())
        _, status = os.waitpid(pid, 0)
        conn.sendall(f"{os.waitstatus_to_exitcode(status)}\n".encode())
    finally:
        os._exit(0)  # the caller may be gone (a killed test run): nothing to tell


def _command(request: dict, streams: list[int]) -> None:
    """Runs the command and ends the process as an interpreter's exit would (threads
    joined, atexit handlers, streams flushed), without tearing down the imported modules:
    that touched every page of the zygote's heap and doubled a short command's time."""
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    for fd, received in enumerate(streams):
        os.dup2(received, fd)
    for received in streams:
        if received > 2:
            os.close(received)
    if request["user"] is not None:
        os.setgroups([])
        os.setgid(request["user"])
        os.setuid(request["user"])
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
