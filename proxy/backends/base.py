"""What every backend offers the engine and the ledger, and what each declares it can do."""

from __future__ import annotations

import enum
import logging
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from typing import Any

from sqlglot import exp

from proxy import interrupts
from proxy.errors import NotSupported, QueryCanceled
from proxy.pgtypes import postgres_type

log = logging.getLogger("idp_proxy.backend")
REPEAT_INTERRUPT = 0.1  # seconds between interrupts of a statement that has not stopped


def one_line(exc: BaseException) -> str:
    """A backend's error text for one log line (some span lines: a caret, a cause)."""
    return " ".join(str(exc).split())


class GroupedRanks(enum.Enum):
    """How pushdown reads every group's values at the wanted ranks under GROUP BY."""

    # Two hash-aggregate passes of list aggregates, written in DuckDB's SQL
    # (pushdown/grouped_lists.py); the window where the lists do not reach a rank.
    LISTS = "lists"
    # A counting pass, then PERCENTILE_DISC(ARRAY[…]) WITHIN GROUP with per-group
    # fractions, written in PostgreSQL's SQL (pushdown/grouped_ranks.py).
    ORDERED_SET = "ordered set"
    # ROW_NUMBER over the scope partitioned by the key, one sort (pushdown/grouped.py):
    # rendered for any dialect.
    WINDOW = "window"


@dataclass(frozen=True)
class Capabilities:
    """What a backend can do, declared by its class: pushdown, the ledger and the command
    line read these rather than ask which database it is. Each field names the choice
    it makes."""

    dialect: str  # the sqlglot dialect its SQL is rendered in
    # Atomic transactions: it can hold the ledger, the logins and the answer cache;
    # otherwise they live in another backend (--ledger), and a release cannot run in it.
    transactional: bool
    # Its writers take turns anyway, so concurrent debits may share one commit (Ledger).
    group_commit: bool
    # GENERATED ALWAYS AS IDENTITY numbers the ledger's rows; otherwise a sequence does.
    identity_columns: bool
    # One process serves it (the server runs one worker): a DuckDB file is held by one
    # process; Spark Connect's gRPC client may hang in a process forked after the
    # supervisor opened a channel (grpc is not fork-safe), and its work is Spark's.
    one_process: bool
    # It reads a table from the Parquet files at the rules' ``location`` (``attach``):
    # ``idp-proxy demo`` writes the demo's tables there as files.
    located_tables: bool
    grouped_ranks: GroupedRanks  # how each group's ranks are read under GROUP BY
    # The first pass without GROUP BY reads the scope as a subquery, each normalised
    # value computed once per row (pushdown/ungrouped.py), not the table directly.
    projected_scope: bool
    # A subquery's value used several times is computed once only behind OFFSET 0:
    # PostgreSQL pulls a plain subquery up and evaluates (and JIT-compiles) its
    # expressions at each use (pushdown/contributions.py, ``bucket_sql``).
    fenced_rows: bool = False
    # The most ANDs and ORs the conditions of one statement may hold (its WHERE, its
    # FILTERs and CASE conditions): more are refused at analysis with 54001
    # (proxy.analyze.refuse_beyond_backend). None: the token limit bounds them.
    max_connectors: int | None = None
    # A correlated EXISTS may stand in a SELECT list (how an EXISTS of the WHERE is
    # computed, proxy.analyze.semi_joins); without it such queries are refused at analysis.
    exists_in_select: bool = True
    # An ungrouped drawn MAX/MIN's first windows (thousands of values from one end) are
    # read in the statistics' first pass (pushdown/window.with_window_extremes): DuckDB's
    # max(v, k), elsewhere the values beyond a pilot's threshold (pushdown/ungrouped.py),
    # not a deep top-k of their own (Sail 0.7's top-k took 1.4 s for 9,712 values of
    # 10 M, 0.2 s for 607; PostgreSQL's 0.09 s of 1 M beside its 0.07 s count).
    extremes_in_pass: bool = False
    # Under GROUP BY the draws' first windows are read from a histogram of each group's
    # values and the values inside the buckets that hold them (pushdown/window.py,
    # ``bucketed_windows``), not by a ROW_NUMBER over every row: Sail 0.7 sorted 10 M
    # rows in 4.6 s for it, 12x its own grouped median; PostgreSQL 1 M rows in 1.9 s
    # (a grouped MEDIAN 4.9x its own; the histogram and the brackets: 0.6 s).
    bucketed_ranks: bool = False
    # The bucketed contributions of several contributions (pushdown/contributions.py,
    # ``bucket_sql``) are grouped by all their buckets at once, each ladder's tally summed
    # from the cells by the proxy, not by GROUPING SETS (one per bucket column): Sail 0.7
    # hashes each row once per grouping set (clipped STDDEV at 4 M rows: 0.49 s of CPU
    # for the crossed statement against 0.59 s).
    crossed_buckets: bool = False
    # Under GROUP BY a linked table's (``unit_via``) contributions are summed per unit
    # once, each row's unit read by a scalar subquery on the link's target
    # (pushdown/contributions.py, ``_per_unit``), not summed per link value first,
    # joined, and summed again: DuckDB 2.0 plans the subquery as a SINGLE join built on
    # the target, where its estimate of a grouped scope (x0.2 for the IN lists of the
    # group keys) made it build the LEFT JOIN on the scope's side (TPC-H Q01 at SF 1:
    # the statement's CPU 2.2 -> 1.6 s). The target's hash table is built whole (no
    # filter from the scope reaches its scan): 0.02-0.03 s more where a grouped scope
    # holds 10-60 k of the 6 M line items, so ungrouped statements (TPC-H Q06, Q14)
    # keep the first form. PostgreSQL runs such a subquery once per row.
    scalar_links: bool = False
    # A statement over public tables with released rows in it (TPC-H Q20's 8,508 (part,
    # supplier, value) rows) reads them from list parameters unnested side by side
    # ($1, $2, …; proxy.analyze.staged.released_as_lists), not from a VALUES in its
    # text: DuckDB 2.0 parses and binds such a VALUES in 0.2–0.3 s, the lists in 5 ms.
    released_lists: bool = False


