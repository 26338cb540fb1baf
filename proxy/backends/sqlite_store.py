"""A SQLite store (standard library) for the ledger, the logins and the answer cache.

DuckDB is made for scans: a debit's group commit and the answer cache's entry there
were 56 % of a fresh COUNT's 13.9 ms over the wire (benchmarks/README.md). SQLite in
WAL mode is made for small transactions: a debit commits in a fraction of a
millisecond. The embedded DuckDB backend keeps its ledger here by default, beside its
file (``DuckDBBackend.ledger_store``); the data, and so the data version the answer
cache is keyed by, stay in DuckDB.

Durability, by write (``transaction(durable=...)``): a debit, a refund, a grant, a
reset, a login commit with ``synchronous=FULL`` (the WAL is synced before COMMIT
returns: a debit is on disk before any answer is computed, so a kill -9 loses budget,
never privacy); an answer cache entry and the replays' audit rows with ``NORMAL``
(synced at the next FULL commit or checkpoint: a crash may lose the last few, which
costs budget — a repeat is charged again — never privacy). A crash never corrupts the
file in WAL mode.

The ledger's SQL (DuckDB's and PostgreSQL's) is translated once per statement text
(sqlglot, ``_translated``): schema ``idp`` is the file itself, ρ columns (``RHO_SQL``,
15 places) are kept as whole femto-ρ integers so that ``spent_rho + ρ <= budget_rho``
is exact (SQLite has no decimals; its REAL would round), timestamps as UTC text that
sorts in time order, booleans as 0/1, read back as Python's Decimal, str and bool.
"""

from __future__ import annotations

import datetime
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from decimal import ROUND_CEILING, Decimal
from typing import Any

import sqlglot
from sqlglot import exp

from proxy.accounting import RHO_SQL
from proxy.backends.base import Backend, Capabilities, GroupedRanks, Transaction, log, one_line
from proxy.errors import BackendFailed, DiskFull, KeyTaken, NotSupported, QueryCanceled
from proxy.pgtypes import postgres_type

_PLACES = int(RHO_SQL.rstrip(")").rpartition(",")[2])  # ρ's places: the femto unit
_LARGEST = 2 ** 63 - 1  # SQLite's INTEGER: ρ beyond 9223 is kept at this cap
# Declared types of the translated columns: their affinity (INT: INTEGER) and how a
# value read back is converted (``_KINDS``).
_FEMTO, _BOOL = "FEMTO_INT", "BOOL_INT"
_NOW = "(strftime('%Y-%m-%d %H:%M:%f', 'now') || '000+00')"  # as ``_timestamp`` writes
_SCHEMATA = "(SELECT 'idp' AS schema_name)"
_COLUMNS = ("(SELECT 'idp' AS table_schema, m.name AS table_name, p.name AS column_name "
            "FROM sqlite_master AS m JOIN pragma_table_info(m.name) AS p "
            "WHERE m.type = 'table')")
_SKIPPED = ("CREATE SCHEMA", "CREATE SEQUENCE")  # the file is schema idp; ids are rowids
_TRANSLATED_KEPT = 512  # statement texts kept translated


def _femto(value: Any) -> int | None:
    """A ρ (text, number) as whole femto-ρ, rounded up as ``rho_decimal`` rounds."""
    if value is None:
        return None
    femto = int(Decimal(str(value)).scaleb(_PLACES).to_integral_value(ROUND_CEILING))
    return max(-_LARGEST, min(femto, _LARGEST))


def _rho(value: Any) -> Decimal | None:
    """Whole femto-ρ read back as ρ, with DuckDB's 15 places."""
    if value is None:
        return None
    return Decimal(int(value) if isinstance(value, int) else round(value)).scaleb(-_PLACES)


