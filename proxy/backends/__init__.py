"""Backends: where the data lives and where every statistic is computed.

A backend runs SQL text that pushdown/ generated for its dialect and returns the few
statistic rows; it also hosts the ledger's side tables. Errors are translated so that
the backend's own text never reaches an analyst (SPEC §9).
"""

from __future__ import annotations

from proxy.backends.base import Backend
from proxy.errors import ProxyError


def open_backend(url: str, connections: int = 4) -> Backend:
    """Open a backend from a URL of SPEC §3.1 (the embedded demo: proxy.demo.open_demo);
    a PostgreSQL backend runs up to ``connections`` transactions at once."""
    if url.startswith("duckdb://"):
        from proxy.backends.duckdb_backend import DuckDBBackend

        return DuckDBBackend.from_url(url)
    if url.startswith(("postgresql://", "postgres://")):
        from proxy.backends.postgres_backend import PostgresBackend

        return PostgresBackend(url, connections)
    if url.startswith("sc://"):
        from proxy.backends.spark_backend import SparkBackend

        return SparkBackend(url)
    raise ProxyError(
        f"unsupported backend URL {url!r}; use duckdb:///path/file.duckdb, duckdb:///:memory: "
        "postgresql://user@host:port/db or sc://host:port (Spark Connect)",
        "22023",
    )


__all__ = ["Backend", "open_backend"]
