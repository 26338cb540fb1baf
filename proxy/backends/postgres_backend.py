"""PostgreSQL backend over psycopg 3; hosts the ledger in schema ``idp``."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, suppress
from typing import Any

import psycopg
from psycopg import pq
from sqlglot import exp

from proxy.backends.base import Backend, Capabilities, GroupedRanks, Transaction, log, one_line
from proxy.backends.pg_pool import ConnectionPool
from proxy.errors import (
    BackendFailed,
    BackendLost,
    BackendUnavailable,
    DiskFull,
    KeyTaken,
    PrivilegeMissing,
    ProxyError,
    QueryCanceled,
    RolledBack,
)
from proxy.pgtypes import NAMES, postgres_type

# Data versions: a statement-level trigger, always enabled (also under
# session_replication_role = replica), bumps a per-table counter in the writer's own
# transaction, so a snapshot that sees a write sees its bump. The version is trusted only
# while nothing can change the rows unseen: an ordinary table without inheritance
# children or row security, the trigger as installed (any ALTER of it, of the table or of
# the unit column changes a catalog row's xmin, which is part of the key; a rewrite
# changes relfilenode). The cost: writers to a protected table serialise on its counter.
_VERSION_TABLE = ("CREATE TABLE IF NOT EXISTS idp.versions "
                  "(table_oid oid PRIMARY KEY, version bigint NOT NULL)")
# The counter's body: it counts and does nothing else (no ``pg_notify``: the lock on the
# notification queue at every writer's commit cost single-row writers a quarter to
# two-fifths of their rate; a served proxy polls the counters instead, ``watch_writes``).
_COUNTER_BODY = """
       BEGIN
         INSERT INTO idp.versions AS v (table_oid, version) VALUES (TG_RELID, 1)
         ON CONFLICT (table_oid) DO UPDATE SET version = v.version + 1;
         RETURN NULL;
       END """
_VERSION_SETUP = [
    "CREATE OR REPLACE FUNCTION idp.bump_data_version() RETURNS trigger LANGUAGE plpgsql "
    "SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$" + _COUNTER_BODY + "$$",
    """CREATE OR REPLACE TRIGGER idp_data_version
       AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON {table}
       FOR EACH STATEMENT EXECUTE FUNCTION idp.bump_data_version()""",
    "ALTER TABLE {table} ENABLE ALWAYS TRIGGER idp_data_version",
    # A version left from an earlier trigger may predate writes made without it.
    """INSERT INTO idp.versions AS v (table_oid, version) VALUES (to_regclass(%s), 1)
       ON CONFLICT (table_oid) DO UPDATE SET version = v.version + 1""",
]
# tgtype 60 = INSERT | DELETE | UPDATE | TRUNCATE, AFTER, FOR EACH STATEMENT. Every
# column's pg_attribute row is in the key: renames, type changes and drops rewrite it.
_VERSION_SQL = """
SELECT c.oid, c.relfilenode, c.xmin, t.oid, t.xmin, v.version,
  (SELECT string_agg(a.attnum || '.' || a.xmin, ',' ORDER BY a.attnum)
   FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attnum > 0)
FROM pg_class c
JOIN pg_trigger t ON t.tgrelid = c.oid AND t.tgname = 'idp_data_version'
  AND t.tgenabled = 'A' AND t.tgtype = 60 AND t.tgqual IS NULL AND t.tgattr = ''
  AND t.tgfoid = to_regprocedure('idp.bump_data_version()')