class Backend(ABC):
    """A database that holds the protected tables and the ``idp`` side tables.

    Each backend class declares its ``capabilities``. SQL passed to ``query`` and
    ``transaction`` uses ``%s`` placeholders; each backend adapts them.
    """

    capabilities: Capabilities  # the class's; an instance's after ``probe_capabilities``
    name: str
    row_identity: str  # a pseudo-column naming a row of a base table in one snapshot

    def __init__(self) -> None:
        self._active: dict[int, Any] = {}  # thread -> what ``_stop`` interrupts
        self._interrupts = threading.Lock()

    @classmethod
    @abstractmethod
    def from_url(cls, url: str, connections: int) -> Backend:
        """The backend at ``url``, a URL of its scheme (SPEC §3.1); ``connections``: the
        transactions it may run at once, where it runs them side by side."""

    @property
    def dialect(self) -> str:
        """The sqlglot dialect pushdown renders for (its capabilities')."""
        return self.capabilities.dialect

    def interrupt(self, owner: int) -> None:
        """Stop what the thread ``owner`` runs now and refuse its further transactions
        until ``forget_interrupt``: whether it is running, waiting for the backend, or
        between two transactions of one query, the query fails with QueryCanceled.
        Called from another thread."""
        with self._interrupts:
            interrupts.doom(owner)  # the stages above the backend stop too
            if owner in self._active:
                self._stop(self._active[owner])
                self._again_later(owner, self._active[owner])

    def _again_later(self, owner: int, handle: Any) -> None:
        """Interrupt ``handle`` again in a moment if ``owner`` still runs on it: DuckDB
        drops an interrupt that lands while it reads and plans a statement (it clears
        the flag as the statement starts to run), so one interrupt could leave a long
        statement running to its end (a cancel 20 ms into a 268 kB statement over a big
        table: 60 to 140 s)."""
        timer = threading.Timer(REPEAT_INTERRUPT, self._again, (owner, handle))
        timer.daemon = True
        timer.start()

    def _again(self, owner: int, handle: Any) -> None:
        with self._interrupts:
            if interrupts.doomed(owner) and self._active.get(owner) is handle:
                self._stop(handle)
                self._again_later(owner, handle)

    def forget_interrupt(self, owner: int) -> None:
        """The thread's query is over; its interrupt must not hit its next job."""
        with self._interrupts:
            interrupts.forget(owner)

    @contextmanager
    def _running(self, handle: Any) -> Iterator[None]:
        """Around each transaction: ``handle`` (a cursor, a connection) is what an
        interrupt of this thread stops meanwhile."""
        owner = threading.get_ident()
        with self._interrupts:
            if interrupts.doomed(owner):
                raise QueryCanceled("canceling statement due to user request")
            previous, self._active[owner] = self._active.get(owner), handle
        try:
            yield
        finally:
            with self._interrupts:
                if previous is None:
                    del self._active[owner]
                else:
                    self._active[owner] = previous

    def stopped(self, owner: int) -> bool:
        """Whether the query of thread ``owner`` was interrupted."""
        with self._interrupts:
            return interrupts.doomed(owner)

    def _stopped(self) -> bool:
        return interrupts.doomed(threading.get_ident())

    @abstractmethod
    def _stop(self, handle: Any) -> None:
        """Interrupt the statement running on ``handle`` (called with the interrupt lock
        held, from another thread)."""

    def query(self, sql: str, params: Sequence[Any] = (), durable: bool = True) -> list[tuple]:
        """Run one statement in its own transaction and return all rows (``durable``:
        as ``transaction``'s)."""
        with self.transaction(durable=durable) as tx:
            return tx.execute(sql, params)

    def read(self, sql: str, params: Sequence[Any] = ()) -> list[tuple]:
        """Run one read-only statement in a snapshot and return all rows: on DuckDB beside
        the writers instead of in their turn (a login, a budget shown, a release's scan
        would otherwise queue behind the debits)."""
        with self.transaction(snapshot=True) as tx:
            return tx.execute(sql, params)

    def query_with_columns(self, sql: str, params: Sequence[Any] = ()
                           ) -> tuple[list[tuple[str, str]], list[tuple]]:
        """Run a read-only statement; return its (column name, PostgreSQL type) pairs
        and its rows (in a snapshot: readers run side by side where the backend can)."""
        with self.transaction(snapshot=True) as tx:
            rows = tx.execute(sql, params)
            return tx.columns(), rows

    def column_types(self, table: str) -> list[tuple[str, str]]:
        """(name, PostgreSQL type) of a table's columns: its schema, never a row."""
        rows = self.read("SELECT column_name, data_type FROM information_schema.columns "
                         "WHERE table_name = %s AND table_schema = current_schema() "
                         "ORDER BY ordinal_position", (table,))
        return [(name, postgres_type(kind)) for name, kind in rows]

    @abstractmethod
    @contextmanager
    def transaction(self, snapshot: bool = False, durable: bool = True
                    ) -> Iterator[Transaction]:
        """A transaction that commits on success and rolls back on any exception.

        ``snapshot``: every read sees the same snapshot (REPEATABLE READ on PostgreSQL;
        DuckDB transactions always do). Writers keep READ COMMITTED, under which the
        ledger's conditional UPDATE re-checks the budget after waiting for a racer.
        ``durable=False``: a write whose loss in a crash costs budget, never privacy (an
        answer cache entry, the replays' audit rows) may commit without waiting for the
        disk where the store can tell the two apart (the SQLite store); others sync
        every commit."""

    def reading(self) -> AbstractContextManager[Transaction]:
        """A snapshot that only reads (the engine's view: the data version, the cache
        look-up, the statistics); a write in it fails where the backend can tell.
        PostgreSQL does not wait for its COMMIT's reply (``PostgresBackend.reading``);
        elsewhere ``transaction(snapshot=True)``."""
        return self.transaction(snapshot=True)

    def readable(self, tx: Transaction) -> bool:
        """Whether ``tx``, still open, can run further statements (a snapshot kept open
        across another transaction: the engine reads the cache and the statistics in one
        snapshot, with the ledger's debit committed in between)."""
        return True

    def ledger_store(self) -> Backend:
        """Where the ledger, the logins and the answer cache live when no ``--ledger``
        names a store: the backend itself, unless it keeps a store of its own beside
        it (closed with it)."""
        return self

    def attach(self, table: str, location: str) -> None:
        """Read ``table`` from the Parquet files at ``location`` (the rules' ``location``):
        only a backend whose tables may live in files outside any catalog (Spark) can."""
        raise NotSupported("location is read by the Spark backend only; this backend "
                           "reads its own tables")

    def probe_capabilities(self) -> None:
        """Set, on this instance, what its server can do beyond what its class declares
        (called once when an engine starts, before any statement is analysed)."""

    def track_versions(self, table: str) -> None:
        """Prepare cheap data versions for ``table`` (called once at start); where the
        backend cannot, ``data_version`` returns None for it."""

    @abstractmethod
    def data_version(self, tx: Transaction, table: str) -> str | None:
        """A key, read in ``tx`` without scanning the table, that changes whenever any
        row or column of ``table`` may have changed: the per-unit row bound c and the
        answer cache are keyed by it. None when only a scan can tell: then c is keyed
        by ``fingerprint_aggregates`` read over the whole table, and nothing is cached."""

    def watch_writes(self, poll_ms: int) -> None:
        """Start watching for writes made by others, where the backend can tell of them
        (PostgreSQL: the data triggers' counters, read every ``poll_ms``), so that
        ``quiet_mark`` need not be None; a server calls it once it serves."""

    def quiet_mark(self) -> int | None:
        """A mark that stays the same while nothing can have changed what the backend
        holds (data, ledger, answer cache): what was read under an unchanged mark is
        still current (``still_current``). None (the default): others may write it
        at any moment (other processes, other servers), so only the backend itself,
        asked again, can tell."""
        return None

    @abstractmethod
    def fingerprint_aggregates(self, unit: str, integer: bool) -> list[exp.Expression]:
        """Aggregates over every row that change whenever the multiset of unit values
        does (for relations without a data version)."""

    @staticmethod
    def fingerprint_text(values: Sequence[Any]) -> str:
        return ":".join(str(value) for value in values)

    def probe(self) -> None:
        """Connect once at start, for the owner (the command line), and say what stops
        it and what to run; nothing by default (an embedded backend opened already)."""

    @abstractmethod
    def close(self) -> None: ...


