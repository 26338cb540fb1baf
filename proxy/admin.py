"""The command line's work on a DuckDB file that a server holds.

A DuckDB file can be open in one process only, so while ``idp-proxy serve`` runs on it,
``idp-proxy query|release|users|budget|ledger`` cannot open it. The server therefore
listens on a Unix socket named after the file, in a folder only its OS user can enter,
and runs there the few calls those commands make; the commands send their call when
they find the file locked. Whoever may use the socket may open the file itself, so the
socket grants nothing new. PostgreSQL needs none of this: the commands connect directly.

The folder sits in the shared temporary directory, where another local user may make it
first and listen in it: the server starts only in a real 0700 directory of its own, and
a command sends only after checking that folder again and that the listener runs as its
own OS user (the kernel's peer credentials). A password never crosses the socket: the
command sends its SCRAM secret (proxy.users.secret_of).

One request line, ``{"target", "method", "args"}``; replies: an ``{"event"}`` line for
each answer or release step as it happens (the ``analyst`` calls), then one
``{"result"}`` or ``{"error": [SQLSTATE, message]}`` line.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import inspect
import itertools
import logging
import os
import socket
import stat
import struct
import tempfile
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path
from typing import Any

from proxy import jsontags
from proxy.engine import Engine
from proxy.errors import DatabaseInUse, ProxyError, SyntaxProblem, UnsafeAdminSocket, pointing_at
from proxy.publish.request import prepare
from proxy.publish.run import run_release
from proxy.session import Session

log = logging.getLogger("idp_proxy.admin")

# The calls the command line makes, per target; nothing else is run.
CALLS = {"ledger": {"budgets", "grant", "reset", "remaining", "entries"},
         "users": {"add", "passwd", "disable", "list"},
         "analyst": {"query", "release"}}
REPORTING = {"analyst"}  # targets whose calls report as they go, through ``emit``
Emit = Callable[[Any], None]


class Analyst:
    """What ``idp-proxy query`` and ``release`` run on an engine — the command's own, or
    the server's when it holds the file — so both print the same. Each call hands its
    answers, or its release steps, to ``emit`` as they come."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def query(self, user: str, sql: str, epsilon: Decimal | None, model: str | None,
              prior: str | None, emit: Emit) -> None:
        """Run a script as ``user`` after the session settings the options ask for."""
        session = Session.open(self.engine, user)
        statements = []
        for name, value in (("epsilon", epsilon), ("model", model), ("prior", prior)):
            if value is not None:
                quoted = str(value).replace("'", "''")
                statements.append(f"SET idp.{name} = '{quoted}'")
        if statements:
            list(session.execute(";".join(statements)))
        try:
            answers = session.execute(sql)
            first = next(answers, None)  # every statement is checked before this one runs
        except SyntaxProblem as exc:
            if exc.position is None:
                raise
            raise SyntaxProblem(f"{exc.message}\n{pointing_at(sql, exc.position)}") from None
        try:
            for answer in () if first is None else itertools.chain([first], answers):
                emit({"command": answer.command, "columns": answer.columns,
                      "rows": [list(row) for row in answer.rows], "privacy": answer.privacy,
                      "notice": answer.notice})
        finally:  # a command's own engine ends with the process: its replays' rows now
            self.engine.ledger.flush()

    def release(self, user: str, table: str, columns: str, k: int, epsilon: str, method: str,
                split: str, alpha: float | None, domains: list[str], key: str | None,
                out: str, emit: Emit) -> dict[str, Any]:
        """``idp-proxy release`` (``out`` an absolute path or table:NAME); emits
        [step, fraction done] and returns what the command reports."""
        engine = self.engine
        engine.ledger.ensure_analyst(user)
        job = prepare(engine.rules, engine.backend, table, columns, k, epsilon, method, split,
                      alpha, tuple(domains), key, out)
        report = run_release(engine.backend, engine.ledger, job, user,
                             lambda step, done: emit([step, done]))
        return {"table": job.table.name, "columns": list(job.columns), "rows": report.rows,
                "clusters": list(report.clusters), "mean_sse": report.mean_sse,
                "epsilon": job.epsilon, "remaining": report.epsilon_remaining}


def socket_path(database: str) -> Path:
    """Where the server of this DuckDB file listens (short: socket paths are limited)."""
    digest = hashlib.sha256(str(Path(database).resolve()).encode()).hexdigest()[:16]
    return Path(tempfile.gettempdir()) / f"idp-proxy-{os.getuid()}" / f"{digest}.sock"


def make_socket_folder(path: Path) -> None:
    """The folder of the socket ``path``, made by the server at start with mode 0700, or
    taken as it is found only when it is fit (``_unfit``); nothing there is changed, as
    a symlink left by another user would carry a chmod to a folder of their choosing."""
    try:
        path.parent.mkdir(mode=0o700)  # never follows a symlink at its own name
    except FileExistsError:
        pass
    problem = _unfit(path.parent)
    if problem is not None:
        raise UnsafeAdminSocket(f"not serving: the admin socket's folder {path.parent} "
                                f"{problem}; another local user may have made it to listen "
                                "in the server's place: remove it, or set TMPDIR to a "
                                "folder of your own")


def _unfit(folder: Path) -> str | None:
    """What makes ``folder`` unfit to hold the admin socket (None: nothing): it must be a
    real directory (lstat: a symlink is not followed), of this OS user, mode 0700. A
    missing folder raises FileNotFoundError."""
    info = os.lstat(folder)
    mode = stat.S_IMODE(info.st_mode)
    if stat.S_ISLNK(info.st_mode):
        return "is a symbolic link"
    if not stat.S_ISDIR(info.st_mode):
        return "is not a directory"
    if info.st_uid != os.getuid():
        return f"belongs to uid {info.st_uid}, not to this user (uid {os.getuid()})"
    if mode != 0o700:
        return f"has mode {mode:o}, not 700"
    return None


