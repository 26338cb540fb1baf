"""Worker processes behind one listening socket (``[server] workers``, issue 17 item 4).

One Python process parses and analyses on one core at a time (the GIL), so a PostgreSQL
backend is served by N forked workers, each with its own engine and backend
connections; the ledger's atomic conditional debit in the database keeps their
sessions' budgets exact. The supervisor (the process ``idp-proxy serve`` started) binds
the port, prepares the shadow catalog once (the first worker that needs it starts it:
proxy/wire/shadow.py), forks the workers and then only counts:

- The workers inherit the one listening socket and accept from it. Not SO_REUSEPORT: an
  inherited socket is bound once (port 0 and the "serving" line stay simple), stays
  bound while a worker restarts, loses no queued connection when a worker dies (each
  SO_REUSEPORT socket has its own backlog, reset with it), and no other process of the
  same user can join the port's group; an idle worker wins the accept race, which
  spreads the load by how busy the workers are.
- Sessions are counted by the supervisor over each worker's control socket (a
  socketpair), so ``max_connections``, ``max_connections_per_analyst`` and
  ``max_pending_connections`` hold for the whole server, and a worker that dies gives
  its counts back. The cost is one local round trip at connect and one at login.
- A CancelRequest reaches whichever worker accepts it. The session's pid names its
  worker (``pid % workers``), and each worker listens on a Unix socket in a folder only
  the server's user can enter (0700); the wrong worker forwards the same 16 bytes there,
  so the secret key is compared only by the worker that holds the session.
- A worker that dies after it was ready is started again (logged); one that dies before
  it was ready stops the server (logged), since a second would fail the same way.
  SIGINT or SIGTERM to the supervisor stops the workers, then the catalog. A worker whose
  supervisor is gone (killed) stops too: its control socket reads end-of-file.
"""

from __future__ import annotations

import asyncio
import collections
import json
import logging
import os
import selectors
import shutil
import signal
import socket
import struct
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from proxy.rules import ServerLimits
from proxy.wire import codec

log = logging.getLogger("idp_proxy.workers")
_STOP_GRACE = 30  # seconds workers get to close their sessions before SIGKILL


def listening_sockets(host: str, port: int) -> list[socket.socket]:
    """Bound, listening sockets for ``host`` (every address it names, as asyncio binds
    them; port 0: the first address's free port for all)."""
    sockets: list[socket.socket] = []
    seen = set()
    for family, kind, proto, _, address in socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE):
        if (family, address[0]) in seen:
            continue
        seen.add((family, address[0]))
        sock = socket.socket(family, kind, proto)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        if sockets and port == 0:
            address = (address[0], sockets[0].getsockname()[1], *address[2:])
        sock.bind(address)
        sock.listen(128)
        sock.setblocking(False)
        sockets.append(sock)
    return sockets


class Crew:
    """A worker's view of the others: its index, the supervisor's counts, and the
    other workers' cancel sockets."""

    def __init__(self, index: int, size: int, folder: Path, control: socket.socket) -> None:
        self.index = index
        self.size = size
        self.folder = folder
        self._control = control
        self._replies: collections.deque[asyncio.Future] = collections.deque()
        self._writer: asyncio.StreamWriter | None = None
        self._reading: asyncio.Future | None = None

    def pids(self):
        """Session pids that name this worker (``pid % size``), as PostgreSQL's are
        unique: from 1000 on, as a single process's."""
        return iter(range(1000 * self.size + self.index, 1 << 31, self.size))

    def owns(self, pid: int) -> bool:
        return pid % self.size == self.index

    async def join(self, stop: asyncio.Event) -> None:
        """Open the control channel; ``stop`` is set if the supervisor goes away."""
        reader, self._writer = await asyncio.open_unix_connection(sock=self._control)

        async def replies() -> None:
            try:
                while line := await reader.readline():
                    self._replies.popleft().set_result(json.loads(line))
            except ConnectionError:  # reset: it died with our last words unread
                pass
            log.error("worker %d: the supervisor is gone; stopping", self.index)
            stop.set()

        self._reading = asyncio.ensure_future(replies())

    def _tell(self, *message: object) -> None:
        self._writer.write(json.dumps(message).encode() + b"\n")

    async def _ask(self, *message: object):
        reply = asyncio.get_running_loop().create_future()
        self._replies.append(reply)
        self._tell(*message)
        return await reply

    async def may_start(self) -> bool:
        """A slot among the connections still logging in (max_pending_connections)."""
        return await self._ask("pending")

    def started(self) -> None:
        self._tell("started")

    async def admit(self, user: str) -> str | None:
        """A session slot for ``user``, or the refusal's text."""
        return await self._ask("admit", user)

    def forget(self, user: str) -> None:
        self._tell("forget", user)

    def ready(self) -> None:
        self._tell("ready")

    def cancel_socket(self, index: int) -> Path:
        return self.folder / f"{index}.sock"

    def forward_cancel(self, pid: int, key: int) -> None:
        """In a cancel thread: hand the CancelRequest to the worker that owns ``pid``,
        and wait until it has acted (it closes the socket), as a client waits for
        PostgreSQL to close a cancel connection."""
        try:
            with socket.socket(socket.AF_UNIX) as sock:
                sock.settimeout(10)
                sock.connect(str(self.cancel_socket(pid % self.size)))
                sock.sendall(struct.pack("!iiii", 16, codec.CANCEL_REQUEST, pid, key))
                sock.recv(1)
        except OSError as exc:  # the owner is restarting: its sessions are gone anyway
            log.info("could not forward a cancel to worker %d: %s", pid % self.size, exc)


