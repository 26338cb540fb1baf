"""Backend hardening (SPEC §9): no SQL reaches files, settings stay locked, and the
backend's own error text never reaches the analyst."""

from __future__ import annotations

import pytest
from sqlglot import exp

from proxy.analyze import analyze, parse_statements
from proxy.backends import SCHEMES, Backend, Capabilities, backend_class, open_backend
from proxy.errors import BackendFailed, ProxyError, Refused
from proxy.rules import parse_rules
from proxy.settings import Settings


@pytest.mark.parametrize("sql", [
    "SELECT * FROM read_csv('/etc/passwd')",
    "COPY (SELECT 1) TO '/tmp/idp-proxy-should-not-exist.csv'",
    "ATTACH '/tmp/other.duckdb' AS other",
    "INSTALL httpfs",
])
def test_duckdb_cannot_reach_files_or_other_databases(duckdb_url, sql):
    backend = open_backend(duckdb_url)
    with pytest.raises(BackendFailed) as failed:
        backend.query(sql)
    assert failed.value.message == "the backend could not run this query"


def test_duckdb_configuration_is_locked(duckdb_url):
    backend = open_backend(duckdb_url)
    with pytest.raises(BackendFailed):
        backend.query("SET enable_external_access = true")
    with pytest.raises(BackendFailed):
        backend.query("SELECT * FROM read_csv('/etc/passwd')")


def test_a_duckdb_memory_limit_from_the_url_and_locked(duckdb_url):
    backend = open_backend(f"{duckdb_url}?memory_limit=300MB")
    assert backend.query("SELECT current_setting('memory_limit')") == [("286.1 MiB",)]
    with pytest.raises(BackendFailed):
        backend.query("SET memory_limit = '10GB'")
    for bad in ("?memory_limit=lots", "?threads=2"):
        with pytest.raises(BackendFailed) as refused:
            open_backend(f"{duckdb_url}{bad}")
        assert refused.value.sqlstate == "22023" and "memory_limit=2GB" in refused.value.message


def test_unsupported_backend_url():
    with pytest.raises(ProxyError) as error:
        open_backend("mysql://x")
    assert "duckdb:///" in error.value.message


@pytest.mark.parametrize("scheme", sorted(SCHEMES))
def test_each_scheme_names_a_backend_that_says_what_it_can_do_unopened(scheme):
    """The command line reads a URL's capabilities before anything is opened (nothing
    listens at port 1), and pushdown renders its SQL in their dialect."""
    backend = backend_class(f"{scheme}://127.0.0.1:1/x")
    assert issubclass(backend, Backend) and isinstance(backend.capabilities, Capabilities)
    assert exp.select("1").sql(dialect=backend.capabilities.dialect) == "SELECT 1"


RULES = parse_rules("[tables.regions]\npublic = true\n")


@pytest.mark.parametrize("sql", [
    "SELECT pg_read_file('/etc/passwd') FROM regions",
    "SELECT current_setting('data_directory') FROM regions",
    "SELECT my_function(region) FROM regions",
])
def test_public_passthrough_runs_no_system_function(sql):
    with pytest.raises(Refused):
        analyze(parse_statements(sql)[0], RULES, Settings())


@pytest.mark.parametrize("which", ["duckdb", "postgres"])
def test_read_columns_gives_the_rows_values_column_by_column(which, request):
    """``Transaction.read_columns``: the values ``execute`` gives, column by column (DuckDB
    reads integer and text columns through Arrow: numpy's int64 where a column's values
    fit, ``Nullable`` with NULLs, Python integers past 64 bits, a HUGEINT sum as the
    same integers); another type, and no rows, as the rows are."""
    import numpy as np

    from proxy.backends.base import Nullable

    url = request.getfixturevalue("duckdb_url" if which == "duckdb" else "fresh_postgres")
    backend = open_backend(url)
    big = 2**62
    with backend.transaction() as tx:
        tx.execute("CREATE TABLE t (k BIGINT, j INTEGER, v BIGINT, s TEXT, d DATE)")
        for row in [(1, 3, big, "a", "2020-01-02"), (1, 3, big, "b", "2020-01-03"),
                    (2, None, -5, "c", "2020-01-04"), (3, 7, -big, None, None),
                    (3, 7, -big, "é", "2021-02-03"), (4, 1, 2**40, "d", "2020-05-06")]:
            tx.execute("INSERT INTO t VALUES (%s, %s, %s, %s, %s)", row)

    def listed(column):
        return column.tolist() if isinstance(column, (np.ndarray, Nullable)) else list(column)

    statements = {
        "grouped": "SELECT k, j, SUM(v) AS e, COUNT(*) AS n, MIN(s) AS s FROM t "
                   "GROUP BY k, j ORDER BY k",
        "fits": "SELECT k, j, SUM(v) AS e FROM t WHERE k IN (2, 4) GROUP BY k, j ORDER BY k",
        "dated": "SELECT k, MIN(d) AS d FROM t GROUP BY k ORDER BY k",
        "empty": "SELECT k, SUM(v) AS e FROM t WHERE k > 10 GROUP BY k",
    }
    with backend.reading() as tx:
        for name, sql in statements.items():
            rows = tx.execute(sql)
            size, columns = tx.read_columns(sql)
            assert size == len(rows), name
            if not rows:
                assert all(len(column) == 0 for column in columns), name
                continue
            assert [listed(column) for column in columns] == [list(c) for c in zip(*rows)]
            for column, expected in zip(columns, zip(*rows)):
                assert [type(v) for v in listed(column)] == [type(v) for v in expected]
            if which == "duckdb" and name == "fits":
                assert isinstance(columns[0], np.ndarray) and isinstance(columns[1], Nullable)
                assert isinstance(columns[2], np.ndarray)  # a HUGEINT sum within 64 bits
    assert sum(row[2] for row in backend.read(statements["grouped"])
               if row[0] == 1) == 2**63  # past 64 bits: Python's integers
    backend.close()