class Transaction(ABC):
    def __init__(self, stopped: Callable[[], bool]) -> None:
        self._stopped = stopped
        # ``ahead``: (sql, params) -> (rows, columns) read with an earlier statement
        self._early: dict[tuple, tuple[list[tuple], list[tuple[str, str]]]] = {}

    def execute(self, sql: str, params: Sequence[Any] = ()) -> list[tuple]:
        """Run one statement, unless the transaction was interrupted: a cancel that
        reaches the database between two statements would otherwise be lost. One sent
        ``ahead`` and read already is answered from what was read, with no round trip."""
        if self._stopped():
            raise QueryCanceled("canceling statement due to user request")
        if self._early:
            early = self._early.pop((sql, tuple(params)), None)
            if early is not None:
                self._read_early(early[1])
                return early[0]
        return self._execute(sql, params)

    def read_columns(self, sql: str) -> tuple[int, list[Sequence[Any]]]:
        """``execute`` read column by column: (the number of rows, each column's values);
        no columns where no row came back (the rows do not say how many). A backend
        that can reads them without a Python tuple per row (DuckDB: ``Columns``)."""
        rows = self.execute(sql)
        return len(rows), list(zip(*rows))

    def ahead(self, sql: str, params: Sequence[Any] = ()) -> None:
        """``sql`` is likely to be executed in this transaction later: a backend that
        pipelines (PostgreSQL) sends it with the next statement, in the same round trip,
        and a later ``execute`` of the same text and parameters returns what it read.
        Only for reads in a read-only snapshot (``Backend.reading``), where a statement
        reads the same rows whenever it runs; elsewhere nothing is sent early (the
        default): the later ``execute`` runs it."""

    def _read_early(self, columns: list[tuple[str, str]]) -> None:
        """A statement sent ahead is the last one run: its ``columns`` are the result's."""

    def end_with(self, statements: Sequence[tuple[str, Sequence[Any]]]) -> bool:
        """End this read-only snapshot and run ``statements`` as a write transaction of
        their own that is not durable (``Backend.transaction(durable=False)``), on the
        same connection, where the backend can (PostgreSQL: one pipeline, one round trip,
        no second connection from the pool); nothing may run in this transaction after.
        False (the default): nothing was done, the caller runs them itself."""
        return False

    @abstractmethod
    def _execute(self, sql: str, params: Sequence[Any]) -> list[tuple]: ...

    @abstractmethod
    def batches(self, sql: str, size: int) -> Iterator[list[tuple]]:
        """The rows of one statement, ``size`` at a time (for results too large to hold:
        a release's output); nothing else may run in the transaction meanwhile."""

    @abstractmethod
    def append(self, table: str, columns: Sequence[Sequence[Any]]) -> None:
        """Insert many rows into ``table`` (already quoted), given column by column."""

    @abstractmethod
    def columns(self) -> list[tuple[str, str]]:
        """(name, PostgreSQL type name) of each column of the last statement's result."""


def still_current(backend: Backend, mark: int | None, read_at: float, window_ms: int) -> bool:
    """Whether a value read from ``backend`` at ``time.monotonic()`` ``read_at``, under
    its ``quiet_mark`` ``mark`` (taken before the read began), may be used instead of
    reading it again: nothing can have been written since, or the rules'
    ``replay_window_ms`` allows that much staleness."""
    if mark is not None and mark == backend.quiet_mark():
        return True
    return window_ms > 0 and time.monotonic() - read_at <= window_ms / 1000


class Nullable:
    """A column of integers with NULLs, read without a Python object per value: the
    values (0 where NULL, 64-bit) and which are not NULL."""

    __slots__ = ("values", "valid")

    def __init__(self, values, valid) -> None:
        self.values, self.valid = values, valid

    def __len__(self) -> int:
        return len(self.values)

    def tolist(self) -> list:
        return [value if ok else None
                for value, ok in zip(self.values.tolist(), self.valid.tolist())]