def peer_uid(sock: socket.socket) -> int:
    """The uid of the process at the other end of a connected Unix socket, as the kernel
    recorded it at connect or listen (SO_PEERCRED: the peer cannot forge it)."""
    size = struct.calcsize("3i")
    _pid, uid, _gid = struct.unpack("3i", sock.getsockopt(socket.SOL_SOCKET,
                                                          socket.SO_PEERCRED, size))
    return uid


async def serve_admin(path: Path, targets: dict[str, Any]) -> asyncio.AbstractServer:
    """Listen on ``path``, whose folder ``make_socket_folder`` checked at start (a stale
    socket of a killed server is replaced: the file's lock proves no other server of it
    runs), for calls to the server's ``ledger``, ``users`` and ``analyst`` (an Analyst
    over the server's own engine). Only this OS user's processes are heard: the
    folder's mode keeps others out, and the peer's uid is checked should it not."""
    path.unlink(missing_ok=True)

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        uid = peer_uid(writer.get_extra_info("socket"))
        if uid != os.getuid():
            log.warning("admin socket: refused a connection of uid %d", uid)
            writer.close()
            return
        line = await reader.readline()
        loop = asyncio.get_running_loop()

        def send(reply: dict[str, Any]) -> None:  # from the call's worker thread
            data = jsontags.dumps(reply).encode() + b"\n"
            loop.call_soon_threadsafe(writer.write, data)

        try:
            if line:  # an empty one is a probe of whether the server listens
                try:
                    reply = await _run(targets, jsontags.loads(line), send)
                except (ValueError, TypeError, KeyError, AttributeError):
                    reply = {"error": ["08P01", "malformed admin request"]}
                writer.write(jsontags.dumps(reply).encode() + b"\n")
                await writer.drain()
        except ConnectionError:
            pass
        finally:
            writer.close()

    server = await asyncio.start_unix_server(handle, path)
    os.chmod(path, 0o600)
    return server


async def _run(targets: dict[str, Any], request: dict[str, Any],
               send: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    """Run one call in the default executor (the server's session threads): an
    analyst's query or release blocks a thread, never the event loop."""
    target, method, args = request["target"], request["method"], request["args"]
    if method not in CALLS.get(target, ()):
        return {"error": ["42501", f"{target}.{method} is not an admin call"]}
    call = getattr(targets[target], method)
    if target in REPORTING:
        call = functools.partial(call, emit=lambda event: send({"event": event}))
    inspect.signature(call).bind(*args)  # a TypeError: malformed
    try:
        result = await asyncio.get_running_loop().run_in_executor(None, call, *args)
    except ProxyError as exc:
        return {"error": [exc.sqlstate, exc.message]}
    except Exception:
        log.exception("admin call %s.%s failed", target, method)
        return {"error": ["XX000", "internal error in the server; its log has the details"]}
    log.info("admin call %s.%s", target, method)
    return {"result": result}


class Remote:
    """One target (``ledger``, ``users`` or ``analyst``) of a running server, called like
    the local object: ``Remote(path, "ledger").budgets("alice")``; an analyst's call
    takes ``emit=`` as the local one does."""

    def __init__(self, path: Path, target: str) -> None:
        self.path = path
        self.target = target

    def __getattr__(self, method: str):
        if method not in CALLS.get(self.target, ()):
            raise AttributeError(method)
        return lambda *args, emit=None: self._call(method, args, emit)

    def _call(self, method: str, args: tuple, emit: Emit | None) -> Any:
        request = {"target": self.target, "method": method, "args": list(args)}
        with _connect(self.path) as sock:
            sock.sendall(jsontags.dumps(request).encode() + b"\n")
            for line in sock.makefile("rb"):
                reply = jsontags.loads(line)
                if "event" in reply:
                    emit(reply["event"])
                elif "error" in reply:
                    sqlstate, message = reply["error"]
                    raise ProxyError(message, sqlstate)
                else:
                    return reply["result"]
        raise ProxyError("the server stopped before it answered; see its log", "08006")


def _connect(path: Path) -> socket.socket:
    """A connection to the server listening on ``path``, made only when its folder is fit
    and the listener runs as this OS user, whom the folder's name says it serves (a
    server of root listens under root's name): else UnsafeAdminSocket, nothing sent.
    OSError: no server listens there."""
    problem = _unfit(path.parent)
    if problem is not None:
        raise UnsafeAdminSocket(f"not sending to the server: its socket's folder "
                                f"{path.parent} {problem}")
    sock = socket.socket(socket.AF_UNIX)
    try:
        sock.connect(str(path))
        uid = peer_uid(sock)
        if uid != os.getuid():
            raise UnsafeAdminSocket(f"not sending to the server: the process listening on "
                                    f"{path} runs as uid {uid}, not as this user "
                                    f"(uid {os.getuid()})")
    except BaseException:
        sock.close()
        raise
    return sock


def reach_server(error: DatabaseInUse, target: str) -> Remote:
    """The ``target`` of the server that holds the locked DuckDB file, when one answers
    on its socket; else ``error`` itself."""
    remote = socket_path(error.path)
    try:
        _connect(remote).close()
    except OSError:
        raise error from None
    return Remote(remote, target)
