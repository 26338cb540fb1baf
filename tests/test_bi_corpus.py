"""The SQL that BI tools send for a bar chart, a time series and a big number (and a raw
table view, which must stay refused), kept verbatim in tests/bi/ (tests/bicorpus.py
reads it), run through ``idp-proxy serve`` over the demo's tables on both backends.

PENDING lists the statements that need analyser features not built yet (issue 16):
they are expected to be answered, and are marked xfail(strict=True) here, so that the
test fails as soon as the analyser answers one of them: then take it out of PENDING.
"""

from __future__ import annotations

import asyncio
import datetime as dt

import asyncpg
import psycopg
import pytest

from tests.bicorpus import CORPUS, read_entry

pytestmark = pytest.mark.postgres

# file -> the analyser feature it waits for
PENDING: dict[str, str] = {}


ENTRIES = sorted(CORPUS.glob("*.sql"))


def test_the_corpus_covers_each_tool_and_chart():
    names = {path.name for path in ENTRIES}
    for tool in ("superset", "metabase", "grafana"):
        assert any(name.startswith(tool) for name in names), tool
    assert set(PENDING) <= names
    for path in ENTRIES:
        entry = read_entry(path)
        assert entry.sql.strip() and (entry.expect == "answered") == (entry.sqlstate is None)
        assert path.name not in PENDING or entry.expect == "answered"


@pytest.mark.parametrize("path", [
    pytest.param(path, id=path.stem, marks=[pytest.mark.xfail(
        strict=True, reason=f"pending in the analyser: {PENDING[path.name]}")]
                 if path.name in PENDING else [])
    for path in ENTRIES])
def test_each_statement_is_answered_or_refused_as_recorded(demo_server, path):
    entry = read_entry(path)
    with psycopg.connect(demo_server.dsn("alice"), autocommit=True) as con:
        before = con.execute("SHOW idp.budget").fetchone()
        if entry.expect == "answered":
            rows = con.execute(entry.sql).fetchall()
            assert rows, entry.name
            return
        with pytest.raises(psycopg.Error) as refused:
            con.execute(entry.sql)
        error = refused.value
        assert error.sqlstate == entry.sqlstate, (entry.name, str(error))
        assert len(error.diag.message_primary.splitlines()) == 1
        assert con.execute("SHOW idp.budget").fetchone() == before


def test_the_session_s_time_zone_is_read_as_postgresql_reads_it(demo_server):
    """Metabase's report time zone (``SET SESSION TIMEZONE TO …``) and a driver's startup
    TimeZone: reported back, a moment's day is the zone's (Berlin's midnights around its
    2024 spring change) and shown in it; an unknown zone is refused in one line, the
    session kept."""
    sql = ("SELECT date_trunc('day', visited_at::timestamptz) AS d, COUNT(*) FROM visits "
           "WHERE visited_at >= '2024-03-30' AND visited_at < '2024-04-02' GROUP BY 1")
    berlin = {dt.datetime(2024, 3, 29, 23, tzinfo=dt.UTC),
              dt.datetime(2024, 3, 30, 23, tzinfo=dt.UTC),
              dt.datetime(2024, 3, 31, 22, tzinfo=dt.UTC)}
    with psycopg.connect(demo_server.dsn("alice"), autocommit=True) as con:
        assert {row[0] for row in con.execute(sql)} == {
            dt.datetime(2024, 3, d, tzinfo=dt.UTC) for d in (30, 31)} | {
            dt.datetime(2024, 4, 1, tzinfo=dt.UTC)}
        con.execute("SET SESSION TIMEZONE TO 'europe/berlin'")
        assert con.info.parameter_status("TimeZone") == "Europe/Berlin"
        assert con.execute("SHOW TimeZone").fetchone() == ("Europe/Berlin",)
        assert {row[0] for row in con.execute(sql)} == berlin
        shown = con.pgconn.exec_(sql.encode())  # as text: in the zone, as psql shows it
        assert {shown.get_value(i, 0).decode() for i in range(shown.ntuples)} == {
            "2024-03-30 00:00:00+01", "2024-03-31 00:00:00+01", "2024-04-01 00:00:00+02"}
        before = con.execute("SHOW idp.budget").fetchone()
        with pytest.raises(psycopg.Error) as refused:
            con.execute("SET TIME ZONE 'Mars/Olympus'")
        assert refused.value.sqlstate == "22023" and "IANA" in str(refused.value)
        assert con.execute("SHOW idp.budget").fetchone() == before
        assert con.execute("SHOW TimeZone").fetchone() == ("Europe/Berlin",)
    with psycopg.connect(demo_server.dsn("alice"), autocommit=True) as con:  # one message
        cursor = con.execute(f"SET TIME ZONE 'Europe/Berlin'; {sql}")
        assert cursor.nextset() and {row[0] for row in cursor} == berlin

    async def started_in_berlin() -> set:
        con = await asyncpg.connect(host="127.0.0.1", port=demo_server.port, user="alice",
                                    database="demo",
                                    server_settings={"TimeZone": "Europe/Berlin"})
        try:
            return {row[0] for row in await con.fetch(sql)}
        finally:
            await con.close()

    assert asyncio.run(started_in_berlin()) == berlin


def test_a_list_parameter_is_the_in_list_it_stands_for(demo_server):
    """psycopg and asyncpg bind a Python list as one array parameter (``= ANY(%s)``,
    ``<> ALL($1)``; text and binary): the answer is the IN list's own — its groups exactly
    the listed keys, the same released rows (one canonical statement: a replay, nothing
    spent) — and asyncpg's type introspection of the array reaches the catalog."""
    listed = ["cardiology", "oncology"]
    sql = "SELECT department, COUNT(*) FROM visits WHERE department {} GROUP BY 1 ORDER BY 1"
    with psycopg.connect(demo_server.dsn("alice"), autocommit=True) as con:
        as_any = con.execute(sql.format("= ANY(%s)"), (listed,)).fetchall()
        assert [row[0] for row in as_any] == listed
        spent = con.execute("SHOW idp.budget").fetchone()
        assert con.execute(sql.format("IN ('cardiology', 'oncology')")).fetchall() == as_any
        assert con.execute("SHOW idp.budget").fetchone() == spent

    async def asked() -> tuple[list, list]:
        con = await asyncpg.connect(host="127.0.0.1", port=demo_server.port, user="alice",
                                    database="demo")
        try:
            ages = await con.fetch("SELECT COUNT(*) FROM people WHERE age = ANY($1) "
                                   "AND income > $2", [30, 40, None], 0.0)
            rest = await con.fetch(sql.format("<> ALL($1::text[])"), listed)
            return ages, rest
        finally:
            await con.close()

    ages, rest = asyncio.run(asked())
    assert len(ages) == 1 and ages[0][0] > 0
    assert [row[0] for row in rest] == ["dermatology", "orthopedics", "pediatrics"]