LEFT JOIN idp.versions v ON v.table_oid = c.oid
WHERE c.oid = to_regclass(%s) AND c.relkind = 'r' AND NOT c.relrowsecurity
  AND NOT EXISTS (SELECT FROM pg_inherits i WHERE i.inhparent = c.oid)"""
# The same read as a PL/pgSQL function: PL/pgSQL keeps a statement's plan for the
# session, so a call costs a fraction of the catalog join's parse and plan, which is most
# of its cost (0.8 against 0.2 ms a round trip, measured on this machine: docs/budget.md,
# "Round trips on PostgreSQL"). The same rows, the same snapshot (a STABLE function's
# statements read the calling transaction's snapshot: REPEATABLE READ's, taken at its
# first statement), so the same version text; ``to_regclass`` resolves the name on the
# caller's search path, as the statement does. Installed (or replaced when its text
# differs) at start; where it cannot be, the statement is sent as before.
_READER_ARGUMENT = "relation"
_READER_BODY = ("BEGIN RETURN QUERY " + _VERSION_SQL.replace("%s", _READER_ARGUMENT)
                + "; END")
_READER_SETUP = (
    "CREATE OR REPLACE FUNCTION idp.data_version(" + _READER_ARGUMENT + " text) "
    "RETURNS TABLE (class_oid oid, class_file oid, class_xmin xid, trigger_oid oid, "
    "trigger_xmin xid, counted bigint, attributes text) LANGUAGE plpgsql STABLE "
    "AS $idp$" + _READER_BODY + "$idp$")
_READER_SQL = "SELECT * FROM idp.data_version(%s)"
# Whether a function of the proxy's is installed with its text (a row: installed).
_CURRENT = "SELECT prosrc = %s FROM pg_proc WHERE oid = to_regprocedure(%s)"
_READER_CURRENT = (_READER_BODY, "idp.data_version(text)")
_COUNTER_CURRENT = (_COUNTER_BODY, "idp.bump_data_version()")
# Writes watched (``PostgresBackend.watch_writes``): a connection of its own reads the
# counters every ``[server] write_poll_ms`` (autocommit: a fresh snapshot each time), a
# few rows, whatever the load. What no counter sees (a DDL change, a write to the ledger
# by another process or an owner's command) is caught by forgetting everything read at
# least every WATCH_SECONDS.
_UNCOUNTED = ("no write counter on %s (the proxy's role must own it): its answers are not "
              "cached, and user-level queries on it read its unit column to detect changes")
_OUTDATED = ("the write counter of %s is not the proxy's (the proxy's role must own "
             "idp.bump_data_version): every repeat of a served proxy reads the data version")
_POLL_SQL = "SELECT table_oid, version FROM idp.versions"
POLLER_NAME = "idp-proxy write poller"  # its connection's application_name
WATCH_SECONDS = 1.0
# SQLSTATEs of a session's end: a lost connection (08…), an administrator's or a crash's
# shutdown, a start under way, the database dropped, an idle timeout (57P01–57P05)
_ENDING = ("08", "57P")


class PostgresBackend(Backend):
    capabilities = Capabilities(
        dialect="postgres", transactional=True, group_commit=False, identity_columns=True,
        one_process=False, located_tables=False, grouped_ranks=GroupedRanks.ORDERED_SET,
        projected_scope=False, fenced_rows=True, bucketed_ranks=True,
        extremes_in_pass=True)
    row_identity = "ctid"

    def __init__(self, url: str, pool_size: int = 4) -> None:
        """``pool_size``: transactions that run at once; more wait for a connection."""
        super().__init__()
        self.url = url
        self.name = url.rsplit("/", 1)[-1].split("?")[0] or "postgres"
        self._pool = ConnectionPool(self._connect, pool_size)
        # ``quiet_mark``: bumped after every durable write of this process, every poll
        # that saw a change, failed or was late, and every WATCH_SECONDS; None unless
        # the poller's last read began less than two periods ago (``_checked_at``)
        self._mark = 0
        self._mark_lock = threading.Lock()
        self._period = 0.0  # seconds between polls (``watch_writes``)
        self._checked_at: float | None = None
        self._watcher: threading.Thread | None = None
        self._closing = threading.Event()
        # idp.data_version installed (``track_versions``; None: not looked at yet)
        self._reader: bool | None = None

    @classmethod
    def from_url(cls, url: str, connections: int) -> PostgresBackend:
        """``postgresql://user@host:port/db`` (or ``postgres://``), with a pool of
        ``connections``."""
        return cls(url, connections)

    def _connect(self) -> psycopg.Connection:
        # No server-side prepared statements (psycopg prepares a statement on its fifth
        # run): a statement that fails in a pipeline (a racing session's cache entry,
        # 23505) aborts the pipeline's PREPARE too, psycopg's cache still names it, and
        # the connection's next use of it failed ("prepared statement _pg3_6 does not
        # exist"): an internal error to an analyst in a cancel storm.
        try:
            return psycopg.connect(self.url, autocommit=True, connect_timeout=10,
                                   prepare_threshold=None)
        except psycopg.OperationalError as exc:
            log.error("postgres connect failed: %s", exc)
            raise BackendUnavailable("the database behind the proxy is unreachable") from None

    def probe(self) -> None:
        """One connection, for the owner at start: a failure says why, with the server's
        own words (never shown to an analyst: the command line's owner typed the URL) and
        what to run."""
        from psycopg.conninfo import conninfo_to_dict

        try:
            psycopg.connect(self.url, autocommit=True, connect_timeout=10).close()
            return
        except psycopg.OperationalError as exc:
            cause = " ".join(str(exc).split())
        info = conninfo_to_dict(self.url)
        role, database = info.get("user", "(your login)"), info.get("dbname", "(default)")
        where = f"{info.get('host', 'localhost')}:{info.get('port', 5432)}"
        lowered = cause.lower()
        if f'database "{database}" does not exist' in lowered:
            hint = f"create it (CREATE DATABASE {database}) or name another in the URL"
        elif f'role "{role}" does not exist' in lowered:
            hint = (f"as a superuser, run CREATE ROLE {role} LOGIN PASSWORD '...', then "
                    f"GRANT SELECT on the protected tables and GRANT CREATE ON DATABASE "
                    f"{database} TO {role} (the proxy keeps its ledger in a schema idp)")
        elif "password" in lowered:
            hint = ("put the password in the URL (postgresql://user:PASSWORD@host/db), "
                    "PGPASSWORD or ~/.pgpass")
        elif "not permitted to log in" in lowered:
            hint = f"run ALTER ROLE {role} LOGIN"
        elif "permission denied for database" in lowered:
            hint = f"run GRANT CONNECT ON DATABASE {database} TO {role}"
        elif "refused" in lowered or "timeout" in lowered or "could not translate" in lowered:
            hint = f"is PostgreSQL running and listening on {where}?"
        else:
            hint = "check the URL, the server and pg_hba.conf"
        raise BackendUnavailable(f"could not connect to the database {database} on {where} "
                                 f"as {role}: {cause}; {hint}") from None

    def transaction(self, snapshot: bool = False, durable: bool = True
                    ) -> AbstractContextManager[Transaction]:
        """On a connection of its own from the pool (see ConnectionPool for which are
        reused). BEGIN and COMMIT are plain statements, not psycopg's transaction
        blocks, whose bookkeeping a cancel landing on BEGIN would confuse. BEGIN goes
        with the first statement in one pipeline (one round trip for both: a snapshot's
        view is taken at its first statement anyway), and a transaction that ran none
        sends neither. ``durable=False`` (a cache entry, replays' audit rows; never a
        debit): ``SET LOCAL synchronous_commit = off`` goes with them, so its COMMIT does
        not wait for the WAL to reach the disk; a crash may lose it, never a debit
        committed before it (docs/budget.md, "Round trips on PostgreSQL")."""
        return self._transaction(_begin(snapshot, durable), ending=False, writes=durable)

    def reading(self) -> AbstractContextManager[Transaction]:
        """A REPEATABLE READ ... READ ONLY snapshot whose COMMIT is sent without waiting
        for its reply (the pool reads it when it lends the connection again): nothing
        was written, so there is nothing for the caller to wait for, and the server
        ends the transaction (its snapshot and locks) as soon as the COMMIT arrives.
        Statements sent ``ahead`` go in the pipeline of the next statement (the first:
        with BEGIN), one round trip for all."""
        return self._transaction(("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY",),
                                 ending=True)

    @contextmanager
    def _transaction(self, begin: tuple[str, ...], ending: bool, writes: bool = False
                     ) -> Iterator[Transaction]:
        """``writes``: a durable write may have committed at the end, or when it failed
        (a COMMIT whose reply was lost): the mark moves after it (``quiet_mark``)."""
        try:
            with self._pool.connection() as con, self._running(con):
                tx = _PostgresTransaction(self._stopped, con, begin, early=ending)
                with self._failures(con):
                    yield tx
                    if tx.begun and ending:
                        self._pool.end_later(con, b"COMMIT")
                    elif tx.begun:
                        con.execute("COMMIT")
        finally:
            if writes:
                self._bump()

    def query(self, sql: str, params: Sequence[Any] = (), durable: bool = True) -> list[tuple]:
        try:
            return self._alone(sql, params, durable)
        finally:  # a durable write (a debit) may have committed, or may yet commit
            if durable:
                self._bump()

    def read(self, sql: str, params: Sequence[Any] = ()) -> list[tuple]:
        return self._alone(sql, params)

    def _alone(self, sql: str, params: Sequence[Any], durable: bool = True) -> list[tuple]:
        """One statement alone: PostgreSQL runs a statement outside BEGIN as a
        transaction of its own, atomic and in one snapshot, so BEGIN and COMMIT (two of a
        debit's or a cache entry's three round trips) are not sent. Not ``durable``: its
        BEGIN, ``SET LOCAL synchronous_commit = off``, the statement and COMMIT in one
        pipeline, one round trip too."""
        with self._pool.connection() as con, self._running(con):
            tx = _PostgresTransaction(self._stopped, con,
                                      () if durable else _begin(False, durable), ending=True)
            with self._failures(con):
                return tx.execute(sql, params)

    @contextmanager
    def _failures(self, con: psycopg.Connection) -> Iterator[None]:
        """A failure on ``con`` rolls it back and is raised as what it means."""
        try:
            yield
        except psycopg.OperationalError as exc:
            self._roll_back(con)
            raise self._failure(con, exc) from None
        except BaseException:
            self._roll_back(con)
            raise

    def _roll_back(self, con: psycopg.Connection) -> None:
        """After a failure, make a healthy connection idle again for the next
        transaction; the pool closes one this leaves in a transaction."""
        if (self._pool.reusable(con)
                and con.info.transaction_status != pq.TransactionStatus.IDLE):
            with suppress(psycopg.Error):
                con.execute("ROLLBACK")

    def _failure(self, con: psycopg.Connection, exc: psycopg.OperationalError) -> ProxyError:
        """What an operational failure (a cancel, a full disk, a lost connection...)
        means to the analyst; the server's text goes to the log only, in one line."""
        if isinstance(exc, psycopg.errors.QueryCanceled):
            return QueryCanceled("canceling statement due to user request")
        if isinstance(exc, psycopg.errors.DiskFull):
            log.error("postgres: disk full: %s", one_line(exc))
            return DiskFull()
        if exc.sqlstate is not None and exc.sqlstate.startswith("40") and not con.closed:
            log.warning("postgres rolled a transaction back: %s", one_line(exc))
            return RolledBack(exc.sqlstate)  # 40P01 deadlock, 40001 serialization
        log.error("postgres connection lost: %s", one_line(exc))
        # broken, told it is ending (57P01 at a shutdown comes before the socket closes),
        # or failed in the client with no word from the server (psycopg's "connection
        # socket closed" while libpq still calls the connection good): the idle
        # connections go with the server, and this one is never lent again
        if con.closed or exc.sqlstate is None or exc.sqlstate.startswith(_ENDING):
            self._pool.clear()
            con.close()
            return BackendUnavailable("the database behind the proxy is unreachable")
        return BackendLost("the backend could not run this query")

    def _stop(self, handle: psycopg.Connection) -> None:
        self._pool.discard(handle)
        handle.cancel_safe()

    def track_versions(self, table: str) -> None:
        """Install the statement trigger that counts writes to ``table`` (once; it needs
        the table's ownership). Without it every user-level query scans the unit column
        and no answer is cached."""
        with self.transaction() as tx:
            tx.execute(_VERSION_TABLE)
            installed = bool(tx.execute(_VERSION_SQL, (table,)))
            counter = installed and tx.execute(_CURRENT, _COUNTER_CURRENT)[0][0]
            current = tx.execute(_CURRENT, _READER_CURRENT) if self._reader is None else None
        if self._reader is None:  # one function serves every table: looked at once
            self._reader = bool(current and current[0][0]) or self._install_reader()
        if installed:
            if not counter:  # an older proxy's (counted and notified): the same counts
                self._setup([_VERSION_SETUP[0]], table, _OUTDATED)
            return
        self._setup(_VERSION_SETUP, table, _UNCOUNTED)

    def _install_reader(self) -> bool:
        """Install ``idp.data_version`` (``_READER_SETUP``); whether it is there now."""
        try:
            with self.transaction() as tx:
                tx.execute("SELECT pg_advisory_xact_lock(hashtext('idp.versions'))")
                tx.execute(_READER_SETUP)
        except BackendFailed:
            log.info("idp.data_version could not be installed: the data version is read "
                     "by its catalog query")
            return False
        return True

    def _setup(self, statements: list[str], table: str, warning: str) -> None:
        try:
            with self.transaction() as tx:
                tx.execute("SELECT pg_advisory_xact_lock(hashtext('idp.versions'))")
                for statement in statements:
                    tx.execute(statement.format(table=exp.to_table(table, quoted=True).sql(
                        dialect="postgres")), (table,) if "%s" in statement else ())
        except BackendFailed:
            log.warning(warning, table)

    def column_types(self, table: str) -> list[tuple[str, str]]:
        """As Backend's, in the schema the table's name resolves to on the search path
        (where queries find it): current_schema() is the first schema that exists, which
        is the ledger's ``idp`` when the proxy's role is named idp."""
        rows = self.read(
            "SELECT column_name, data_type FROM information_schema.columns c "
            "JOIN pg_namespace n ON n.nspname = c.table_schema "
            "JOIN pg_class r ON r.relnamespace = n.oid AND r.relname = c.table_name "
            "WHERE r.oid = to_regclass(quote_ident(%s)) ORDER BY ordinal_position", (table,))
        return [(name, postgres_type(kind)) for name, kind in rows]

    def data_version(self, tx: Transaction, table: str) -> str | None:
        rows = tx.execute(_READER_SQL if self._reader else _VERSION_SQL, (table,))
        return self.fingerprint_text(rows[0]) if rows else None

    def fingerprint_aggregates(self, unit: str, integer: bool) -> list[exp.Expression]:
        # The cumulative statistics lag by up to a minute, so the unit column itself is
        # read: its count and the sum of a 64-bit hash of each value (a scan, no sort;
        # shared with the statistics' scan where the plan allows).
        column = exp.column(unit, quoted=True)
        hashed = (exp.func("hashint8", column) if integer else
                  exp.func("hashtextextended", exp.cast(column, "text"), exp.Literal.number(0)))
        return [exp.Count(this=column), exp.Sum(this=hashed)]

    def watch_writes(self, poll_ms: int) -> None:
        """Poll the write counters every ``poll_ms`` in a thread of its own, so that
        ``quiet_mark`` can say when nothing was written (docs/budget.md, "Repeats that
        read nothing"): a repeat then reads neither the data version nor what the
        analyst has left. Called by a server once it serves; not called, or while the
        poller is not connected or is late, the mark is None and every repeat asks the
        server."""
        if self._watcher is None:
            self._period = poll_ms / 1000
            self._watcher = threading.Thread(target=self._watch, daemon=True,
                                             name="idp-writes-poller")
            self._watcher.start()

    def quiet_mark(self) -> int | None:
        """Unchanged while no durable write of this process ended, no poll saw a counter
        change, failed or took longer than the poll period P, and less than
        WATCH_SECONDS passed (what the counters do not see: DDL, other processes' ledger
        writes). None while the last poll that completed began more than 2 P ago (one
        under way is late: what it will see is not known yet). A write committed by
        another connection is seen once the next poll begun after it completes: at most
        P and a round trip later, never more than 2 P (a repeat asked in that gap gets
        the answer of the data as it was, already released and paid for)."""
        checked = self._checked_at
        if checked is None or time.monotonic() - checked > 2 * self._period:
            return None
        return self._mark

    def _bump(self) -> None:
        with self._mark_lock:
            self._mark += 1

    def _watch(self) -> None:
        """The poller thread: reconnects after a failure, until ``close``."""
        while not self._closing.is_set():
            try:
                with psycopg.connect(self.url, autocommit=True, connect_timeout=10,
                                     application_name=POLLER_NAME) as con:
                    counter = con.execute(_CURRENT, _COUNTER_CURRENT).fetchone()
                    if not (counter and counter[0]):
                        log.info("the data triggers are not the proxy's counters: every "
                                 "repeat reads the data version")
                        return
                    self._poll(con)
            except psycopg.Error as exc:
                log.warning("the poller of the write counters failed (%s); repeats read "
                            "the data version until it is back", one_line(exc))
            finally:
                with self._mark_lock:  # a failed poll moves the mark
                    self._checked_at = None
                    self._mark += 1
            self._closing.wait(WATCH_SECONDS)

    def _poll(self, con: psycopg.Connection) -> None:
        """Read the counters every period (each statement its own snapshot); the mark
        moves when they changed (the first read too: what was read before it may have
        missed a write), when a read took longer than the period or ended after
        ``quiet_mark`` had been None (the last read begun over 2 P before: a read that
        began late and was blocked for less than P came back with the old mark, which
        a test saw under load), and every WATCH_SECONDS. Then the read's start is
        recorded: every write committed before it is accounted for by the mark."""
        seen, forced = None, time.monotonic()
        while not self._closing.is_set():
            began = time.monotonic()
            counts = dict(con.execute(_POLL_SQL).fetchall())
            done = time.monotonic()
            due = done - forced >= WATCH_SECONDS
            forced = done if due else forced
            with self._mark_lock:
                last = self._checked_at
                if due or counts != seen or done - began > self._period or (
                        last is None or done - last > 2 * self._period):
                    self._mark += 1
                self._checked_at = began
            seen = counts
            self._closing.wait(max(0.0, began + self._period - time.monotonic()))

    def close(self) -> None:
        self._closing.set()
        self._pool.clear()


def _begin(snapshot: bool, durable: bool) -> tuple[str, ...]:
    """What a transaction sends before its first statement (in its pipeline)."""
    return (("BEGIN ISOLATION LEVEL REPEATABLE READ" if snapshot else "BEGIN",)
            + (() if durable else ("SET LOCAL synchronous_commit = off",)))


class _PostgresTransaction(Transaction):
    def __init__(self, stopped, con: psycopg.Connection, begin: Sequence[str] = (),
                 ending: bool = False, early: bool = False) -> None:
        """``begin``: the statements that open the transaction, sent with its first
        statement; ``ending``: its one statement is followed by COMMIT in that pipeline
        (``PostgresBackend._alone``); ``early``: a read-only snapshot, whose statements
        sent ``ahead`` go with the next one."""
        super().__init__(stopped)
        self._con = con
        self._begin = tuple(begin)
        self._ending = ending and bool(begin)
        self._early_allowed = early
        self._ahead: list[tuple[str, tuple]] = []
        self.begun = False  # BEGIN sent: COMMIT is due
        self._description: list[tuple[str, str]] = []

    def ahead(self, sql: str, params: Sequence[Any] = ()) -> None:
        if self._early_allowed:
            self._ahead.append((sql, tuple(params)))

    def _execute(self, sql: str, params: Sequence[Any]) -> list[tuple]:
        ahead, self._ahead = self._ahead, []
        with self._errors(sql):
            opening = self._begin if self._begin and not self.begun else ()
            if opening or ahead:
                self.begun = self.begun or bool(opening)
                # one round trip: BEGIN (, SET), the statement, those sent ahead
                with self._con.pipeline():
                    for statement in opening:
                        self._con.execute(statement)
                    cursor = self._con.execute(sql, list(params) or None)
                    early = [(key, self._con.execute(key[0], list(key[1]) or None))
                             for key in ahead]
                    if self._ending:
                        self._con.execute("COMMIT")
                for key, sent in early:
                    self._early[key] = (sent.fetchall() if sent.description else [],
                                        _described(sent))
            else:
                cursor = self._con.execute(sql, list(params) or None)
        self._describe(cursor)
        return cursor.fetchall() if cursor.description else []

    def _read_early(self, columns: list[tuple[str, str]]) -> None:
        self._description = columns

    def end_with(self, statements: Sequence[tuple[str, Sequence[Any]]]) -> bool:
        """A read-only snapshot's COMMIT (not yet sent: ``PostgresBackend.reading``), then
        BEGIN, ``SET LOCAL synchronous_commit = off``, ``statements`` and COMMIT, in one
        pipeline. A failure leaves the connection idle where it can (ROLLBACK) and is
        raised as what it means: a lost connection as BackendUnavailable here (its write
        may have committed: the caller must treat it as done), a taken key as KeyTaken."""
        if not self._early_allowed:
            return False
        if self._stopped():
            raise QueryCanceled("canceling statement due to user request")
        opening = (("COMMIT",) if self.begun else ()) + _begin(False, durable=False)
        self.begun = False  # whatever happens, this snapshot is over
        self._begin = ()
        try:
            with self._errors(statements[-1][0]), self._con.pipeline():
                for statement in opening:
                    self._con.execute(statement)
                for sql, params in statements:
                    self._con.execute(sql, list(params) or None)
                self._con.execute("COMMIT")
        except psycopg.errors.QueryCanceled:
            raise QueryCanceled("canceling statement due to user request") from None
        except psycopg.OperationalError as exc:  # lost, a full disk, rolled back...
            log.error("postgres: a write after a snapshot failed: %s", one_line(exc))
            raise BackendUnavailable("the database behind the proxy is unreachable") from None
        except ProxyError:
            if not self._con.closed and \
                    self._con.info.transaction_status != pq.TransactionStatus.IDLE:
                with suppress(psycopg.Error):
                    self._con.execute("ROLLBACK")
            raise
        return True

    def _started(self) -> None:
        """BEGIN sent, for what cannot go in a pipeline (a named cursor, COPY)."""
        if self._begin and not self.begun:
            self.begun = True
            for opening in self._begin:
                self._con.execute(opening)

    def batches(self, sql: str, size: int) -> Iterator[list[tuple]]:
        # a named (server-side) cursor: PostgreSQL sends the rows as they are fetched
        self._started()
        with self._con.cursor(name="idp_batches") as cursor, self._errors(sql):
            cursor.execute(sql)
            self._describe(cursor)
            while rows := cursor.fetchmany(size):
                yield rows

    def append(self, table: str, columns: Sequence[Sequence[Any]]) -> None:
        self._started()
        with self._errors(f"COPY {table}", "the backend could not store the rows"), \
                self._con.cursor().copy(f"COPY {table} FROM STDIN") as copy:
            for row in zip(*columns):
                copy.write_row(row)

    @staticmethod
    @contextmanager
    def _errors(sql: str, message: str = "the backend could not run this query"
                ) -> Iterator[None]:
        """A lost connection goes up as is (the transaction turns it into
        BackendUnavailable); any other error's text goes to the log only."""
        try:
            yield
        except psycopg.OperationalError:
            raise
        except psycopg.errors.UniqueViolation:
            raise KeyTaken("the key is taken") from None
        except psycopg.errors.InsufficientPrivilege as exc:
            log.error("postgres error: %s -- in: %s", exc, sql)
            raise PrivilegeMissing(message) from None
        except psycopg.Error as exc:
            log.error("postgres error: %s -- in: %s", exc, sql)
            raise BackendFailed(message) from None

    def _describe(self, cursor: psycopg.Cursor) -> None:
        self._description = _described(cursor)

    def columns(self) -> list[tuple[str, str]]:
        return self._description


def _described(cursor: psycopg.Cursor) -> list[tuple[str, str]]:
    """(name, PostgreSQL type name) of each column of ``cursor``'s result."""
    return [(d.name, NAMES.get(d.type_code, "text")) for d in cursor.description or ()]
