"""One client connection: startup, authentication, then simple and extended queries.

Each statement is routed (proxy.wire.route) to the connection itself, the engine or the
shadow catalog. The event loop only moves bytes: reading SQL (sqlglot), analysing it,
running it and encoding its rows happen in worker threads, so that no statement,
however large, stalls the other sessions. Every failure becomes an ErrorResponse with a
SQLSTATE; only a broken framing ends the connection.
"""

from __future__ import annotations

import asyncio
import ipaddress
import itertools
import logging
import re
import secrets
import ssl
import struct
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from datetime import tzinfo
from typing import Any, Protocol, TypeVar

from proxy.engine import Engine
from proxy.errors import (
    NotSupported,
    ProxyError,
    QueryCanceled,
    Refused,
    TooComplex,
    UnknownAnalyst,
)
from proxy.interrupts import checkpoint
from proxy.pgtypes import TEXT, oid_of
from proxy.rules import Rules, ServerLimits
from proxy.session import Answer, Session
from proxy.setting_scopes import BEGIN, COMMIT, ROLLBACK, ScopeEvent
from proxy.users import Users
from proxy.wire import codec, params, types
from proxy.wire.copy_out import CopyOptions
from proxy.wire.cursors import MAX_CURSORS, MAX_HELD_ROWS, missing, read_close, read_fetch
from proxy.wire.deadlines import DEADLINES
from proxy.wire.local import REPORTED, LocalState, Outcome, timeout_ms
from proxy.wire.route import Route, Statement, read_message, with_backend_pid
from proxy.wire.scram import MECHANISM, AuthFailed, Exchange
from proxy.wire.shadow import Column, ShadowCatalog, ShadowSession
from proxy.zones import zone_named

log = logging.getLogger("idp_proxy.wire")
INTERNAL_ERROR = ("internal error; the query was charged if it reached the data; see the "
                  "server log")
_BOUND = params.BoundTexts(1024)  # shared by the connections of this process
# messages of one engine statement, read and routed before: (text,) -> its Statement
_ROUTED = params.BoundTexts(1024)
_QUERIES = ("SELECT", "VALUES", "TABLE")  # statements that return rows, of no column too
_ROWS_PER_WRITE = 256  # catalog rows encoded per worker call and written per drain
# replies held for a client that sends without reading, before the server waits for it
# to read them (a 9-byte Describe can be answered by a RowDescription of 100 KB)
_OUT_BYTES = 1 << 20
# rows that the session's portals hold for later Executes (an Execute with a row limit
# reads its whole answer at once): beyond, such an Execute is refused (54000)
_HELD_BYTES = 64 << 20
_MAX_PREPARED, _PREPARED_TEXT = 10_000, 64 << 20  # a session's named prepared statements
# what a connection ended by a protocol violation reads and drops at most, after its error
_DRAIN_BYTES, _DRAIN_SECONDS = 64 << 20, 2.0
T = TypeVar("T")


class ConnectionClosed(Exception):
    pass


class Host(Protocol):
    """What a connection needs of the server that accepted it (proxy.wire.server.Server,
    which imports this module: the dependency runs one way)."""

    engine: Engine
    rules: Rules
    limits: ServerLimits
    users: Users
    shadow: ShadowCatalog
    tls: ssl.SSLContext | None

    def trusts(self, peer: Any) -> bool: ...
    async def admit(self, connection: Connection) -> str | None: ...
    def started(self, connection: Connection) -> None: ...
    def forget(self, connection: Connection) -> None: ...
    def cancel(self, pid: int, key: int) -> None: ...
    async def run_cancel(self, function: Callable[..., None], *args: Any) -> None: ...


@dataclass
class Prepared:
    statement: Statement
    param_types: tuple[int, ...]
    fields: list[codec.Field] | None  # None: the statement returns no rows
    shadow_name: bytes | None = None
    intervals: bool | None = None  # idp.intervals when described: it adds columns
    # described with stand-ins for its parameters, refused (power(x, $1): the stand-in 1
    # is not an exponent it takes): its columns are read from each Bind's values
    refusal: ProxyError | None = None


@dataclass
class Portal:
    prepared: Prepared
    values: tuple[bytes | None, ...]
    param_formats: tuple[int, ...]
    result_formats: tuple[int, ...]
    sql: str = ""  # engine statements: the text with the values bound
    step: Any = None  # engine statements: the work checked with the message, if it was
    pending: list[bytes] | None = None  # DataRow messages not yet sent
    held: int = 0  # the size of its values and rows held (``_HELD_BYTES``)
    tag: str = ""
    notice: str | None = None


@dataclass
class Cursor:
    """A declared cursor: its query's answer, the columns it is sent in, and how many
    of its rows were fetched."""

    answer: Answer
    fields: list[codec.Field]
    hold: bool
    depth: int  # savepoints open when it was declared: a rollback to one of them closes it
    fresh: bool = True  # declared in this transaction: its rollback closes it, held or not
    position: int = 0  # 0: before the first row, len(rows) + 1: after the last
    scroll: bool = True  # not NO SCROLL: it may go backward


@dataclass
class Result:
    """A statement's outcome: its rows as DataRow messages, or (catalog statements)
    still to be read from the shadow, whose tag is known once they are."""

    tag: str
    fields: list[codec.Field] | None = None
    rows: list[bytes] = field(default_factory=list)
    notice: str | None = None
    changed: dict[str, str] = field(default_factory=dict)
    stream: Iterator[list[bytes | None]] | None = None
    line: Callable[[list[bytes | None]], bytes] = codec.data_row  # how a row travels


