"""Databases for the tests: a new database on the suite's PostgreSQL server, and
tables loaded with the same rows into any backend (DuckDB, PostgreSQL, Spark)."""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

import duckdb
import psycopg
from sqlglot import exp


@contextmanager
def new_database(postgres_url: str):
    """A new empty database on the shared server, dropped afterwards."""
    name = f"t{os.getpid()}_{time.monotonic_ns()}"
    with psycopg.connect(postgres_url, autocommit=True) as con:
        # FILE_COPY (PostgreSQL 15) copies the template's files: 11 ms against 23 ms for
        # the default, which writes them through the WAL (the suite makes hundreds).
        copy = " STRATEGY FILE_COPY" if con.info.server_version >= 150000 else ""
        con.execute(f'CREATE DATABASE "{name}"{copy}')
    yield postgres_url.rsplit("/", 1)[0] + f"/{name}"
    with psycopg.connect(postgres_url, autocommit=True) as con:
        con.execute(f'DROP DATABASE "{name}" WITH (FORCE)')


@contextmanager
def postgres_truth(postgres_url: str, tables: dict, then: tuple[str, ...] = ()):
    """PostgreSQL's own answer to a statement, as a function of its text, over
    ``tables`` (name -> (columns, types)) loaded into a new database and ``then`` run
    after (what no Python value holds: ±infinity)."""
    with new_database(postgres_url) as url:
        for name, (columns, types) in tables.items():
            load_table(url, name, columns, types)
        with psycopg.connect(url, autocommit=True) as con:
            for statement in then:
                con.execute(statement)
            yield lambda sql: con.execute(sql).fetchall()


def load_table(url: str, table: str, columns: dict[str, list], types: dict[str, str],
               location: str | None = None) -> None:
    """Create ``table`` with the given columns and rows in any backend; on Spark with
    ``location``, as Parquet files there instead (the rules' ``location``: another
    process's Sail session sees no table this one creates)."""
    names = list(columns)
    rows = list(zip(*columns.values()))
    ddl = f'CREATE TABLE "{table}" (' + ", ".join(f'"{n}" {types[n]}' for n in names) + ")"
    if url.startswith("duckdb"):
        path = Path(url.removeprefix("duckdb:///"))
        key = _DUCKDB_LOADS.restore(path, repr((table, columns, types)))
        if key == "":
            return
        con = duckdb.connect(str(path))
        con.execute(ddl)
        if rows:  # one statement: the columns travel as list parameters and are unnested
            unnest = ", ".join(f"unnest(${i + 1}::{types[n]}[])" for i, n in enumerate(names))
            con.execute(f'INSERT INTO "{table}" SELECT {unnest}', list(columns.values()))
        con.close()
        _DUCKDB_LOADS.remember(path, key)
        return
    if url.startswith("sc://"):
        schema = ", ".join(f"`{name}` {exp.DataType.build(types[name], dialect='postgres').sql('spark')}"
                           for name in names)
        frame = spark_session(url).createDataFrame(rows, schema=schema)
        if location is None:
            frame.write.saveAsTable(table)
        else:
            frame.write.parquet(location)
        return
    with psycopg.connect(url, autocommit=True) as con:
        con.execute(ddl)
        with con.cursor() as cur, cur.copy(f'COPY "{table}" FROM STDIN') as copy:
            for row in rows:
                copy.write_row(row)


def execute(url: str, sql: str) -> None:
    """Run ``sql`` (statements separated by semicolons) on a DuckDB file or PostgreSQL."""
    if url.startswith("duckdb"):
        with duckdb.connect(url.removeprefix("duckdb:///")) as con:
            con.execute(sql)
    else:
        with psycopg.connect(url, autocommit=True) as con:
            con.execute(sql)


def refill(con, table: str, rows) -> None:
    """Replace the rows of a DuckDB ``table`` by ``rows`` (tuples in the table's column
    order): the brute-force tests reload their tables for every neighbour, and
    ``executemany`` inserts row by row, three times the CPU of one multi-row INSERT."""
    con.execute(f"DELETE FROM {table}")
    rows = list(rows)
    for start in range(0, len(rows), 500):
        chunk = rows[start:start + 500]
        marks = "(" + ", ".join("?" * len(chunk[0])) + ")"
        con.execute(f"INSERT INTO {table} VALUES " + ", ".join([marks] * len(chunk)),
                    [value for row in chunk for value in row])


def spark_session(url: str):
    """The process's Spark Connect session (as the Spark backend's: Sail keeps tables in
    a catalog per session)."""
    from pyspark.sql import SparkSession

    return SparkSession.builder.remote(url).getOrCreate()


class _LoadedFiles:
    """DuckDB files as load_table left them, by the loads that made them: opening and
    closing a DuckDB file costs about 25 ms, copying a loaded one 0.4 ms, and most tests
    load the same few tables into a fresh file. A file is known only while it is as the
    last load left it (same size and mtime); once anything else wrote it, loads into it
    are made for real again."""

    def __init__(self) -> None:
        self._state: dict[Path, tuple[str, tuple[int, int]]] = {}  # path -> (key, stat)

    def restore(self, path: Path, load: str) -> str | None:
        """Make ``path`` what ``load`` would make of it from a copy and return "", or
        return the key to remember the caller's own load by (None: do not remember)."""
        known = self._state.pop(path, None)
        if path.exists() and (known is None or known[1] != _stamp(path)):
            return None  # written by someone else since: not ours to predict
        before = known[0] if known and path.exists() else ""
        key = hashlib.sha256((before + "\0" + load).encode()).hexdigest()
        if not self._copy(key).exists():
            return key
        shutil.copyfile(self._copy(key), path)
        self._state[path] = (key, _stamp(path))
        return ""

    def remember(self, path: Path, key: str | None) -> None:
        if key is not None:
            self._copy(key).parent.mkdir(exist_ok=True)
            shutil.copyfile(path, self._copy(key))
            self._state[path] = (key, _stamp(path))

    @staticmethod
    def _copy(key: str) -> Path:
        return Path(tempfile.gettempdir()) / "idp-loaded" / f"{key}.duckdb"


def _stamp(path: Path) -> tuple[int, int]:
    status = path.stat()
    return status.st_size, status.st_mtime_ns


_DUCKDB_LOADS = _LoadedFiles()
