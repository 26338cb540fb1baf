"""The PostgreSQL backend's connections: a bounded pool, one transaction per connection."""

from __future__ import annotations

import select
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import psycopg
from psycopg import generators, pq


class ConnectionPool:
    """At most ``size`` connections lent at once; a transaction waits for a free one.

    A connection goes back to the pool only when it is open, idle (no transaction left
    open or aborted; or a read-only snapshot's COMMIT sent with its reply unread,
    ``end_later``, read before it is lent again) and no cancel was sent on it; any other
    is closed, and a new one is opened when needed. A PostgreSQL cancel request is
    asynchronous: it can arrive after the statement it was sent for has ended and would
    then cancel whatever that connection runs next (another session's statement, a
    ledger COMMIT). A connection a cancel was sent on is therefore never lent again, and
    a late cancel finds its server process gone.

    A thread that already holds a connection (a transaction inside a transaction) gets a
    further one beyond the bound: it would otherwise wait for itself.

    A transaction that finds no idle connection opens one itself, so while the database is
    away a query fails with 08006 as soon as its own connection attempt does (refused: at
    once), and the first after it is back is answered (docs/budget.md, "Backend outage").

    Why not psycopg's ``psycopg_pool`` (evaluated: psycopg-pool 3.3.3, real PostgreSQL). It
    carries the cancel rule (a connection closed before ``putconn`` is dropped and
    replaced), but not the other two:

    - nesting: its ``max_size`` bounds every ``getconn``, so a thread holding a connection
      that asks for another waits like any other; when every connection is held that way
      (the engine keeps a query's snapshot open across the ledger's debit) all wait until
      ``PoolTimeout``. Carrying it takes this class's semaphore and per-thread count in
      front of a pool sized for the deepest nesting: this class again, over a second one;
    - an outage: it connects in background workers that retry with backoff (1 s, 2 s,
      4 s, ... for up to ``reconnect_timeout``, 5 minutes); a waiting transaction never
      sees the connection error, only ``PoolTimeout`` at the end of its ``timeout``, which
      a pool that is merely busy (long queries on every connection) raises too. Measured:
      with the server stopped, each request waited out its whole timeout; once the server
      was back, the first connection came 2.9 s later.
    """

    def __init__(self, connect: Callable[[], psycopg.Connection], size: int) -> None:
        if size < 1:
            raise ValueError(f"a connection pool needs at least one connection, not {size}")
        self._connect = connect
        self._slots = threading.BoundedSemaphore(size)
        self._idle: list[psycopg.Connection] = []
        self._discarded: set[psycopg.Connection] = set()
        self._ending: set[psycopg.Connection] = set()  # a statement's reply not read yet
        self._lock = threading.Lock()
        self._held = threading.local()  # .count: connections this thread holds

    @contextmanager
    def connection(self) -> Iterator[psycopg.Connection]:
        held = getattr(self._held, "count", 0)
        if not held:
            self._slots.acquire()
        self._held.count = held + 1
        try:
            con = self._take()
            try:
                yield con
            finally:
                self._give_back(con)
        finally:
            self._held.count = held
            if not held:
                self._slots.release()

    def discard(self, con: psycopg.Connection) -> None:
        """Never lend ``con`` again (called when a cancel is sent on it)."""
        with self._lock:
            self._discarded.add(con)

    def reusable(self, con: psycopg.Connection) -> bool:
        """Open and not discarded: worth a ROLLBACK to make it idle again."""
        with self._lock:
            return con not in self._discarded and not con.closed

    def clear(self) -> None:
        """Close the idle connections (the server went away: they are dead too)."""
        with self._lock:
            idle, self._idle = self._idle, []
            self._ending.difference_update(idle)
        for con in idle:
            con.close()

    def end_later(self, con: psycopg.Connection, statement: bytes) -> None:
        """Send ``statement`` (a read-only snapshot's COMMIT) on ``con`` without waiting
        for its reply: the connection goes back to the pool with the reply unread, and
        ``_take`` reads it before lending the connection again (one round trip fewer on
        the way to the analyst). A connection it failed on is closed there."""
        con.pgconn.send_query(statement)
        con.wait(generators.send(con.pgconn))
        with self._lock:
            self._ending.add(con)

    def _ended(self, con: psycopg.Connection) -> bool:
        """Read the reply ``end_later`` left: whether all went well and ``con`` is idle."""
        try:
            replies = con.wait(generators.fetch_many(con.pgconn))
        except (psycopg.Error, OSError):
            return False
        return (all(reply.status == pq.ExecStatus.COMMAND_OK for reply in replies)
                and con.info.transaction_status == pq.TransactionStatus.IDLE)

    def _take(self) -> psycopg.Connection:
        """An idle connection that the server has not ended, else a new one. An idle
        connection has nothing to read unless its server process said goodbye (a
        restart, a terminated backend): such a one is closed, not lent, or the first
        query after an outage would fail on it (one worker may see no query during
        the outage, so no failure cleared its pool). The most recently idle connection
        with no reply left unread comes first: one given back with its COMMIT just sent
        (``end_later``) would make the taker wait for that reply (the next transaction
        of the same thread comes at once: a fresh answer's cache entry did, 5 % of its
        samples under 32 clients, before it ended its view itself)."""
        while True:
            with self._lock:
                if not self._idle:
                    break
                at = next((i for i in range(len(self._idle) - 1, -1, -1)
                           if self._idle[i] not in self._ending), len(self._idle) - 1)
                con = self._idle.pop(at)
                ending = con in self._ending
                self._ending.discard(con)
            if (not ending or self._ended(con)) and not select.select([con.fileno()], [],
                                                                      [], 0)[0]:
                return con
            con.close()
        return self._connect()

    def _give_back(self, con: psycopg.Connection) -> None:
        with self._lock:
            keep = (con not in self._discarded and not con.closed
                    and (con.info.transaction_status == pq.TransactionStatus.IDLE
                         or con in self._ending))
            self._discarded.discard(con)
            if not keep:
                self._ending.discard(con)
            if keep:
                self._idle.append(con)
                return
        con.close()
