"""Backends: where the data lives and where every statistic is computed.

A backend runs SQL text that pushdown/ generated for its dialect and returns the few
statistic rows; it also hosts the ledger's side tables, or names the store that does
(``Backend.ledger_store``: the embedded DuckDB's is a SQLite file beside it,
sqlite_store.py). Errors are translated so that
the backend's own text never reaches an analyst (SPEC §9).

A backend is one module here, a ``Backend`` subclass (base.py) that declares its
``Capabilities`` and opens itself ``from_url``, and one row of ``SCHEMES`` below for
the URL scheme that opens it (with its own sqlglot dialect beside it where sqlglot's
needs fixing: spark_dialect.py). The engine, pushdown, the ledger and the command line
ask the capabilities, never which backend it is.
"""

from __future__ import annotations

import importlib

from proxy.backends.base import Backend, Capabilities, GroupedRanks
from proxy.errors import ProxyError

# URL scheme -> the module of its backend and the class in it, imported when a URL of
# the scheme is first used: a backend's client library loads only then (pyspark is an
# optional dependency).
SCHEMES: dict[str, tuple[str, str]] = {
    "duckdb": ("proxy.backends.duckdb_backend", "DuckDBBackend"),
    "postgresql": ("proxy.backends.postgres_backend", "PostgresBackend"),
    "postgres": ("proxy.backends.postgres_backend", "PostgresBackend"),
    "sc": ("proxy.backends.spark_backend", "SparkBackend"),  # Spark Connect
}


def backend_class(url: str) -> type[Backend]:
    """The backend that a URL of SPEC §3.1 opens, by its scheme, not connected: its
    ``capabilities`` say what it can do before anything is opened."""
    scheme, separator, _ = url.partition("://")
    if not separator or scheme not in SCHEMES:
        raise ProxyError(
            f"unsupported backend URL {url!r}; use duckdb:///path/file.duckdb, "
            "duckdb:///:memory: postgresql://user@host:port/db or sc://host:port "
            "(Spark Connect)", "22023")
    module, name = SCHEMES[scheme]
    return getattr(importlib.import_module(module), name)


def open_backend(url: str, connections: int = 4) -> Backend:
    """Open a backend from a URL of SPEC §3.1 (the embedded demo: proxy.demo.open_demo);
    one that runs transactions side by side (PostgreSQL) runs up to ``connections``."""
    return backend_class(url).from_url(url, connections)


__all__ = ["SCHEMES", "Backend", "Capabilities", "GroupedRanks", "backend_class",
           "open_backend"]