def _timestamp(value: str | datetime.datetime | None) -> str | None:
    """A moment as the store keeps it: UTC, microseconds, ``2026-01-02 03:04:05.000006+00``
    (as DuckDB's TIMESTAMPTZ reads as text; text order is time order)."""
    if value is None:
        return None
    moment = value if isinstance(value, datetime.datetime) else \
        datetime.datetime.fromisoformat(value)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.timezone.utc)
    return moment.astimezone(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f+00")


_KINDS = {_FEMTO: _rho, _BOOL: lambda value: None if value is None else bool(value)}


def _parameter(value: Any) -> Any:
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, datetime.datetime):
        return _timestamp(value)
    return value


class SQLiteStore(Backend):
    """The ledger's tables in one SQLite file in WAL mode (or in memory)."""

    capabilities = Capabilities(
        dialect="sqlite", transactional=True,
        group_commit=True,  # one writer at a time (BEGIN IMMEDIATE, on the proxy's lock)
        identity_columns=True,  # translated to INTEGER PRIMARY KEY AUTOINCREMENT
        one_process=False,  # WAL: the owner's commands may read while it serves
        located_tables=False, grouped_ranks=GroupedRanks.WINDOW, projected_scope=False)
    row_identity = "rowid"

    def __init__(self, path: str) -> None:
        super().__init__()
        self.path = path
        self.name = "ledger"
        self._memory = path == ":memory:"  # one connection: readers share the writer's
        self._lock = threading.RLock()
        self._readers: list[sqlite3.Connection] = []  # idle
        self._opened: list[sqlite3.Connection] = []
        self._pool = threading.Lock()
        self._translations: dict[str, tuple[str | None, tuple]] = {}
        self._kinds: dict[str, str] = {}  # column name -> _FEMTO or _BOOL
        self._writes = 0  # write transactions ended (``quiet_mark``)
        self._writer = self._connect()
        self._writer.execute("PRAGMA journal_mode=WAL")
        for _, table, *_ in self._writer.execute("SELECT type, name FROM sqlite_master "
                                                 "WHERE type = 'table'").fetchall():
            for column in self._writer.execute(f"PRAGMA table_info('{table}')").fetchall():
                if column[2] in _KINDS:
                    self._kinds[column[1]] = column[2]

    @classmethod
    def from_url(cls, url: str, connections: int) -> SQLiteStore:
        raise NotSupported("the SQLite store is the DuckDB backend's, beside its file")

    def _connect(self) -> sqlite3.Connection:
        try:
            con = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False,
                                  timeout=30)
        except sqlite3.Error as exc:
            raise BackendFailed(f"the ledger's SQLite file {self.path} cannot be opened: "
                                f"{exc}", "58030") from None
        con.execute("PRAGMA synchronous=FULL")
        con.create_function("idp_femto", 1, _femto, deterministic=True)
        con.create_function("idp_ts", 1, _timestamp, deterministic=True)
        self._opened.append(con)
        return con

    @contextmanager
    def transaction(self, snapshot: bool = False, durable: bool = True
                    ) -> Iterator[Transaction]:
        """Writers take turns on the lock and on SQLite's write lock (BEGIN IMMEDIATE:
        a debit's conditional UPDATE sees every debit committed before it); snapshot
        readers each have a connection of their own (WAL: beside the writer)."""
        if snapshot and not self._memory:
            with self._reader() as con:
                with self._begun(con, "BEGIN", True) as tx:
                    yield tx
            return
        with self._lock:
            try:
                with self._begun(self._writer, "BEGIN" if snapshot else "BEGIN IMMEDIATE",
                                 durable) as tx:
                    yield tx
            finally:
                if not snapshot:  # after its end: a mark read before it differs then
                    self._writes += 1

    def quiet_mark(self) -> int:
        """The write transactions ended through this object: the store is opened only
        by the DuckDB backend holding the data file's lock (``ledger_store``), so the
        process that holds the file is the store's one writer, as for DuckDB's own
        ``quiet_mark``."""
        return self._writes

    @contextmanager
    def _begun(self, con: sqlite3.Connection, begin: str, durable: bool
               ) -> Iterator[Transaction]:
        with self._running(con):
            if not durable:  # this commit only; a FULL one syncs what it left behind
                con.execute("PRAGMA synchronous=NORMAL")
            try:
                with _errors(begin):
                    con.execute(begin)
                yield _SQLiteTransaction(self._stopped, con, self)
                with _errors("COMMIT"):
                    con.execute("COMMIT")
            except BaseException:
                if con.in_transaction:
                    try:
                        con.execute("ROLLBACK")
                    except sqlite3.Error:
                        pass
                raise
            finally:
                if not durable:
                    con.execute("PRAGMA synchronous=FULL")

    @contextmanager
    def _reader(self) -> Iterator[sqlite3.Connection]:
        with self._pool:
            con = self._readers.pop() if self._readers else None
        if con is None:
            con = self._connect()
        try:
            yield con
        finally:
            with self._pool:
                self._readers.append(con)

    def _stop(self, handle: sqlite3.Connection) -> None:
        handle.interrupt()

    def translated(self, sql: str) -> tuple[str | None, tuple]:
        """``sql`` (the ledger's, in DuckDB's and PostgreSQL's SQL, ``%s`` placeholders)
        in SQLite's, and how each result column is read back (None: skipped)."""
        found = self._translations.get(sql)
        if found is None:
            found = _translated(sql, self._kinds)
            if len(self._translations) >= _TRANSLATED_KEPT:
                self._translations.clear()
            self._translations[sql] = found
        return found

    def data_version(self, tx: Transaction, table: str) -> str | None:
        return None  # holds no protected table

    def fingerprint_aggregates(self, unit: str, integer: bool) -> list[exp.Expression]:
        raise NotSupported("the SQLite store holds no protected table")

    def close(self) -> None:
        with self._lock, self._pool:
            for con in self._opened:
                con.close()
            self._opened.clear()
            self._readers.clear()


