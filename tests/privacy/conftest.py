"""Fixtures the brute-force tests of the ranked mechanisms share."""

import duckdb
import pytest


@pytest.fixture(scope="module")
def unit_table():
    """An in-memory DuckDB holding the empty table ``t`` of ``harness.unit_table_rules``,
    which each data set refills."""
    connection = duckdb.connect()
    connection.execute("CREATE TABLE t (unit BIGINT, v DOUBLE, w INTEGER, k TEXT)")
    yield connection
    connection.close()
