"""Start ``idp-proxy serve`` as a process of its own on a free port, as a user would, and stop it
with SIGTERM; tests then talk to it with real clients over 127.0.0.1. What it serves is
built in tests/factories.py."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import psycopg
from psycopg.conninfo import make_conninfo

from tests import forked_cli, watchdog

ROOT = Path(__file__).resolve().parent.parent  # the repository: its rules are never written


def typed(kind: bytes, body: bytes) -> bytes:
    """A frontend protocol message, framed by hand (for tests below any driver)."""
    return kind + struct.pack("!i", len(body) + 4) + body


def startup_message(user: str, database: str = "demo") -> bytes:
    body = (struct.pack("!i", 196608) + b"user\0" + user.encode() + b"\0database\0"
            + database.encode() + b"\0\0")
    return struct.pack("!i", len(body) + 4) + body


def backend_messages(sock: socket.socket, until: bytes = b"Z") -> list[tuple[bytes, bytes]]:
    """Read (type, body) messages up to and including the first of type ``until``."""
    data, out = b"", []
    while True:
        while len(data) < 5 or len(data) < 1 + struct.unpack("!i", data[1:5])[0]:
            chunk = sock.recv(65536)
            assert chunk, "the server closed the connection"
            data += chunk
        length = struct.unpack("!i", data[1:5])[0]
        kind, body, data = data[:1], data[5:1 + length], data[1 + length:]
        out.append((kind, body))
        if kind == until:
            return out


SCRIPT = str(Path(sys.executable).parent / "idp-proxy")
_READY = re.compile(r"serving .* on 127\.0\.0\.1:(\d+)")
START_SECONDS = 180  # a start check, a catalog and workers under a loaded machine's CI


@dataclass
class RunningProxy:
    port: int
    log: list[str]
    process: subprocess.Popen | forked_cli.Forked
    killed: bool = False
    backend_url: str | None = None  # the data served (demo_proxy's)

    def kill(self) -> None:
        """SIGKILL, as a crash would: no clean-up runs."""
        self.killed = True
        self.process.kill()
        self.process.wait(20)

    def logged(self, text: str, since: int = 0, seconds: float = 30.0) -> bool:
        """Whether a line of the log after the first ``since`` says ``text``, waiting up
        to ``seconds`` for it: the server may write it after the socket the test reads
        has closed, and a thread of this process reads the log."""
        deadline = time.monotonic() + seconds
        while not any(text in line for line in self.log[since:]):
            if time.monotonic() > deadline:
                return False
            time.sleep(0.05)
        return True

    def dsn(self, user: str, database: str = "demo", **extra: str) -> str:
        parts = {"host": "127.0.0.1", "port": str(self.port), "user": user,
                 "dbname": database, **extra}
        return make_conninfo(**parts)



def admin(rules: Path, backend: str, home: Path, *args: str, stdin: str | None = None,
          ledger: str | None = None) -> subprocess.CompletedProcess:
    """An ``idp-proxy`` admin command (users, budget, ledger) on the same rules and backend
    (and ``--ledger``). On DuckDB it needs the file, so it runs while no server holds it."""
    return forked_cli.run([*args, "--rules", str(rules), "--backend", backend,
                           *(["--ledger", ledger] if ledger else [])],
                          env={**os.environ, "IDP_PROXY_HOME": str(home)}, input=stdin)


def _without_start_check(rules: Path) -> None:
    """``[server] start_check_seconds = 0`` written into ``rules`` unless it sets the key
    (in the file itself: its name is in the server's messages), at its end where it has
    no ``[server]`` (no line moves)."""
    text = rules.read_text()
    if rules.resolve().is_relative_to(ROOT):
        raise ValueError(f"{rules} is the repository's: serve a copy (running_proxy writes "
                         "into its rules)")
    if "start_check_seconds" not in text:
        rules.write_text(text.replace("[server]", "[server]\nstart_check_seconds = 0", 1)
                         if "[server]" in text
                         else text + "\n[server]\nstart_check_seconds = 0\n")


@contextmanager
def running_proxy(rules: Path | None, backend: str | None, home: Path, *extra: str,
                  installed: bool = False, ledger: str | None = None,
                  start_check: bool = False):
    """The server on a free port; ``rules``/``backend`` None serve the embedded demo;
    ``ledger``: its ``--ledger``. It is forked ready-imported (tests/forked_cli.py), or
    with ``installed`` the installed script started as README's reader starts it. The
    start-time rules check (advice in the log; seconds of a server's start on PostgreSQL
    under load) runs only so, with ``start_check``, or where the rules set its time box."""
    if rules is not None and not (start_check or installed):
        _without_start_check(rules)
    env = {**os.environ, "IDP_PROXY_HOME": str(home)}
    options = ([] if rules is None else ["--rules", str(rules)]) + (
        [] if backend is None else ["--backend", backend]) + (
        [] if ledger is None else ["--ledger", ledger])
    args = ["serve", *options, "--port", "0", *extra]
    process = (subprocess.Popen([SCRIPT, *args], env=env, stderr=subprocess.PIPE, text=True)
               if installed else forked_cli.start(args, env=env, stderr=subprocess.PIPE))
    watchdog.watch_server(process.pid)  # SIGTERM from the watchdog if this process dies
    try:
        log: list[str] = []
        ports: list[int] = []
        announced = threading.Event()

        def drain() -> None:  # the whole log, its "serving" line announced when it comes
            for line in process.stderr:
                log.append(line)
                match = _READY.search(line)
                if match and not ports:
                    ports.append(int(match.group(1)))
                    announced.set()
            announced.set()  # the end of the log: it stopped without serving

        reader = threading.Thread(target=drain, daemon=True)
        reader.start()
        # a server that hangs while starting fails its test instead of the whole run
        if not announced.wait(START_SECONDS) or not ports:
            process.kill()
            process.wait(10)
            raise RuntimeError(f"idp-proxy serve did not start within {START_SECONDS} s:\n"
                               + "".join(log))
        port = ports[0]
        running = RunningProxy(port, log, process)
        try:
            yield running
        finally:
            if not running.killed:
                process.send_signal(signal.SIGTERM)
                try:
                    code = process.wait(20)
                except subprocess.TimeoutExpired:
                    process.kill()
                    raise
                reader.join(5)
                assert code == 0, "".join(log)
    finally:
        watchdog.unwatch_server(process.pid)


@dataclass
class InProcessProxy:
    port: int
    server: object  # proxy.wire.server.Server: its engine may be reached into
    dsn = RunningProxy.dsn


@contextmanager
def serving_in_process(rules: Path, backend: str):
    """The server in a thread of the test process, for tests that reach into its engine
    (to make it fail on purpose); clients still connect over a real socket, and its log
    goes to this process's logging (pytest's caplog)."""
    from proxy.backends import open_backend
    from proxy.engine import Engine
    from proxy.rules import load_rules
    from proxy.users import Users
    from proxy.wire.server import Server
    from proxy.wire.shadow import ShadowCatalog

    parsed = load_rules(rules)
    engine = Engine(parsed, open_backend(backend))
    shadow = ShadowCatalog(parsed, engine.backend, parsed.server.max_connections)
    server = Server(engine, Users(engine.ledger), shadow)
    loop, stop, bound = asyncio.new_event_loop(), asyncio.Event(), []
    ready = threading.Event()
    thread = threading.Thread(target=lambda: loop.run_until_complete(server.serve(
        "127.0.0.1", 0, lambda host, port: (bound.append(port), ready.set()), stop)))
    thread.start()
    try:
        while not ready.wait(0.1):
            assert thread.is_alive(), "the server did not start"
        yield InProcessProxy(bound[0], server)
    finally:
        loop.call_soon_threadsafe(stop.set)
        thread.join(30)
        loop.close()
        shadow.close()
        engine.backend.close()


def race(proxy, analyst: str, first: int, sessions: int = 32) -> tuple[int, int]:
    """``sessions`` sessions of one analyst, each with its own query (``income > first``,
    ``first + 1`` …), all released at once; returns (answers, budget refusals)."""
    connections = [psycopg.connect(proxy.dsn(analyst), autocommit=True)
                   for _ in range(sessions)]
    start = threading.Barrier(sessions)
    outcomes: list[str] = []

    def ask(con, number):
        start.wait()
        try:
            con.execute(f"SELECT COUNT(*) FROM people WHERE income > {number}").fetchone()
            outcomes.append("answer")
        except psycopg.Error as exc:
            outcomes.append(exc.sqlstate)

    threads = [threading.Thread(target=ask, args=(con, first + i))
               for i, con in enumerate(connections)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    for con in connections:
        con.close()
    assert len(outcomes) == sessions and set(outcomes) <= {"answer", "PB001"}, outcomes
    return outcomes.count("answer"), outcomes.count("PB001")
