"""``COPY (query) TO STDOUT`` (issue 15 item 4), driven by psql's ``\\copy`` itself and by
psycopg's COPY support: the aggregate is answered and charged like the query alone;
COPY of raw rows or to a file stays refused, free."""

from __future__ import annotations

import csv
import shutil
import subprocess

import psycopg
import pytest


def remaining(con) -> str:
    return con.execute("SHOW idp.budget").fetchone()[0]


def test_psql_copy_writes_one_noisy_count_and_is_charged(proxy, tmp_path):
    psql = shutil.which("psql")
    assert psql, "psql is installed with PostgreSQL's client package"
    with psycopg.connect(proxy.dsn("alice"), autocommit=True) as con:
        before = remaining(con)
    out = tmp_path / "x.csv"
    run = subprocess.run(
        [psql, "-X", proxy.dsn("alice", sslmode="disable"), "-c",
         f"\\copy (SELECT COUNT(*) FROM people WHERE age > 30) TO '{out}' csv"],
        capture_output=True, text=True, timeout=60, check=False)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "COPY 1"
    [[count]] = list(csv.reader(out.open()))
    assert 0 <= int(count) <= 4000
    with psycopg.connect(proxy.dsn("alice"), autocommit=True) as con:
        after = remaining(con)
        assert after != before  # charged like the query itself
        # the same query again is the cached answer: the same count, nothing spent
        assert con.execute("SELECT COUNT(*) FROM people WHERE age > 30").fetchone()[0] \
            == int(count)
        assert remaining(con) == after


def test_copy_formats_headers_and_catalog_queries(proxy):
    with psycopg.connect(proxy.dsn("alice"), autocommit=True) as con:
        with con.cursor() as cur:
            with cur.copy("COPY (SELECT region, COUNT(*) AS n FROM people GROUP BY region) "
                          "TO STDOUT WITH (FORMAT csv, HEADER)") as copy:
                text = b"".join(bytes(chunk) for chunk in copy).decode()
            lines = text.splitlines()
            assert lines[0] == "region,n"
            assert sorted(line.split(",")[0] for line in lines[1:]) == [
                "east", "north", "south", "west"]
            # a catalog (constant) query: text format escapes, NULL is \N
            with cur.copy("COPY (SELECT 'a' || chr(9) || 'b', NULL::text, '') TO STDOUT") \
                    as copy:
                assert b"".join(bytes(c) for c in copy) == b"a\\tb\t\\N\t\n"
            with cur.copy("COPY (SELECT 'x,y', NULL::text, '', 'q\"') TO STDOUT CSV") as copy:
                assert b"".join(bytes(c) for c in copy) == b'"x,y",,"","q"""\n'
        before = remaining(con)
        for refused, sqlstate in [
            ("COPY people TO STDOUT", "42501"),
            ("COPY (SELECT * FROM people) TO STDOUT", "42501"),
            ("COPY (SELECT COUNT(*) FROM people) TO STDOUT (FORMAT binary)", "0A000"),
        ]:
            with pytest.raises(psycopg.Error) as error, con.cursor().copy(refused) as copy:
                list(copy)
            assert error.value.sqlstate == sqlstate, (refused, error.value)
        assert remaining(con) == before
