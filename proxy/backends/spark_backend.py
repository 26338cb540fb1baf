"""Spark backend over Spark Connect (``sc://host:port``): reads only.

Statements run as Spark SQL, rendered by pushdown for ``SPARK_DIALECT`` (sqlglot's
Spark with exact percentiles: proxy.backends.spark_dialect). Spark has no
transactions, so it cannot hold the ledger, the logins or the answer cache (its
capabilities say ``transactional=False``: the Ledger refuses it); a transaction here is
only a scope for the statements of one query, and a "snapshot" is whatever each
statement reads.

Data versions: a plain Spark table offers none that is cheap and trustworthy, so
``data_version`` is None: the per-unit row bound c is keyed by a fingerprint of the
unit column (its count and the sum of a 64-bit xxhash64 of each value, summed as
DECIMAL(38,0) so that it cannot overflow), which rides along in the statistics' first
scan where there is no GROUP BY, and no answer is cached. Delta and Iceberg table
versions would give a cheap version; not read yet.
"""

from __future__ import annotations

import itertools
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import replace
from typing import Any

from sqlglot import exp

from proxy.backends.base import Backend, Capabilities, GroupedRanks, Transaction, log, one_line
from proxy.backends.spark_dialect import DIALECT as SPARK_DIALECT
from proxy.errors import BackendFailed, BackendUnavailable, QueryCanceled
from proxy.pgtypes import postgres_type

# Spark's simple type names that differ from DuckDB's and PostgreSQL's.
_SPARK_TYPES = {"int": "integer", "byte": "smallint", "short": "smallint", "long": "bigint",
                "string": "text", "timestamp": "timestamptz", "timestamp_ntz": "timestamp"}
_tags = itertools.count()
# The shape of an EXISTS's statistics (``proxy.pushdown.scope._with_semi_joins``): a
# correlated EXISTS per row of a derived table, in its SELECT list; one true, one false
_EXISTS_PROBE = ("SELECT `_idp_x`.*, EXISTS (SELECT 1 FROM (SELECT 1 AS u, 2 AS v) AS `_idp_y` "
                 "WHERE `_idp_y`.u = `_idp_x`.u AND `_idp_y`.v <> `_idp_x`.v) AS `e1`, "
                 "EXISTS (SELECT 1 FROM (SELECT 1 AS u, 1 AS v) AS `_idp_y` "
                 "WHERE `_idp_y`.u = `_idp_x`.u AND `_idp_y`.v <> `_idp_x`.v) AS `e2` "
                 "FROM (SELECT 1 AS u, 1 AS v) AS `_idp_x`")
# Retries of a Spark Connect call the server did not answer: after 50, 200, 500 ms
_RETRIES, _MAX_BACKOFF_MS = 3, 500


def spark_type(name: str) -> str:
    """The PostgreSQL spelling of a Spark SQL type name (``decimal(10,2)`` included)."""
    return _SPARK_TYPES.get(name.lower(), None) or postgres_type(name)


