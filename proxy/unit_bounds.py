"""The per-unit row bound c of iDP (SPEC §5.2), kept beside the ledger per data version.

c, the largest number of (joined) rows one unit owns, is a ``GROUP BY unit`` over the
whole table: at 10 M rows 0.6 s on DuckDB and 8 s on PostgreSQL, paid by the first
user-level query after every start of the proxy while it was kept in memory only. It
is a function of the data and of the statement that computes it, so it is kept in
``idp.unit_bounds`` keyed by both: a digest of the bound's SQL (which names the table,
its unit column, the links and joined tables the rules give, and the dialect) and the
data version it was read at (``Backend.data_version``; for a backend without one, the
unit column's fingerprint, as the engine keys it in memory). The same key therefore
always holds the same c, whichever process reads it, and a write to the table gives a
new version and so a new key: the first query after it computes c again and prunes the
table's older entries, as the answer cache does.

The entries are the proxy's own, in its store (never shown to an analyst): c enters
every user-level answer's calibration exactly as when it is computed in place, so
nothing released changes. A lost entry (a crash before it is written: it is written
without waiting for durability) only means c is computed again.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable

from proxy.backends.base import Backend
from proxy.errors import KeyTaken

_SCHEMA = ("CREATE TABLE IF NOT EXISTS idp.unit_bounds (bound_sql TEXT NOT NULL, "
           "version TEXT NOT NULL, table_name TEXT NOT NULL, bound BIGINT NOT NULL, "
           "PRIMARY KEY (bound_sql, version))")


class UnitBounds:
    def __init__(self, store: Backend) -> None:
        self.store = store
        store.query(_SCHEMA)

    def bound(self, table: str, sql: str, version: str, compute: Callable[[str], int]) -> int:
        """c for the bound statement ``sql`` at ``version``: the kept one, else
        ``compute(sql)``, kept for every later process."""
        digest = hashlib.sha256(sql.encode()).hexdigest()
        rows = self.store.read("SELECT bound FROM idp.unit_bounds WHERE bound_sql = %s "
                               "AND version = %s", (digest, version))
        if rows:
            return int(rows[0][0])
        found = compute(sql)
        try:
            # not durable: an entry lost in a crash is computed again, nothing else
            with self.store.transaction(durable=False) as tx:
                tx.execute("DELETE FROM idp.unit_bounds WHERE table_name = %s "
                           "AND bound_sql = %s AND version <> %s", (table, digest, version))
                tx.execute("INSERT INTO idp.unit_bounds (bound_sql, version, table_name, "
                           "bound) VALUES (%s, %s, %s, %s)", (digest, version, table, found))
        except KeyTaken:  # a racing session computed the same c first
            pass
        return found