class _SQLiteTransaction(Transaction):
    def __init__(self, stopped, con: sqlite3.Connection, store: SQLiteStore) -> None:
        super().__init__(stopped)
        self._con = con
        self._store = store
        self._description: list[tuple[str, str]] = []

    def _execute(self, sql: str, params: Sequence[Any]) -> list[tuple]:
        translated, kinds = self._store.translated(sql)
        if translated is None:
            return []
        with _errors(sql):
            cursor = self._con.execute(translated, [_parameter(value) for value in params])
            rows = cursor.fetchall()
        self._description = [(d[0], "text") for d in cursor.description or ()]
        if not any(kinds):
            return rows
        return [tuple(value if kind is None else _KINDS[kind](value)
                      for value, kind in zip(row, kinds)) for row in rows]

    def batches(self, sql: str, size: int) -> Iterator[list[tuple]]:
        rows = self._execute(sql, ())
        for start in range(0, len(rows), size):
            yield rows[start:start + size]

    def append(self, table: str, columns: Sequence[Sequence[Any]]) -> None:
        raise NotSupported("the SQLite store holds the ledger's tables only")

    def columns(self) -> list[tuple[str, str]]:
        return [(name, postgres_type(kind)) for name, kind in self._description]


def _translated(sql: str, kinds: dict[str, str]) -> tuple[str | None, tuple]:
    """The SQLite statement of one ledger statement, and the kind (``_KINDS``, None:
    as read) of each of its result columns; DDL records its columns' kinds in
    ``kinds``."""
    text = sql.replace("%s", "?")
    if text.lstrip().upper().startswith(_SKIPPED):
        return None, ()
    tree = sqlglot.parse_one(text, read="duckdb")
    for table in list(tree.find_all(exp.Table)):
        schema = table.db.lower()
        if schema == "information_schema":
            table.replace(exp.maybe_parse(_SCHEMATA if table.name == "schemata" else _COLUMNS,
                                          dialect="sqlite").subquery(table.alias_or_name))
        elif schema == "idp":
            table.set("db", None)
    for ordered in list(tree.find_all(exp.Ordered)):
        if not isinstance(ordered.parent, exp.Order):  # ON CONFLICT (analyst): no NULLS
            ordered.replace(ordered.this)
    for definition in tree.find_all(exp.ColumnDef):
        definition.set("exists", False)  # ADD COLUMN IF NOT EXISTS: asked first anyway
        kind = _column_kind(definition.args.get("kind"))
        if kind is not None:
            kinds[definition.name] = kind
            definition.set("kind", exp.DataType.build(kind, udt=True))
        elif definition.args.get("kind") is not None and \
                definition.args["kind"].this == exp.DataType.Type.TIMESTAMPTZ:
            definition.set("kind", exp.DataType.build("TEXT"))
        for constraint in definition.find_all(exp.DefaultColumnConstraint):
            if isinstance(constraint.this, (exp.CurrentTimestamp, exp.Anonymous)) or \
                    constraint.this.sql().upper() in ("NOW()", "CURRENT_TIMESTAMP"):
                constraint.set("this", exp.maybe_parse(_NOW, dialect="sqlite"))
    for cast in list(tree.find_all(exp.Cast)):
        target = cast.to
        if target.this == exp.DataType.Type.DECIMAL:
            scale = target.expressions[1].this.name if len(target.expressions) > 1 else "0"
            cast.replace(exp.Anonymous(this="idp_femto", expressions=[cast.this])
                         if int(scale) == _PLACES else exp.cast(cast.this, "INTEGER"))
        elif target.this == exp.DataType.Type.TIMESTAMPTZ:
            cast.replace(exp.Anonymous(this="idp_ts", expressions=[cast.this]))
        elif target.is_type(*exp.DataType.TEXT_TYPES) and isinstance(cast.this, exp.Column) \
                and cast.this.name == "logged_at":
            cast.replace(cast.this)  # kept as text already
    return tree.sql(dialect="sqlite"), _result_kinds(tree, kinds)


