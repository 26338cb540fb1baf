"""PostgreSQL backend over psycopg 3; hosts the ledger in schema ``idp``."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import psycopg
from sqlglot import exp

from proxy.backends.base import Backend, Transaction, log
from proxy.errors import BackendFailed, BackendUnavailable


class PostgresBackend(Backend):
    dialect = "postgres"

    def __init__(self, url: str) -> None:
        self.url = url
        self.name = url.rsplit("/", 1)[-1].split("?")[0] or "postgres"
        self._lock = threading.RLock()
        self._con: psycopg.Connection | None = None

    def _connection(self) -> psycopg.Connection:
        if self._con is None or self._con.closed:
            try:
                self._con = psycopg.connect(self.url, autocommit=True, connect_timeout=10)
            except psycopg.OperationalError as exc:
                log.error("postgres connect failed: %s", exc)
                raise BackendUnavailable("the database behind the proxy is unreachable") from None
        return self._con

    @contextmanager
    def transaction(self, snapshot: bool = False) -> Iterator[Transaction]:
        with self._lock:
            con = self._connection()
            try:
                with con.transaction():
                    if snapshot:
                        con.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
                    yield _PostgresTransaction(con)
            except psycopg.OperationalError as exc:
                log.error("postgres connection lost: %s", exc)
                if con.broken or con.closed:
                    self._con = None
                    raise BackendUnavailable("the database behind the proxy is unreachable") from None
                raise BackendFailed("the backend could not run this query") from None

    def unit_fingerprint(self, tx: Transaction, table: str, unit: str, integer: bool) -> str:
        statement = exp.select(*self.fingerprint_aggregates(unit, integer)).from_(
            exp.to_table(table, quoted=True))
        return self.fingerprint_text(tx.execute(statement.sql(dialect="postgres"))[0])

    def fingerprint_aggregates(self, unit: str, integer: bool) -> list[exp.Expression]:
        # Other sessions may write at any time, and the cumulative statistics lag by up
        # to a minute, so the unit column itself is read: its count and the sum of a
        # 64-bit hash of each value (a scan, no sort; shared with the statistics' scan).
        column = exp.column(unit, quoted=True)
        hashed = (exp.func("hashint8", column) if integer else
                  exp.func("hashtextextended", exp.cast(column, "text"), exp.Literal.number(0)))
        return [exp.Count(this=column), exp.Sum(this=hashed)]

    def close(self) -> None:
        with self._lock:
            if self._con is not None:
                self._con.close()


class _PostgresTransaction(Transaction):
    def __init__(self, con: psycopg.Connection) -> None:
        self._con = con
        self._description: list[str] = []

    def execute(self, sql: str, params: Sequence[Any] = ()) -> list[tuple]:
        try:
            cursor = self._con.execute(sql, list(params) or None)
        except psycopg.OperationalError:
            raise
        except psycopg.Error as exc:
            log.error("postgres error: %s -- in: %s", exc, sql)
            raise BackendFailed("the backend could not run this query") from None
        self._description = [d.name for d in cursor.description or ()]
        return cursor.fetchall() if cursor.description else []

    def columns(self) -> list[str]:
        return self._description