class Connection:
    def __init__(self, server: Host, reader: asyncio.StreamReader,
                 writer: asyncio.StreamWriter) -> None:
        self.server = server
        self.reader = reader
        self.writer = writer
        self.frames = codec.Reader(server.limits.max_message)
        self.pid = 0
        self.key = secrets.randbits(31)
        self.user = ""
        self.statements = _Statements()
        self.portals: dict[str, Portal] = {}
        self.cursors: dict[str, Cursor] = {}  # DECLAREd (proxy.wire.cursors)
        self._implicit = False  # a simple query of several statements outside BEGIN
        self.failed = False  # extended protocol: skip until Sync
        self.session = None
        self.shadow: ShadowSession | None = None
        self.local: LocalState | None = None
        self.database = ""
        self._queued: list[codec.FrontendMessage] = []
        self._violation: codec.ProtocolViolation | None = None  # after the queued
        self._out: list[bytes] = []  # replies not yet written (``_write_out``)
        self._out_bytes = 0  # their size
        self._worker: int | None = None  # the thread running this session's engine call
        self._worker_lock = threading.Lock()
        self._gone = False  # the client disconnected while its statement waited
        self._timed_out = False
        # when the check of the message whose first statement runs next began: that
        # statement's timeout counts its analysis too (as PostgreSQL counts parsing)
        self._checked_since: float | None = None
        self._in_message = False  # a message is being answered (a Query: all its statements)
        self._cancel_pending = False  # a cancel came while none of its engine work ran

    # I/O ---------------------------------------------------------------------------------

    async def _next(self) -> codec.FrontendMessage:
        while True:
            if self._violation is None:
                try:
                    for message in self.frames.messages():
                        self._queued.append(message)
                except codec.ProtocolViolation as exc:
                    # told after the messages before it are answered, as PostgreSQL
                    # reads one message at a time: a batch's Parse lost its reply
                    self._violation = exc
            if self._queued:
                return self._queued.pop(0)
            if self._violation is not None:
                raise self._violation
            self._write_out()
            self._waiting()
            try:
                data = await asyncio.wait_for(self.reader.read(65536),
                                              self.server.limits.idle_timeout)
            except TimeoutError:
                self._send(codec.error_response("57P05", "terminating connection due to "
                                                "idle timeout", "FATAL"))
                raise ConnectionClosed from None
            if not data:
                raise ConnectionClosed
            self.frames.feed(data)

    def _send(self, data: bytes) -> None:
        self._out.append(data)
        self._out_bytes += len(data)

    def _write_out(self) -> None:
        """What was sent, to the socket in one write: an answer's five to eight messages
        were as many system calls. Called before waiting for the client or the engine
        (and by ``_flush``), so a client gets every reply before the proxy waits."""
        if self._out:
            self.writer.write(b"".join(self._out))
            self._out.clear()
            self._out_bytes = 0

    async def _flush(self) -> None:
        self._write_out()
        await self.writer.drain()

    async def _flush_when_full(self) -> None:
        """The replies written and waited for once they pass ``_OUT_BYTES``, though more
        of the client's messages wait: a client that pipelines without reading (100,000
        Describes of a wide statement, 900 KB) made the server hold every reply to the
        messages of each read, 4 GB, where now it waits for the client to read them."""
        if self._out_bytes > _OUT_BYTES:
            await self._flush()

    # Lifecycle ---------------------------------------------------------------------------

    async def run(self) -> None:
        try:
            if await self._logged_in():
                await self._serve()
        except codec.ProtocolViolation as exc:
            self._send(codec.error_response("08P01", f"protocol violation: {exc}", "FATAL"))
            await self._drained()
        except (ConnectionClosed, ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            await self._close()

    async def _logged_in(self) -> bool:
        """Startup and authentication, within ``authentication_timeout`` (as PostgreSQL's
        ``authentication_timeout``: a client that never finishes holds no slot)."""
        try:
            limit = self.server.limits.authentication_timeout
            return await asyncio.wait_for(self._startup(), limit)
        except TimeoutError:
            log.warning("closed a connection that did not log in within %d s", limit)
            self._send(codec.error_response("57014", "canceling authentication due to "
                                            "timeout", "FATAL"))
            return False
        finally:
            self.server.started(self)

    async def _drained(self) -> None:
        """The error sent, then what the client is still sending read and dropped (at
        most ``_DRAIN_BYTES``, for ``_DRAIN_SECONDS``) before the connection closes:
        closed with unread data (the rest of a message beyond ``max_message``), the
        socket is reset, and the client may never read the error (the review of
        2026-11-29: a 1.2 MB Bind of a list parameter)."""
        try:
            await self._flush()
            if self.writer.can_write_eof():
                self.writer.write_eof()
            loop = asyncio.get_running_loop()
            deadline, dropped = loop.time() + _DRAIN_SECONDS, 0
            while dropped < _DRAIN_BYTES and loop.time() < deadline:
                data = await asyncio.wait_for(self.reader.read(65536),
                                              max(0.0, deadline - loop.time()))
                if not data:
                    return
                dropped += len(data)
        except (ConnectionError, asyncio.TimeoutError, OSError):
            return

    async def _close(self) -> None:
        self.server.forget(self)
        try:
            await self._flush()
        except ConnectionError:
            pass
        self.writer.close()
        if self.shadow is not None:
            await asyncio.to_thread(self.shadow.close)

    async def _startup(self) -> bool:
        while True:
            message = await self._next()
            if isinstance(message, codec.SSLRequest):
                if self.server.tls is None or self._queued:
                    self._send(b"N")
                    continue
                self._send(b"S")
                await self._flush()
                await self.writer.start_tls(self.server.tls)
                continue
            if isinstance(message, codec.GSSENCRequest):
                self._send(b"N")
                continue
            if isinstance(message, codec.CancelRequest):
                await self.server.run_cancel(self.server.cancel, message.pid, message.key)
                return False
            if isinstance(message, codec.Startup):
                break
            raise codec.ProtocolViolation("expected a startup message")
        startup = message.params
        self.user = startup.get("user", "")
        self.database = startup.get("database") or self.user
        if not self.user:
            self._send(codec.error_response("28000", "no user name given in the startup "
                                            "message", "FATAL"))
            return False
        if not await self._authenticate():
            return False
        refusal = await self.server.admit(self)
        if refusal is not None:
            self._send(codec.error_response("53300", refusal, "FATAL"))
            return False
        try:
            self.session = await asyncio.to_thread(Session.open, self.server.engine, self.user)
            self.local = LocalState(self.server.shadow.version, self.user)
            for name, value in [*startup.items(), *_options(startup.get("options", ""))]:
                if name.lower() in ("user", "database", "options", "replication"):
                    continue
                self.local.set(name, value)
            self._follow_zone()
        except UnknownAnalyst as exc:  # under trust; its text names the rules' file
            self._login_failed(exc.message)
            return False
        except ProxyError as exc:
            self._send(codec.error_response(exc.sqlstate, exc.message, "FATAL"))
            return False
        self._send(codec.authentication(0))
        for name in REPORTED:
            self._send(codec.parameter_status(name, self.local.settings[name]))
        self._send(codec.backend_key_data(self.pid, self.key))
        self._send(codec.ready_for_query("I"))
        await self._flush()
        return True

    async def _authenticate(self) -> bool:
        if self.server.trusts(self.writer.get_extra_info("peername")):
            return True
        secret = await asyncio.to_thread(self.server.users.secret, self.user)
        exchange = Exchange(secret, self.user)
        self._send(codec.authentication(10, codec.cstring(MECHANISM) + b"\0"))
        await self._flush()
        try:
            first = await self._next()
            if not isinstance(first, codec.Password):
                raise AuthFailed("expected a SASL initial response")
            mechanism, _, rest = first.data.partition(b"\0")
            (length,) = struct.unpack("!i", rest[:4]) if len(rest) >= 4 else (-2,)
            if length != len(rest) - 4:
                raise AuthFailed("malformed SASL initial response")
            server_first = exchange.start(mechanism.decode("ascii", "replace"), rest[4:])
            self._send(codec.authentication(11, server_first))
            await self._flush()
            final = await self._next()
            if not isinstance(final, codec.Password):
                raise AuthFailed("expected a SASL response")
            self._send(codec.authentication(12, exchange.finish(final.data)))
        except AuthFailed as exc:
            self._login_failed(str(exc))
            return False
        return True

    def _login_failed(self, reason: str) -> None:
        """PostgreSQL's one message for an unknown name, a wrong password or a disabled
        login: which it was (and the rules' analysts) is for the server log only."""
        log.warning('password authentication failed for user "%s": %s', self.user, reason)
        self._send(codec.error_response(
            "28P01", f'password authentication failed for user "{self.user}"', "FATAL"))

    # Main loop ---------------------------------------------------------------------------

    async def _serve(self) -> None:
        while True:
            message = await self._next()
            if isinstance(message, codec.Terminate):
                return
            if isinstance(message, codec.Invalid):
                raise codec.ProtocolViolation(
                    f"invalid frontend message type {ord(message.type)}")
            if isinstance(message, codec.Unsupported) and message.type != "F":
                continue  # COPY data outside a COPY: PostgreSQL ignores it
            if isinstance(message, codec.Sync):
                self.failed = False
                if self.local.status == "I":  # its transaction ended: its portals with it
                    self.portals.clear()
                self._send(codec.ready_for_query(self.local.status))
            elif self.failed:  # as PostgreSQL: after an error, everything up to Sync
                continue
            elif isinstance(message, codec.Undecodable):
                self._error(ProxyError(message.reason, "22021"))
                if message.type == "Q":
                    self._send(codec.ready_for_query(self.local.status))
                else:
                    self.failed = True
            elif isinstance(message, codec.Query):
                self._answering()
                await self._simple(message.sql)
            elif isinstance(message, codec.Unsupported):  # a function call: its own cycle
                self._error(ProxyError("function calls (the FunctionCall message) are not "
                                       "supported; call the function in a query", "0A000"))
                self._send(codec.ready_for_query(self.local.status))
            elif isinstance(message, codec.Flush):
                pass
            else:
                try:
                    self._answering()
                    await self._extended(message)
                except (codec.ProtocolViolation, ConnectionClosed):
                    raise
                except Exception as exc:  # noqa: BLE001 -- any failure is one error reply
                    self._error(exc)
                    self.failed = True
            if not self._queued:  # the client's next messages are answered in this write
                await self._flush()
            else:
                await self._flush_when_full()

    def _answering(self) -> None:
        """A message is answered from here until the server next waits for the client:
        a cancel that comes meanwhile — between two engine calls of a message, or between
        two messages of a batch the client sent at once (Parse answered, Bind not yet
        read) — stops the next engine call, as PostgreSQL's pending cancel stops the next
        message it reads from its buffer."""
        with self._worker_lock:
            self._in_message = True

    def _waiting(self) -> None:
        """The server waits for the client: a cancel now stops nothing, as PostgreSQL
        ignores one that comes while it waits for a command."""
        with self._worker_lock:
            self._in_message = self._cancel_pending = False

    def _error(self, exc: BaseException) -> None:
        """One ErrorResponse. A refusal says what it is; anything else is a bug, which
        must cost one statement, not the session, and must not show its text (it may
        quote data, or come after the debit): its traceback goes to the log only. SQL
        nested deeper than Python's stack is refused as PostgreSQL refuses it (54001),
        in one log line."""
        if isinstance(exc, RecursionError):
            log.warning("refused a statement nested too deeply to read (54001)")
            exc = TooComplex()
        elif not isinstance(exc, ProxyError):
            log.error("internal error", exc_info=exc)
            exc = ProxyError(INTERNAL_ERROR, "XX000")
        if self.local.status == "T":
            self.local.status = "E"
        self._send(codec.error_response(exc.sqlstate, exc.message,
                                        position=getattr(exc, "position", None)))

    # Simple query ------------------------------------------------------------------------

    async def _simple(self, sql: str) -> None:
        try:
            began = time.monotonic()
            statements = self._known_message(sql) or await self._engine_work(
                lambda: self._read_and_check(sql))
            self._checked_since = began
        except ConnectionClosed:
            raise
        except Exception as exc:  # noqa: BLE001 -- any failure is one error reply
            self._error(exc)
            self._send(codec.ready_for_query(self.local.status))
            return
        if statements == [] or (len(statements) == 1 and not statements[0][0].word):
            self._send(codec.EMPTY_QUERY)
        # several statements outside BEGIN: PostgreSQL's implicit transaction block, where
        # DECLARE may stand; its cursors end with the message
        self._implicit = len(statements) > 1 and self.local.status == "I"
        failed = False
        for statement, step in statements:
            if not statement.word:
                continue
            prepared = None
            if len(statements) > 1 and self.local.status == "I":
                # its settings too: SET LOCAL lasts to its end, an error undoes its SETs;
                # after a COMMIT or ROLLBACK among them, the next statements' block
                self._scope(ScopeEvent(BEGIN))
            try:
                self._check_transaction(statement)
                # Only the catalog must be asked for the columns first; the engine's and
                # the connection's answers say their own columns and types.
                prepared = (await self._prepare(statement, ()) if statement.route is
                            Route.SHADOW else Prepared(statement, (), None))
                portal = Portal(prepared, (), (), (), step=step)
                if statement.copy is not None:
                    await self._copy_out(portal, statement.copy)
                    continue
                result = await self._execute(prepared, portal, ())
                if result.fields is not None:
                    self._send(codec.row_description(result.fields, [0] * len(result.fields)))
                await self._emit(result)
            except (codec.ProtocolViolation, ConnectionClosed):
                raise
            except Exception as exc:  # noqa: BLE001 -- any failure is one error reply
                self._error(exc)
                failed = True
                break
            finally:
                if prepared is not None and prepared.shadow_name is not None:
                    await asyncio.to_thread(self.shadow.release, prepared.shadow_name)
            await self._flush_when_full()  # a message of many statements: their replies
        self._checked_since = None  # no engine statement ran (a catalog one, an error)
        if self._implicit and self.local.status == "I":
            self._transaction_ended(rolled_back=failed)
        if len(statements) > 1 and self.local.status == "I":
            self._scope(ScopeEvent(ROLLBACK if failed else COMMIT))
        self._implicit = False
        if self.local.status == "I":  # a COMMIT or ROLLBACK among them: the portals end
            self.portals.clear()
        self._send(codec.ready_for_query(self.local.status))

    async def _copy_out(self, portal: Portal, options: CopyOptions) -> None:
        """COPY (query) TO STDOUT: the query's answer, each row one CopyData message."""
        def line(values: list[bytes | None]) -> bytes:
            return codec.copy_data(options.line(values))

        result = await self._execute(portal.prepared, portal, (), line)
        fields = result.fields or []
        self._send(codec.copy_out_response(len(fields)))
        if options.header:
            self._send(codec.copy_data(options.header_line([f.name for f in fields])))
        await self._emit(result, copy=True)

    def _known_message(self, sql: str) -> list[tuple[Statement, Any]] | None:
        """A message of one private query read and checked before, as this session
        checked it under its current settings (``Session.known``): on the event loop,
        no worker thread nor tokenising; None: ``_read_and_check`` it."""
        statement = _ROUTED.get((sql,))
        step = None if statement is None else self.session.known(statement.text)
        return None if step is None else [(statement, step)]

    def _read_and_check(self, sql: str) -> list[tuple[Statement, Any]]:
        """In a worker thread: the message's statements, routed, each with the engine's
        work for it (None for the others). The engine refuses any of them before
        anything runs, and runs the work checked here: each statement is read and
        parsed once (proxy.session.Session.check_statements)."""
        statements = read_message(sql, self.server.rules, self.server.engine.shapes.knows)
        engine = [s for s in statements if s.route is Route.ENGINE]
        checked = self.session.check_statements([(s.text, s.tokens, s.tree) for s in engine],
                                                self._zones(statements)) if engine else []
        if len(statements) == 1 and engine:
            self.session.know(engine[0].text, checked)
            _ROUTED.put((sql,), engine[0])
        steps = iter(checked)
        return [(s, next(steps) if s.route is Route.ENGINE else None) for s in statements]

    def _zones(self, statements: list[Statement]) -> list[str] | None:
        """The TimeZone each engine statement of a message is read in, where the message
        sets it before them (``SET TIME ZONE 'Europe/Berlin'; SELECT …``): the message's
        own statements played on a copy of the connection's settings (one that fails
        stops the message there when it runs). None: the message sets nothing locally,
        so each statement is read in the session's zone."""
        if all(s.route is not Route.LOCAL for s in statements):
            return None
        scratch, zones = self.local.scratch(), []
        for statement in statements:
            if len(statements) > 1 and scratch.status == "I":  # as _simple plays them
                scratch.scoped(ScopeEvent(BEGIN))
            if statement.route is Route.ENGINE:
                zones.append(scratch.settings["TimeZone"])
            elif statement.route is Route.LOCAL:
                try:
                    scratch.execute(statement)
                except ProxyError:
                    pass
        return zones

    def _check_transaction(self, statement: Statement) -> None:
        if self.local.status == "E" and statement.word not in ("ROLLBACK", "ABORT", "COMMIT",
                                                                "END"):
            raise ProxyError("current transaction is aborted, commands ignored until end "
                             "of transaction block", "25P02")

    async def _emit(self, result: Result, rows: list[bytes] | None = None,
                    copy: bool = False) -> None:
        """ParameterStatus, the rows and CommandComplete (after CopyDone, ``copy``). A
        catalog result is read, encoded and written a batch at a time, each write
        waiting for the client to take the last: its memory stays bounded and a slow
        reader slows only itself."""
        for name, value in result.changed.items():
            self._send(codec.parameter_status(name, value))
        for row in result.rows if rows is None else rows:
            self._send(row)
        if result.stream is not None:
            try:
                while batch := await asyncio.to_thread(_encoded_batch, result.stream,
                                                       result.line):
                    self._send(batch)
                    await self._flush()
            finally:  # a client gone mid-way: stop the catalog statement (no-op at the end)
                await asyncio.to_thread(_close_quietly, result.stream)
            result.tag = self.shadow.tag
        if copy:
            self._send(codec.COPY_DONE)
            result.tag = "COPY " + result.tag.split()[-1]
        if result.notice:
            self._send(codec.notice_response(result.notice))
        self._send(codec.command_complete(result.tag) if result.tag else codec.EMPTY_QUERY)

    # Extended query ----------------------------------------------------------------------

    async def _extended(self, message: codec.FrontendMessage) -> None:
        if isinstance(message, codec.Parse):
            statements = await self._engine_work(lambda: read_message(
                message.sql, self.server.rules, self.server.engine.shapes.knows))
            if len(statements) > 1:
                raise ProxyError("cannot insert multiple commands into a prepared statement",
                                 "42601")
            statement = statements[0]
            if statement.copy is not None:
                raise ProxyError("COPY (query) TO STDOUT is answered in the simple query "
                                 "protocol (as psql's \\copy sends it); prepare the query "
                                 "itself instead", "0A000")
            self._check_transaction(statement)
            self._room_for(message.name, statement.text)
            prepared = await self._prepare(statement, message.param_types)
            await self._drop_statement(message.name)
            if statement.route is not Route.LOCAL:
                # its tokens and tree are read again from its text when it runs: kept,
                # they took 10 MB a statement of 9,000 values (5 GB for 500 of them)
                prepared = replace(prepared, statement=replace(statement, tokens=(),
                                                               tree=None))
            self.statements[message.name] = prepared
            self._send(codec.PARSE_COMPLETE)
        elif isinstance(message, codec.Bind):
            prepared = self.statements.get(message.statement)
            if prepared is None:
                raise ProxyError(f'prepared statement "{message.statement}" does not exist',
                                 "26000")
            if len(message.params) != len(prepared.param_types):
                raise ProxyError(f"bind message supplies {len(message.params)} parameters, "
                                 f"but the statement requires {len(prepared.param_types)}",
                                 "08P01")
            for code in (*message.param_formats, *message.result_formats):
                if code not in (0, 1):  # as PostgreSQL, whatever the route
                    raise ProxyError(f"unsupported format code: {code}", "22023")
            size = sum(len(value) for value in message.params if value is not None)
            if size and size + sum(p.held for key, p in self.portals.items()
                                   if key != message.portal) > _HELD_BYTES:
                raise _too_much_held()  # portals of a block, each of 1 MB of values
            portal = Portal(prepared, message.params, message.param_formats,
                            message.result_formats, held=size)
            if prepared.statement.route is Route.ENGINE and prepared.param_types:
                key = (prepared.statement.text, prepared.param_types, tuple(message.params),
                       tuple(_formats(message.param_formats, len(message.params))))
                portal.sql = _BOUND.get(key)
                if portal.sql is None:  # else bound before: no thread, no parse
                    values = self._values(prepared, message)
                    # spliced at once where its Parse found the places, else in a thread
                    portal.sql = params.bound_at_once(prepared.statement.text,
                                                       prepared.param_types, values) \
                        or await self._engine_work(lambda: params.bind(
                            prepared.statement.text, prepared.param_types, values))
                    _BOUND.put(key, portal.sql)
                if prepared.refusal is not None:  # its columns, now that its values came
                    fields = await self._engine_work(lambda: self._described(portal.sql))
                    portal.prepared = replace(  # a DECLARE returns none (as at Parse)
                        prepared, fields=None if prepared.statement.cursor else fields,
                        refusal=None, intervals=self.session.settings.intervals)
            self.portals[message.portal] = portal
            self._send(codec.BIND_COMPLETE)
        elif isinstance(message, codec.Describe):
            if message.kind == "S":
                prepared = self._statement(message.name)
                if prepared.refusal is not None:  # its columns depend on its values
                    raise prepared.refusal
                self._send(codec.parameter_description(list(prepared.param_types)))
                self._describe(prepared.fields, ())
            elif message.name not in self.portals and message.name in self.cursors:
                self._describe(self.cursors[message.name].fields, ())  # psycopg's, declared
            else:
                portal = self._portal(message.name)
                self._describe(portal.prepared.fields, portal.result_formats)
        elif isinstance(message, codec.Execute):
            await self._execute_portal(self._portal(message.portal), message.max_rows)
        elif isinstance(message, codec.Close):
            if message.kind == "S":
                await self._drop_statement(message.name)
            else:
                self.portals.pop(message.name, None)
            self._send(codec.CLOSE_COMPLETE)
        elif isinstance(message, codec.Password):
            raise codec.ProtocolViolation("unexpected password message")
        else:
            raise ProxyError(f"message type {message!r} is not served here", "XX000")

    def _room_for(self, name: str, text: str) -> None:
        """A session holds at most ``_MAX_PREPARED`` named statements of at most
        ``_PREPARED_TEXT`` characters together (54000, before anything is prepared):
        PostgreSQL has no such limit, but each costs the proxy's memory, not the
        backend's, shared by every session."""
        old = self.statements.get(name)
        count = len(self.statements) - (old is not None)
        held = self.statements.text - (len(old.statement.text) if old else 0)
        if count >= _MAX_PREPARED or held + len(text) > _PREPARED_TEXT:
            raise ProxyError(f"a session holds at most {_MAX_PREPARED:,} prepared "
                             f"statements of {_PREPARED_TEXT >> 20} MB of text together; "
                             "close (DEALLOCATE) some first", "54000")

    def _statement(self, name: str) -> Prepared:
        if name not in self.statements:
            raise ProxyError(f'prepared statement "{name}" does not exist', "26000")
        return self.statements[name]

    def _portal(self, name: str) -> Portal:
        if name not in self.portals:
            raise ProxyError(f'portal "{name}" does not exist', "34000")
        return self.portals[name]

    async def _drop_statement(self, name: str) -> None:
        old = self.statements.pop(name, None)
        if old is not None and old.shadow_name is not None:
            await asyncio.to_thread(self.shadow.release, old.shadow_name)

    def _describe(self, fields: list[codec.Field] | None, formats: tuple[int, ...]) -> None:
        if fields is None:
            self._send(codec.NO_DATA)
        else:
            self._send(codec.row_description(fields, _formats(formats, len(fields))))

    @staticmethod
    def _values(prepared: Prepared, bind: codec.Bind) -> tuple[object, ...]:
        """The bound values, decoded by their types."""
        values = []
        for index, (raw, oid) in enumerate(zip(bind.params, prepared.param_types)):
            if raw is None:
                values.append(None)
                continue
            binary = _formats(bind.param_formats, len(bind.params))[index] == 1
            try:
                values.append(types.decode(raw, oid, binary))
            except types.BadValue as exc:
                raise ProxyError(f"parameter ${index + 1}: {exc}", exc.sqlstate) from None
        return tuple(values)

    async def _execute_portal(self, portal: Portal, max_rows: int) -> None:
        # checked at Execute too, as PostgreSQL does: a statement parsed before the
        # transaction failed is refused after it
        self._check_transaction(portal.prepared.statement)
        if portal.pending is None:
            held = sum(p.held for p in self.portals.values())
            if max_rows > 0 and held >= _HELD_BYTES:  # before any charge
                raise _too_much_held()
            result = await self._execute(portal.prepared, portal, portal.result_formats)
            if max_rows <= 0:  # all at once: a catalog result streams
                portal.pending = []
                await self._emit(result)
                portal.tag = result.tag
                return
            if result.stream is not None:  # held for later Executes (within the row limit)
                try:
                    result.rows = await asyncio.to_thread(_encoded_rows, result.stream,
                                                          _HELD_BYTES - held)
                finally:  # refused or gone mid-way: the catalog statement stopped
                    await asyncio.to_thread(_close_quietly, result.stream)
                result.tag = self.shadow.tag
            portal.pending, portal.tag, portal.notice = result.rows, result.tag, result.notice
            portal.held += sum(map(len, result.rows))  # an engine answer: held whole
            for name, value in result.changed.items():
                self._send(codec.parameter_status(name, value))
        rows = portal.pending if max_rows <= 0 else portal.pending[:max_rows]
        portal.pending = portal.pending[len(rows):]
        if max_rows > 0 and portal.pending:
            for row in rows:
                self._send(row)
            self._send(codec.PORTAL_SUSPENDED)
            return
        await self._emit(Result(portal.tag, notice=portal.notice), rows)

    # Preparing and running, by route ------------------------------------------------------

    def _follow_zone(self) -> None:
        """The session reads its statements' times in the TimeZone the client set."""
        zone = self.local.settings["TimeZone"]
        if self.session.settings.time_zone != zone:
            self.session.settings = replace(self.session.settings, time_zone=zone)

    async def _prepare(self, statement: Statement, declared: tuple[int, ...]) -> Prepared:
        if statement.route is Route.SHADOW:
            shadow = await self._shadow()
            text = (with_backend_pid(statement.text, self.pid) if statement.backend_pid
                    else statement.text)
            name, described = await asyncio.to_thread(shadow.prepare, text, declared)
            # libpq describes NoData (a command) and a RowDescription of no field (a
            # query of no column: ``SELECT``, ``SELECT FROM t``) alike: a query's rows
            # are described even then, as PostgreSQL does (else psycopg reads a DataRow
            # without a RowDescription and the session is lost)
            fields = [_shadow_field(c) for c in described.columns]
            return Prepared(statement, described.params,
                            fields if fields or statement.word in _QUERIES else None, name)
        if statement.route is Route.LOCAL:
            shows = statement.word == "SHOW"
            fields = None
            if shows:
                outcome = self.local.execute(statement)  # SHOW changes nothing
                fields = [codec.Field(name, TEXT) for name in outcome.columns]
            elif statement.word == "FETCH":
                fields = self._cursor(read_fetch(statement.text).name).fields
            return Prepared(statement, declared, fields)
        prepared = await self._engine_work(lambda: self._prepare_engine(statement, declared))
        return replace(prepared, fields=None) if statement.cursor else prepared

    def _prepare_engine(self, statement: Statement, declared: tuple[int, ...]) -> Prepared:
        """In a worker thread: the parameters' types and the result's columns, read with
        stand-ins for the parameters (``params.dummy_values``); where those are refused,
        from each Bind's values (``Prepared.refusal``)."""
        param_types = params.infer(statement.text, declared, self.server.rules)
        if not param_types:
            return Prepared(statement, param_types, self._described(statement.text),
                            intervals=self.session.settings.intervals)
        text = params.bind(statement.text, param_types, params.dummy_values(param_types))
        try:
            fields = self._described(text)
        except Refused as exc:
            return Prepared(statement, param_types, None, refusal=exc,
                            intervals=self.session.settings.intervals)
        return Prepared(statement, param_types, fields, intervals=self.session.settings.intervals)

    def _described(self, text: str) -> list[codec.Field] | None:
        """The columns of the answer ``text`` would give (None: no rows)."""
        described = self.session.describe(text)
        return None if described is None else [
            codec.Field(name, oid_of(kind)) for name, kind in described]

    async def _execute(self, prepared: Prepared, portal: Portal, formats: tuple[int, ...],
                       line: Callable[[list[bytes | None]], bytes] = codec.data_row) -> Result:
        statement = prepared.statement
        if statement.cursor is not None:
            return await self._declare(portal)
        if statement.word in ("FETCH", "MOVE"):
            return self._fetch(statement, formats)
        if statement.route is Route.LOCAL:
            if statement.word == "CLOSE":
                self._close_cursor(statement)
            outcome = self.local.execute(statement)
            self._cursors_after(statement.word, outcome)
            if outcome.scope is not None:
                self.session.scoped(outcome.scope)
            if outcome.everything:
                self.session.reset_all()
            self._follow_zone()
            if statement.word == "SHOW" and outcome.columns == ["name", "setting",
                                                                "description"]:
                # SHOW ALL: the idp.* settings too (idp.budget reads the ledger)
                outcome.rows = sorted([*outcome.rows, *await asyncio.to_thread(
                    self.session.show_all)])
            if statement.word in ("DEALLOCATE", "DISCARD"):
                self._housekeeping(statement)
            return _local_result(outcome, prepared.fields, formats)
        if statement.route is Route.SHADOW:
            session = self._session_timeout_ms()  # where shorter than the catalog's own
            catalog = self.server.limits.catalog_timeout * 1000
            rows = self.shadow.execute(
                prepared.shadow_name, portal.values,
                tuple(_formats(portal.param_formats, len(portal.values))),
                _formats(formats, len(prepared.fields or ())),
                self.server.limits.catalog_max_rows, self.server.limits.max_message,
                session if 0 < session < catalog else 0)
            return Result("", prepared.fields, stream=rows, line=line)
        if prepared.fields is not None and prepared.intervals is not None \
                and prepared.intervals != self.session.settings.intervals:
            # as PostgreSQL's, before anything is run or charged: the rows would not match
            # the columns described (one charge then an unreadable answer, before)
            raise NotSupported("cached plan must not change result type: idp.intervals "
                               "changed since the statement was prepared; prepare it again")
        replayed = self._replayed_now(portal, prepared.fields, formats, line)
        if replayed is not None:
            return replayed
        return await self._while_connected(asyncio.to_thread(
            self._answer, portal, prepared.fields, formats, line))

    def _replayed_now(self, portal: Portal, fields: list[codec.Field] | None,
                      formats: tuple[int, ...], line: Callable[[list[bytes | None]], bytes]
                      ) -> Result | None:
        """On the event loop, with no worker thread: a repeat that memory alone answers
        (``Session.replay_now``: the step known for this text, its answer and what the
        analyst has left kept under a data version still current), in microseconds with
        no statement, so no cancel or timeout can come during it; one that comes before
        it is honoured by the worker path. None: that path runs it."""
        with self._worker_lock:
            if self._gone or self._cancel_pending:
                return None
        step = portal.step or self.session.known(portal.sql or portal.prepared.statement.text)
        answer = None if step is None else self.session.replay_now(step)
        if answer is None:
            return None
        self._checked_since = None
        return self._result(answer, fields, formats, line)

    def _answer(self, portal: Portal, fields: list[codec.Field] | None,
                formats: tuple[int, ...], line: Callable[[list[bytes | None]], bytes]
                ) -> Result:
        """In a worker thread: run the engine and encode its answer's rows."""
        return self._result(self._engine_answer(portal), fields, formats, line)

    def _engine_answer(self, portal: Portal) -> Answer:
        """In a worker thread: the engine's answer (to the work checked with the message,
        else to the statement's text)."""
        if portal.step is not None:
            return self._run_engine(lambda: self.session.run(portal.step))
        sql = portal.sql or portal.prepared.statement.text
        return self._run_engine(lambda: list(self.session.execute(sql))[-1])

    # Cursors (proxy.wire.cursors) ----------------------------------------------------------

    async def _declare(self, portal: Portal) -> Result:
        """DECLARE: the query answered now, its answer held for FETCH."""
        declared = portal.prepared.statement.cursor
        if not declared.hold and self.local.status != "T" and not self._implicit:
            raise ProxyError("DECLARE CURSOR can only be used in transaction blocks (or "
                             "declare it WITH HOLD)", "25P01")
        if declared.name in self.cursors:
            raise ProxyError(f'cursor "{declared.name}" already exists', "42P03")
        held = sum(len(c.answer.rows) for c in self.cursors.values())
        if len(self.cursors) >= MAX_CURSORS or held >= MAX_HELD_ROWS:  # before any charge
            raise ProxyError(f"the cursors of one session hold at most {MAX_CURSORS} "
                             f"answers and {MAX_HELD_ROWS:,} rows; CLOSE some first", "54000")
        answer = await self._while_connected(asyncio.to_thread(self._engine_answer, portal))
        if answer.privacy is None and held + len(answer.rows) > MAX_HELD_ROWS:
            # rows of public tables only, which cost nothing: refused after all (a paid
            # answer is held whole, so the rows held pass the cap by one answer at most)
            raise ProxyError(f"the cursors of one session hold at most {MAX_HELD_ROWS:,} "
                             "rows; read this query over public tables without a cursor, "
                             "or CLOSE others first", "54000")
        # outside a block (WITH HOLD) its own transaction has ended: no later rollback
        # closes it
        fresh = self.local.status == "T" or self._implicit
        self.cursors[declared.name] = Cursor(answer, _fields(answer, None), declared.hold,
                                             len(self.local.savepoints), fresh,
                                             scroll=declared.scroll)
        return Result("DECLARE CURSOR", notice=answer.notice)

    def _fetch(self, statement: Statement, formats: tuple[int, ...]) -> Result:
        """FETCH: the rows the direction reaches, encoded as the Bind asked (text in a
        simple query); MOVE: skipped."""
        fetch = read_fetch(statement.text)
        cursor = self._cursor(fetch.name)
        total = len(cursor.answer.rows)
        if not cursor.scroll and fetch.goes_back(cursor.position, total):
            raise ProxyError("cursor can only scan forward (declared NO SCROLL); declare it "
                             "without NO SCROLL to go backward", "55000")
        indexes, position = fetch.rows(cursor.position, total)
        if fetch.move:
            cursor.position = position
            return Result(f"MOVE {len(indexes)}")
        taken = replace(cursor.answer, rows=[cursor.answer.rows[i] for i in indexes])
        result = self._result(taken, cursor.fields, formats, codec.data_row)
        cursor.position = position  # once encoded: a FETCH that fails moves nothing
        return replace(result, tag=f"FETCH {len(indexes)}", notice=None)

    def _scope(self, event: ScopeEvent) -> None:
        """A message's implicit transaction block begun or ended, for the settings of the
        connection and the session; the client told of reported ones that came back."""
        self.session.scoped(event)
        for name, value in self.local.scoped(event).changed.items():
            self._send(codec.parameter_status(name, value))
        self._follow_zone()

    def _transaction_ended(self, rolled_back: bool = False) -> None:
        """A transaction ended (or a message's implicit one): its cursors with it, those
        declared WITH HOLD kept, unless it rolled back (PostgreSQL drops a held cursor
        whose transaction aborts)."""
        self.cursors = {name: replace(c, fresh=False, depth=0)
                        for name, c in self.cursors.items()
                        if c.hold and not (rolled_back and c.fresh)}

    def _cursors_after(self, word: str, outcome: Outcome) -> None:
        """The cursors a transaction statement ends: all of the transaction's at its end
        (``_transaction_ended``), those declared after the savepoint at ROLLBACK TO it;
        RELEASE moves the later ones into the enclosing savepoint's part."""
        depth = len(self.local.savepoints)
        if outcome.ended:
            self._transaction_ended(rolled_back=outcome.ended == "ROLLBACK")
        elif word in ("ROLLBACK", "ABORT") and self.local.status == "T":
            self.cursors = {name: c for name, c in self.cursors.items()
                            if not (c.fresh and c.depth >= depth)}
        elif word == "RELEASE":
            self.cursors = {name: replace(c, depth=min(c.depth, depth))
                            for name, c in self.cursors.items()}

    def _cursor(self, name: str) -> Cursor:
        if name not in self.cursors:
            raise missing(name)
        return self.cursors[name]

    def _close_cursor(self, statement: Statement) -> None:
        name = read_close(statement.text)
        if name is None:
            self.cursors = {}
        elif self.cursors.pop(name, None) is None:
            raise missing(name)

    def _result(self, answer: Answer, fields: list[codec.Field] | None,
                formats: tuple[int, ...], line: Callable[[list[bytes | None]], bytes]
                ) -> Result:
        """An answer's rows encoded for the client."""
        fields = _fields(answer, fields)
        rows = [line(cells) for cells in
                _encode_rows(answer, fields, formats, self._float_digits(),
                             zone_named(self.local.settings["TimeZone"]))]
        return Result(answer.command, fields if answer.columns else None, rows, answer.notice)

    async def _engine_work(self, work: Callable[[], T]) -> T:
        """``work`` (reading, checking or describing a statement: analysis, seconds
        for the largest) in a worker thread that a cancel, the statement timeout and
        the client's disconnect interrupt, as they interrupt running it
        (``_run_engine``)."""
        return await self._while_connected(asyncio.to_thread(self._run_engine, work))

    async def _while_connected(self, work):
        """Await the engine while reading ahead what the client sends (kept for later,
        up to a bound); if the client goes away meanwhile, cancel its statement so that
        it does not hold the backend for nobody."""
        self._write_out()
        task = asyncio.ensure_future(work)
        while True:
            if self.frames.buffered() > 4 * self.server.limits.max_message:
                await asyncio.wait({task})
                return task.result()
            reading = asyncio.ensure_future(self.reader.read(65536))
            done, _ = await asyncio.wait({task, reading}, return_when=asyncio.FIRST_COMPLETED)
            if reading in done:
                data = reading.result() if not reading.exception() else b""
                if not data:
                    with self._worker_lock:
                        self._gone = True
                    await self.server.run_cancel(self.cancel_running)
                    await asyncio.wait({task})
                    task.exception()  # cancelled as asked; nobody is left to tell
                    raise ConnectionClosed
                self.frames.feed(data)
                continue
            reading.cancel()
            return task.result()

    def _statement_timeout(self) -> float:
        """Seconds a statement may take: the server's ``statement_timeout``, or the
        session's (``SET statement_timeout``, as PostgreSQL reads it) where shorter. The
        session's was shown and ignored until 2026-11-29: a statement that a client
        meant to stop at 300 ms was answered, and charged, after 5 s."""
        session = self._session_timeout_ms() / 1000
        server = self.server.limits.statement_timeout
        return min(server, session) if session > 0 else server

    def _session_timeout_ms(self) -> int:
        """The session's ``SET statement_timeout`` (PostgreSQL's units), 0 if none."""
        return timeout_ms(self.local.settings.get("statement_timeout", "0"))

    def _run_engine(self, work: Callable[[], T]) -> T:
        """In a worker thread; a cancel or the statement timeout interrupts the backend
        statement this thread runs and every stage above it (QueryCanceled, SQLSTATE
        57014; still charged after the debit)."""
        with self._worker_lock:
            if self._gone:  # the client left before this thread began
                raise QueryCanceled("canceling statement: the client disconnected")
            if self._cancel_pending:
                self._cancel_pending = False
                raise QueryCanceled("canceling statement due to user request")
            self._worker = threading.get_ident()
            began, self._checked_since = self._checked_since, None
        timeout = self._statement_timeout()
        if began is not None:  # the first statement of a checked message: from its check
            timeout = max(0.0, timeout - (time.monotonic() - began))
        deadline = DEADLINES.after(timeout, self._time_out)
        finished = False
        try:
            done = work()
            checkpoint()  # a cancel during work that looks no more (binding parameters)
            finished = True
            return done
        except QueryCanceled:
            if self._timed_out:
                raise QueryCanceled("canceling statement due to statement timeout") from None
            raise
        finally:
            DEADLINES.cancel(deadline)
            backend, owner = self.server.engine.backend, threading.get_ident()
            with self._worker_lock:
                self._worker = None
                if finished and backend.stopped(owner):
                    # the cancel came after the last checkpoint: it stops the next call
                    self._cancel_pending = self._in_message
                backend.forget_interrupt(owner)
            self._timed_out = False

    def _time_out(self) -> None:
        self._timed_out = True
        self.cancel_running()

    def cancel_running(self) -> None:
        """A CancelRequest with this connection's key (from any thread). The interrupt
        is made under the worker lock: made after the worker forgot its interrupts, it
        would doom that pool thread's next job, which may be another session's."""
        with self._worker_lock:
            if self._worker is not None:
                self.server.engine.backend.interrupt(self._worker)
            elif self._in_message:
                self._cancel_pending = True
        if self.shadow is not None:
            self.shadow.cancel()

    def _float_digits(self) -> int:
        try:
            return int(self.local.settings.get("extra_float_digits", "1"))
        except ValueError:
            return 1

    def _housekeeping(self, statement: Statement) -> None:
        """DEALLOCATE and DISCARD act on this connection's prepared statements."""
        words = [t.text for t in statement.tokens[1:] if t.text.upper() != "PREPARE"]
        if statement.word == "DISCARD" or (words and words[0].upper() == "ALL"):
            self.statements = _Statements()
            self.portals = {}
            if statement.word == "DISCARD" and words[:1] and words[0].upper() == "ALL":
                self.cursors = {}  # DISCARD PLANS or TEMP leave them
        elif words:
            self.statements.pop(words[0], None)

    async def _shadow(self) -> ShadowSession:
        if self.shadow is None:
            connection = await asyncio.to_thread(self.server.shadow.connect, self.user,
                                                 self.database)
            self.shadow = ShadowSession(connection)
        return self.shadow


def _fields(answer: Answer, fields: list[codec.Field] | None) -> list[codec.Field]:
    """The columns an answer is sent in: as described, else its own."""
    return fields or [codec.Field(column, oid_of(kind))
                      for column, kind in zip(answer.columns, answer.kinds)]


class _Statements(dict):
    """A session's prepared statements by name, with the length of their texts."""

    def __init__(self) -> None:
        super().__init__()
        self.text = 0

    def __setitem__(self, name: str, prepared: Prepared) -> None:
        self.pop(name, None)
        super().__setitem__(name, prepared)
        self.text += len(prepared.statement.text)

    def pop(self, name: str, default: Any = None) -> Any:
        prepared = super().pop(name, None)
        if prepared is None:
            return default
        self.text -= len(prepared.statement.text)
        return prepared


def _options(options: str) -> list[tuple[str, str]]:
    """The settings of the startup parameter ``options`` (libpq's ``options='-c
    statement_timeout=5s'``): ``-c name=value`` and ``--name=value``, separated by
    blanks, a blank within a value escaped by a backslash, as PostgreSQL reads them."""
    words = [w.replace("\\ ", " ") for w in re.split(r"(?<!\\)\s+", options.strip()) if w]
    settings, index = [], 0
    while index < len(words):
        word = words[index]
        if word == "-c" and index + 1 < len(words):
            index += 1
            word = "--" + words[index]
        elif word.startswith("-c"):
            word = "--" + word[2:]
        if not word.startswith("--") or "=" not in word:
            raise ProxyError(f'invalid command-line argument for server process: {word}',
                             "42601")
        name, _, value = word[2:].partition("=")
        settings.append((name.replace("-", "_"), value))
        index += 1
    return settings


def _formats(formats: tuple[int, ...], count: int) -> list[int]:
    if not formats:
        return [0] * count
    if len(formats) == 1:
        return [formats[0]] * count
    if len(formats) != count:
        raise ProxyError(f"{len(formats)} result formats for {count} columns", "08P01")
    return list(formats)


def _shadow_field(column: Column) -> codec.Field:
    return codec.Field(column.name, column.type_oid, column.type_size, column.type_modifier)


def _local_result(outcome: Outcome, fields, formats) -> Result:
    if not outcome.columns:
        return Result(outcome.tag, None, changed=outcome.changed, notice=outcome.notice)
    fields = fields or [codec.Field(name, TEXT) for name in outcome.columns]
    binary = _formats(formats, len(fields))
    rows = [codec.data_row([types.encode(v, TEXT, b == 1) for v, b in zip(row, binary)])
            for row in outcome.rows]
    return Result(outcome.tag, fields, rows, changed=outcome.changed)


def _encode_rows(answer: Answer, fields: list[codec.Field], formats: tuple[int, ...],
                 float_digits: int, zone: tzinfo) -> list[list[bytes | None]]:
    binary = _formats(formats, len(fields))
    return [[types.encode(value if field.type_oid != TEXT or value is None else str(value),
                          field.type_oid, fmt == 1, float_digits, zone)
             for value, field, fmt in zip(row, fields, binary)]
            for row in answer.rows]


def _encoded_batch(rows: Iterator[list[bytes | None]], line) -> bytes:
    """In a worker thread: the next few catalog rows as messages (b"" at the end)."""
    return b"".join(line(row) for row in itertools.islice(rows, _ROWS_PER_WRITE))


def _close_quietly(rows) -> None:
    try:
        rows.close()
    except ValueError:  # still being read by a worker of a task cancelled at shutdown
        pass


def _encoded_rows(rows: Iterator[list[bytes | None]], most: int) -> list[bytes]:
    """In a worker thread: all of a catalog result's rows, at most ``most`` bytes of
    them (else 54000): a portal read with a row limit holds them between Executes."""
    encoded, size = [], 0
    for row in rows:
        encoded.append(codec.data_row(row))
        size += len(encoded[-1])
        if size > most:
            raise _too_much_held()
    return encoded


def _too_much_held() -> ProxyError:
    return ProxyError(f"the portals of one session hold at most {_HELD_BYTES >> 20} MB of "
                      "parameters and rows for later Executes; read this one with no row "
                      "limit (Execute of 0 rows streams it), close the others, or end the "
                      "transaction", "54000")


def is_loopback(peer) -> bool:
    try:
        return ipaddress.ip_address(peer[0]).is_loopback
    except (TypeError, ValueError, IndexError):
        return False