def _column_kind(kind: exp.DataType | None) -> str | None:
    if kind is None:
        return None
    if kind.this == exp.DataType.Type.BOOLEAN:
        return _BOOL
    if kind.this == exp.DataType.Type.DECIMAL and len(kind.expressions) > 1 and \
            int(kind.expressions[1].this.name) == _PLACES:
        return _FEMTO
    return None


def _result_kinds(tree: exp.Expression, kinds: dict[str, str]) -> tuple:
    """How each result column reads back: a ρ wherever it is computed from a ρ column,
    a boolean where it is a boolean column."""
    returning = tree.args.get("returning")
    outputs = returning.expressions if returning is not None else (
        tree.expressions if isinstance(tree, exp.Select) else [])
    result = []
    for output in outputs:
        named = [kinds.get(column.name) for column in output.find_all(exp.Column)]
        bare = output.unalias()
        if isinstance(bare, exp.Column) and kinds.get(bare.name) == _BOOL:
            result.append(_BOOL)
        else:
            result.append(_FEMTO if _FEMTO in named else None)
    return tuple(result)


@contextmanager
def _errors(sql: str) -> Iterator[None]:
    """57014 for an interrupt, 53100 for a full disk, 23505 (``KeyTaken``) for a key a
    racing transaction took, the store's text to the log only for anything else."""
    try:
        yield
    except sqlite3.IntegrityError as exc:
        if "UNIQUE" in str(exc) or "PRIMARY KEY" in str(exc):
            raise KeyTaken("the key is taken") from None
        log.error("sqlite error: %s -- in: %s", one_line(exc), sql)
        raise BackendFailed("the ledger could not run this statement") from None
    except sqlite3.Error as exc:
        if "interrupted" in str(exc):
            raise QueryCanceled("canceling statement due to user request") from None
        if "full" in str(exc):
            log.error("sqlite: disk full: %s -- in: %s", one_line(exc), sql)
            raise DiskFull() from None
        log.error("sqlite error: %s -- in: %s", one_line(exc), sql)
        raise BackendFailed("the ledger could not run this statement") from None
