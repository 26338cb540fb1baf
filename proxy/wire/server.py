"""``idp-proxy serve``: an asyncio server, one task per client connection, around the
engine, the analyst accounts and the shadow catalog."""

from __future__ import annotations

import asyncio
import itertools
import logging
import secrets
import signal
import socket
import ssl
import struct
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from proxy.admin import Analyst, serve_admin
from proxy.engine import Engine
from proxy.rules import Rules
from proxy.session import totality_failures
from proxy.users import Users
from proxy.wire import codec
from proxy.wire.connection import Connection, is_loopback
from proxy.wire.shadow import ShadowCatalog
from proxy.wire.workers import Alone, Crew

log = logging.getLogger("idp_proxy.server")


class Server:
    def __init__(self, engine: Engine, users: Users, shadow: ShadowCatalog,
                 tls: ssl.SSLContext | None = None, admin: Path | None = None,
                 crew: Crew | None = None) -> None:
        self.engine = engine
        self.rules: Rules = engine.rules
        self.limits = engine.rules.server
        self.users = users
        self.shadow = shadow
        self.tls = tls
        self.admin = admin  # the Unix socket of proxy.admin (servers of a DuckDB file)
        self.crew = crew  # the other worker processes of this server, if any
        self._pids = itertools.count(1000) if crew is None else crew.pids()
        self._live: dict[int, Connection] = {}
        # Sessions and connections logging in, counted against the limits: by the
        # supervisor for all workers, else here
        self._seats = crew if crew is not None else Alone(self.limits)
        self._tasks: set[asyncio.Task] = set()
        # Cancels get threads of their own: the shared pool may be full of sessions
        # waiting for the very statement a cancel must stop.
        self._cancels = ThreadPoolExecutor(max_workers=2, thread_name_prefix="cancel")

    def trusts(self, peer) -> bool:
        """Trust only when the rules say so, and only for clients on this machine."""
        return self.limits.auth == "trust" and is_loopback(peer)

    async def admit(self, connection: Connection) -> str | None:
        """Give a logged-in session its slot, or say why not: every session counts
        against ``max_connections`` and its analyst's ``max_connections_per_analyst``
        (so that one analyst's tool cannot take every slot; the owner's admin socket
        is not a session and is never refused). Workers count with their supervisor."""
        refusal = await self._seats.admit(connection.user)
        if refusal is not None:
            return refusal
        connection.pid = next(self._pids)
        self._live[connection.pid] = connection
        return None

    def started(self, connection: Connection) -> None:
        """The connection's startup is over, logged in or not."""
        self._seats.started()

    def forget(self, connection: Connection) -> None:
        if self._live.pop(connection.pid, None) is not None:
            self._seats.forget(connection.user)

    def cancel(self, pid: int, key: int) -> None:
        """A CancelRequest (in a cancel thread); one for a session of another worker
        goes there unread."""
        if self.crew is not None and not self.crew.owns(pid):
            self.crew.forward_cancel(pid, key)
            return
        target = self._live.get(pid)
        if target is not None and secrets.compare_digest(target.key.to_bytes(4, "big"),
                                                         key.to_bytes(4, "big", signed=True)):
            target.cancel_running()

    async def run_cancel(self, function, *args) -> None:
        await asyncio.get_running_loop().run_in_executor(self._cancels, function, *args)

    async def _forwarded_cancel(self, reader: asyncio.StreamReader,
                                writer: asyncio.StreamWriter) -> None:
        """A CancelRequest another worker received for one of this worker's sessions;
        closing the socket tells it the cancel was made."""
        try:
            length, code, pid, key = struct.unpack("!iiii", await reader.readexactly(16))
            if length == 16 and code == codec.CANCEL_REQUEST and self.crew.owns(pid):
                await self.run_cancel(self.cancel, pid, key)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if not await self._seats.may_start():
            # Unauthenticated connections are bounded apart from sessions, so that
            # clients that never log in cannot use up the process's file descriptors.
            log.warning("refused a connection from %s: %d others are still logging in "
                        "([server] max_pending_connections)",
                        writer.get_extra_info("peername"), self.limits.max_pending_connections)
            writer.write(codec.error_response("53300", "sorry, too many clients are logging "
                                              "in at once; try again", "FATAL"))
            writer.close()
            return
        task = asyncio.current_task()
        self._tasks.add(task)
        try:
            await Connection(self, reader, writer).run()
        except Exception:  # the server outlives any one connection
            log.exception("connection failed")
            writer.close()
        finally:
            self._tasks.discard(task)

    async def serve(self, host: str, port: int, ready=None,
                    stop: asyncio.Event | None = None,
                    sockets: list[socket.socket] | None = None) -> None:
        """Serve until SIGINT or SIGTERM (or until ``stop`` is set: signals reach only
        the main thread, and a server in another thread is stopped so), then close the
        listener and the sessions. A worker serves the ``sockets`` its supervisor
        bound, and its cancel socket."""
        loop = asyncio.get_running_loop()
        # One worker thread per possible session, so a session's blocking engine call
        # never waits for a thread behind other sessions' calls.
        loop.set_default_executor(ThreadPoolExecutor(self.limits.max_connections + 4,
                                                     thread_name_prefix="session"))
        for backend in {id(b): b for b in (self.engine.backend,
                                           self.engine.ledger.backend)}.values():
            backend.watch_writes(self.limits.write_poll_ms)  # repeats that read nothing
        if stop is None:
            stop = asyncio.Event()
            for signum in (signal.SIGINT, signal.SIGTERM):
                loop.add_signal_handler(signum, stop.set)
        if self.crew is not None:
            await self.crew.join(stop)
            await asyncio.start_unix_server(self._forwarded_cancel,
                                            self.crew.cancel_socket(self.crew.index))
        servers = ([await asyncio.start_server(self._handle, sock=sock, limit=1 << 16)
                    for sock in sockets] if sockets else
                   [await asyncio.start_server(self._handle, host, port, limit=1 << 16)])
        bound = servers[0].sockets[0].getsockname()
        log.info("listening on %s:%d", bound[0], bound[1])
        # Admin calls are taken before "serving" is announced: a user who runs
        # `idp-proxy users add` once the server says it serves must reach it.
        admin = None if self.admin is None else await serve_admin(
            self.admin, {"ledger": self.engine.ledger, "users": self.users,
                         "analyst": Analyst(self.engine)})
        if ready is not None:
            ready(bound[0], bound[1])
        await stop.wait()
        log.warning("stopping: no new connections; the running statements of %d session(s) "
                    "are cancelled", len(self._live))
        for server in servers:
            server.close()
        if admin is not None:
            admin.close()
            self.admin.unlink(missing_ok=True)
        for connection in list(self._live.values()):  # long statements must not hold us
            await self.run_cancel(connection.cancel_running)
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        try:  # the replays' rows kept in memory (docs/budget.md)
            self.engine.ledger.close()
        except Exception as exc:  # noqa: BLE001 - a replay spent nothing: only its record
            log.error("the ledger rows of %d replays were not written at shutdown: %s",
                      self.engine.ledger.pending_replays(), exc)
        failures = totality_failures()
        (log.error if failures else log.info)(
            "stopped; totality failures (charged statements the backend failed on): %d",
            failures)