class Seats:
    """The supervisor's counts of sessions and of connections logging in, per worker,
    checked against the whole server's limits."""

    def __init__(self, limits: ServerLimits, size: int) -> None:
        self.limits = limits
        self.pending = [0] * size
        self.live = [collections.Counter() for _ in range(size)]
        self.users: collections.Counter[str] = collections.Counter()

    def may_start(self, worker: int) -> bool:
        if sum(self.pending) >= self.limits.max_pending_connections:
            return False
        self.pending[worker] += 1
        return True

    def started(self, worker: int) -> None:
        self.pending[worker] -= 1

    def admit(self, worker: int, user: str) -> str | None:
        if self.users.total() >= self.limits.max_connections:
            return "sorry, too many clients already"
        if self.users[user] >= self.limits.max_connections_per_analyst:
            log.warning("refused a session of %s: %d open ([server] "
                        "max_connections_per_analyst)", user, self.users[user])
            return f'too many connections for role "{user}"'
        self.live[worker][user] += 1
        self.users[user] += 1
        return None

    def forget(self, worker: int, user: str) -> None:
        self.live[worker][user] -= 1
        self.users[user] -= 1
        self.users += collections.Counter()  # drops the zeros

    def drop(self, worker: int) -> None:
        """A worker died: its sessions and connections died with it."""
        self.users -= self.live[worker]
        self.live[worker].clear()
        self.pending[worker] = 0


class Alone:
    """The counting of a server of one process: the same Seats, kept in the process
    itself (a worker's Crew asks its supervisor instead)."""

    def __init__(self, limits: ServerLimits) -> None:
        self._seats = Seats(limits, 1)

    async def may_start(self) -> bool:
        return self._seats.may_start(0)

    def started(self) -> None:
        self._seats.started(0)

    async def admit(self, user: str) -> str | None:
        return self._seats.admit(0, user)

    def forget(self, user: str) -> None:
        self._seats.forget(0, user)


def _sweep() -> None:
    """Remove the cancel sockets' folders of supervisors that were killed (SIGKILL)."""
    for folder in Path(tempfile.gettempdir()).glob("idp-proxy-workers-*-*"):
        try:
            os.kill(int(folder.name.split("-")[3]), 0)
        except ProcessLookupError:
            shutil.rmtree(folder, ignore_errors=True)
        except (ValueError, OSError):
            pass


