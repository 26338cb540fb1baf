"""What every backend offers the engine and the ledger."""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from sqlglot import exp

log = logging.getLogger("idp_proxy.backend")


class Backend(ABC):
    """A database that holds the protected tables and the ``idp`` side tables.

    ``dialect`` is the sqlglot dialect pushdown renders for. SQL passed to ``query``
    and ``transaction`` uses ``%s`` placeholders; each backend adapts them.
    """

    dialect: str
    name: str

    def query(self, sql: str, params: Sequence[Any] = ()) -> list[tuple]:
        """Run one statement in its own transaction and return all rows."""
        with self.transaction() as tx:
            return tx.execute(sql, params)

    def query_with_columns(self, sql: str) -> tuple[list[str], list[tuple]]:
        """Run a read-only statement and return its column names and rows."""
        with self.transaction() as tx:
            rows = tx.execute(sql)
            return tx.columns(), rows

    @abstractmethod
    @contextmanager
    def transaction(self, snapshot: bool = False) -> Iterator[Transaction]:
        """A transaction that commits on success and rolls back on any exception.

        ``snapshot``: every read sees the same snapshot (REPEATABLE READ on PostgreSQL;
        DuckDB transactions always do). Writers keep READ COMMITTED, under which the
        ledger's conditional UPDATE re-checks the budget after waiting for a racer."""

    @abstractmethod
    def unit_fingerprint(self, tx: Transaction, table: str, unit: str, integer: bool) -> str:
        """A fingerprint that changes whenever the multiset of privacy-unit values may
        have changed, read in ``tx``. The per-unit row bound c depends on nothing else,
        so c is cached under it; each backend says why its fingerprint suffices."""

    def fingerprint_aggregates(self, unit: str, integer: bool) -> list[exp.Expression] | None:
        """Aggregates over every row whose values are the unit fingerprint, for backends
        where it is cheapest inside the statistics' own scan; None where
        ``unit_fingerprint`` reads it separately."""
        return None

    @staticmethod
    def fingerprint_text(values: Sequence[Any]) -> str:
        return ":".join(str(value) for value in values)

    @abstractmethod
    def close(self) -> None: ...


class Transaction(ABC):
    @abstractmethod
    def execute(self, sql: str, params: Sequence[Any] = ()) -> list[tuple]: ...

    @abstractmethod
    def columns(self) -> list[str]:
        """Column names of the last statement's result."""