class SparkBackend(Backend):
    capabilities = Capabilities(
        dialect=SPARK_DIALECT, transactional=False, group_commit=False, identity_columns=False,
        one_process=True, located_tables=True, grouped_ranks=GroupedRanks.WINDOW,
        projected_scope=False, extremes_in_pass=True, bucketed_ranks=True,
        crossed_buckets=True,
        # Sail 0.7 plans a chain of ANDs in time growing faster than its length and its
        # planner recurses once per term: 360 terms '(y <> i OR x > 5)' (1,079 ANDs and
        # ORs) took 1.3 s, 400 4.2 s, 480 crashed the server (a stack overflow, every
        # session lost), as did 500 'x > -i' (499 ANDs); 250 of those: 0.6 s
        max_connectors=256,
        # a correlated EXISTS in a SELECT list: asked of the server (``probe_capabilities``)
        exists_in_select=False)
    row_identity = ""  # Spark tables have no row identity

    def __init__(self, url: str) -> None:
        super().__init__()
        # pyspark warns on stderr (of pandas 3 at every start, of retries exceeded): a
        # command's stderr keeps to its one line, the log says what failed
        warnings.filterwarnings("ignore", module="pyspark")
        try:
            from pyspark.sql import SparkSession
            from pyspark.sql.connect.client.retries import DefaultPolicy
        except ImportError:
            raise BackendFailed("the Spark backend needs pyspark: pip install "
                                "'idp-proxy[spark]'", "22023") from None
        self.url = url
        self.name = url.removeprefix("sc://").split("/")[0]
        try:
            # the process's session for this server (a Sail server keeps the tables
            # created in a session in that session's catalog)
            self._session = SparkSession.builder.remote(url).getOrCreate()
            # pyspark retries an unreachable server for 10 minutes or more: a query (or
            # the shutdown's session release) would hang that long instead of failing
            self._session.client.set_retry_policies([DefaultPolicy(
                max_retries=_RETRIES, max_backoff=_MAX_BACKOFF_MS)])
        except Exception as exc:  # noqa: BLE001 -- pyspark raises many kinds here
            log.error("spark connect failed: %s", one_line(exc))
            raise BackendUnavailable("the database behind the proxy is unreachable") from None

    def probe_capabilities(self) -> None:
        """Whether the server computes a correlated EXISTS in a SELECT list, as the
        statistics of an EXISTS send it (``proxy.pushdown.scope``): Sail 0.7.2 and Spark
        4.2.1 do (TPC-H Q04's and Q21's statistics equal DuckDB's on both, 2026-11-27),
        an older Spark may plan EXISTS in filters and joins only. Asked with that shape,
        the answers checked; any failure: not, and such statements are refused before
        any debit."""
        from pyspark.errors import PySparkException

        try:
            rows = [tuple(row) for row in self._session.sql(_EXISTS_PROBE).collect()]
        except PySparkException:
            return
        if rows == [(1, 1, True, False)]:
            self.capabilities = replace(self.capabilities, exists_in_select=True)

    @classmethod
    def from_url(cls, url: str, connections: int) -> SparkBackend:
        """``sc://host:port``; one Spark Connect session, whatever ``connections``."""
        return cls(url)

    @property
    def session(self) -> Any:
        """The pyspark session (for writing the demo's files: the backend only reads)."""
        return self._session

    @contextmanager
    def transaction(self, snapshot: bool = False, durable: bool = True
                    ) -> Iterator[Transaction]:
        """A scope for one query's statements (no isolation: Spark has no transactions).
        Each is tagged, so that ``interrupt`` stops it with ``interruptTag``."""
        tag = f"idp-{next(_tags)}"
        self._session.addTag(tag)
        try:
            with self._running(tag):
                yield _SparkTransaction(self._stopped, self._session)
        finally:
            self._session.removeTag(tag)

    def _stop(self, handle: Any) -> None:
        with suppress(Exception):
            self._session.interruptTag(handle)

    def attach(self, table: str, location: str) -> None:
        """A temporary view of this session over the Parquet files: Spark creates
        nothing in its catalog, and a Sail server, whose catalog is per session, serves
        tables that another process wrote."""
        try:
            with _errors(f"attach {table} from {location}"):
                frame = self._session.read.parquet(location)
                if frame.schema.fields:  # Sail reads a missing path as no columns
                    frame.createOrReplaceTempView(table)
                    return
        except BackendFailed:
            pass
        raise BackendFailed(f"the Spark backend cannot read Parquet files at {location}")

    def column_types(self, table: str) -> list[tuple[str, str]]:
        quoted = exp.to_table(table, quoted=True).sql(dialect=self.dialect)
        try:
            rows = self.read(f"DESCRIBE TABLE {quoted}")
        except BackendFailed:
            return []  # no such table (the schema check names it)
        columns = []
        for name, kind, *_ in rows:
            if not name or name.startswith("#"):  # partition information follows
                break
            columns.append((name, spark_type(kind)))
        return columns

    def data_version(self, tx: Transaction, table: str) -> str | None:
        return None  # see the module's docstring: fingerprints instead

    def fingerprint_aggregates(self, unit: str, integer: bool) -> list[exp.Expression]:
        column = exp.column(unit, quoted=True)
        hashed = exp.cast(exp.func("xxhash64", column), exp.DataType.build("DECIMAL(38, 0)"))
        return [exp.Count(this=column), exp.Sum(this=hashed)]

    def close(self) -> None:
        with suppress(Exception):
            self._session.stop()


class _SparkTransaction(Transaction):
    def __init__(self, stopped, session: Any) -> None:
        super().__init__(stopped)
        self._session = session
        self._last: Any = None  # the last statement's DataFrame, for columns()

    def _frame(self, sql: str, params: Sequence[Any]) -> Any:
        with _errors(sql):
            self._last = self._session.sql(sql.replace("%s", "?"), args=list(params) or None)
            return self._last

    def _execute(self, sql: str, params: Sequence[Any]) -> list[tuple]:
        frame = self._frame(sql, params)
        with _errors(sql):
            return [tuple(row) for row in frame.collect()]

    def batches(self, sql: str, size: int) -> Iterator[list[tuple]]:
        frame = self._frame(sql, ())
        rows = frame.toLocalIterator()
        while True:
            with _errors(sql):
                batch = [tuple(row) for row in itertools.islice(rows, size)]
            if not batch:
                return
            yield batch

    def append(self, table: str, columns: Sequence[Sequence[Any]]) -> None:
        raise BackendFailed("the Spark backend is read-only: it cannot store rows")

    def columns(self) -> list[tuple[str, str]]:
        """Asked of the last statement only when wanted: its schema is one more round
        trip to the server (an AnalyzePlan), which the statistics do not need."""
        if self._last is None:
            return []
        with _errors("(the last statement's columns)"):
            fields = self._last.schema.fields
        return [(field.name, spark_type(field.dataType.simpleString())) for field in fields]


@contextmanager
def _errors(sql: str) -> Iterator[None]:
    """57014 for an interrupted statement, 08006-like BackendUnavailable for a lost
    server, the backend's text to the log only (one line) for anything else."""
    from pyspark.errors import PySparkException

    try:
        yield
    except PySparkException as exc:
        text = one_line(exc)
        if "OPERATION_CANCELED" in text or "interrupted" in text.lower():
            raise QueryCanceled("canceling statement due to user request") from None
        if "UNAVAILABLE" in text or "Connection refused" in text:
            log.error("spark connection lost: %s", text)
            raise BackendUnavailable("the database behind the proxy is unreachable") from None
        log.error("spark error: %s -- in: %s", text, sql)
        raise BackendFailed("the backend could not run this query") from None


__all__ = ["SPARK_DIALECT", "SparkBackend"]