class Supervisor:
    """Forks ``size`` workers, each running ``work(crew)`` (which serves until SIGTERM),
    answers their counting, restarts one that dies, and stops them all on SIGINT or
    SIGTERM. ``ready`` is called once, when every worker serves."""

    def __init__(self, size: int, limits: ServerLimits, work: Callable[[Crew], None],
                 ready: Callable[[], None]) -> None:
        self.size = size
        self.work = work
        self.ready = ready
        self.seats = Seats(limits, size)
        _sweep()
        self.folder = Path(tempfile.mkdtemp(prefix=f"idp-proxy-workers-{os.getpid()}-"))  # 0700
        self._selector = selectors.DefaultSelector()
        self._pids: dict[int, int] = {}  # worker index -> process id
        self._controls: dict[int, socket.socket] = {}
        self._buffers: dict[int, bytes] = {}
        self._ready: set[int] = set()
        self._announced = False
        self._stopping = False

    def run(self) -> int:
        """Serve until a signal (0) or until a worker cannot start (1)."""
        wake_read, wake_write = socket.socketpair()
        wake_write.setblocking(False)
        previous = signal.set_wakeup_fd(wake_write.fileno())
        handlers = {signum: signal.signal(signum, self._on_signal)
                    for signum in (signal.SIGINT, signal.SIGTERM)}
        self._selector.register(wake_read, selectors.EVENT_READ, None)
        code = 0
        try:
            for index in range(self.size):
                self._start(index)
            while not self._stopping:
                for key, _ in self._selector.select():
                    if key.data is None:
                        wake_read.recv(4096)
                    elif not self._read(key.data) and not self._stopping:
                        code = self._died(key.data)
        finally:
            self._stop_all()
            signal.set_wakeup_fd(previous)
            for signum, handler in handlers.items():
                signal.signal(signum, handler)
            wake_read.close()
            wake_write.close()
            shutil.rmtree(self.folder, ignore_errors=True)
        return code

    def _on_signal(self, signum, frame) -> None:
        self._stopping = True

    def _start(self, index: int) -> None:
        mine, theirs = socket.socketpair()
        pid = os.fork()
        if pid == 0:  # the worker: never returns to the supervisor's code
            code = 1
            try:
                mine.close()
                for control in self._controls.values():
                    control.close()
                self._selector.close()
                signal.set_wakeup_fd(-1)
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
                signal.signal(signal.SIGINT, signal.default_int_handler)
                self.work(Crew(index, self.size, self.folder, theirs))
                code = 0
            except BaseException:
                log.exception("worker %d failed", index)
            finally:
                logging.shutdown()
                os._exit(code)
        theirs.close()
        self._pids[index] = pid
        self._controls[index] = mine
        self._buffers[index] = b""
        self._selector.register(mine, selectors.EVENT_READ, index)

    def _read(self, index: int) -> bool:
        """Answer what worker ``index`` sent; False once it is gone (end of file)."""
        control = self._controls[index]
        try:
            data = control.recv(65536)
            if not data:
                return False
            self._answer(index, control, data)
        except ConnectionError:  # reset: it died with our last reply unread
            return False
        return True

    def _answer(self, index: int, control: socket.socket, data: bytes) -> None:
        lines = (self._buffers[index] + data).split(b"\n")
        self._buffers[index] = lines.pop()
        for line in lines:
            word, *args = json.loads(line)
            if word == "pending":
                control.sendall(json.dumps(self.seats.may_start(index)).encode() + b"\n")
            elif word == "admit":
                control.sendall(json.dumps(self.seats.admit(index, *args)).encode() + b"\n")
            elif word == "started":
                self.seats.started(index)
            elif word == "forget":
                self.seats.forget(index, *args)
            elif word == "ready":
                self._ready.add(index)
                if not self._announced and len(self._ready) == self.size:
                    self._announced = True
                    self.ready()

    def _died(self, index: int) -> int:
        """Worker ``index`` exited: start another, or stop if it never became ready."""
        self._selector.unregister(self._controls[index])
        self._controls.pop(index).close()
        _, status = os.waitpid(self._pids.pop(index), 0)
        self.seats.drop(index)
        how = (f"signal {os.WTERMSIG(status)}" if os.WIFSIGNALED(status)
               else f"status {os.waitstatus_to_exitcode(status)}")
        if index not in self._ready:
            log.error("worker %d exited (%s) before it served; stopping the server", index, how)
            self._stopping = True
            return 1
        self._ready.discard(index)
        log.error("worker %d exited (%s); starting another", index, how)
        self._start(index)
        return 0

    def _stop_all(self) -> None:
        """SIGTERM to every worker, SIGKILL to any still running after the grace."""
        for pid in self._pids.values():
            os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + _STOP_GRACE
        while self._pids:
            for index, pid in list(self._pids.items()):
                done, _ = os.waitpid(pid, os.WNOHANG)
                if done:
                    del self._pids[index]
                elif time.monotonic() > deadline:
                    log.error("worker %d did not stop within %d s; killed", index, _STOP_GRACE)
                    os.kill(pid, signal.SIGKILL)
                    os.waitpid(pid, 0)
                    del self._pids[index]
            time.sleep(0.02)
        for control in self._controls.values():
            control.close()
        self._selector.close()
