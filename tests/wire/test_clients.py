"""Each client library an analyst might use, against ``idp-proxy serve`` on both backends:
a private median, a private GROUP BY count, a parameterised range count, and a refusal
of ``SELECT * FROM people``. The clients share one server per backend, as the clients
of a deployment do: a question another client already asked is answered from the
answer cache (the same released answer, with its iDP notice), the others are computed."""

from __future__ import annotations

import asyncio
import json
import subprocess

import pytest

from tests.factories import REGIONS
from tests.system import jdbc_classpath, node_client

pytestmark = pytest.mark.postgres

MEDIAN = "SELECT MEDIAN(income) AS m FROM people"
GROUPS = "SELECT region, COUNT(*) AS n FROM people GROUP BY region"


def _check(median, groups, count):
    assert 10_000 < float(median) < 100_000
    assert set(groups) == set(REGIONS) and 2000 < sum(groups.values()) < 4000
    assert 500 < count < 1500


# Each client library is imported by its own test: every test worker collects this
# module, and pandas and SQLAlchemy alone take most of a second to import.

def test_psycopg2(proxy):
    import psycopg2

    con = psycopg2.connect(proxy.dsn("alice"))  # simple protocol, client-side parameters
    cur = con.cursor()
    cur.execute(MEDIAN)
    (median,) = cur.fetchone()
    assert "iDP" in con.notices[-1]
    cur.execute(GROUPS)
    groups = dict(cur.fetchall())
    cur.execute("SELECT COUNT(*) FROM people WHERE age BETWEEN %s AND %s", (30, 50))
    _check(median, groups, cur.fetchone()[0])
    with pytest.raises(psycopg2.Error) as refused:
        cur.execute("SELECT * FROM people")
    assert refused.value.pgcode == "42501"
    con.rollback()
    con.close()


def test_asyncpg(proxy):
    import asyncpg

    async def session():
        con = await asyncpg.connect(host="127.0.0.1", port=proxy.port, user="alice",
                                    database="demo")
        try:
            median = await con.fetchval(MEDIAN)
            groups = {r["region"]: r["n"] for r in await con.fetch(GROUPS)}
            statement = await con.prepare("SELECT COUNT(*) FROM people WHERE age BETWEEN $1 "
                                          "AND $2")  # no declared types: inferred
            assert [t.name for t in statement.get_parameters()] == ["int8", "int8"]
            count = await statement.fetchval(30, 50)
            for low in range(20, 26):
                await statement.fetchval(low, 60)
            _check(median, groups, count)
            with pytest.raises(asyncpg.PostgresError) as refused:
                await con.fetch("SELECT * FROM people")
            assert refused.value.sqlstate == "42501"
        finally:
            await con.close()

    asyncio.run(session())


def test_pg8000(proxy):
    import pg8000.native

    con = pg8000.native.Connection("alice", host="127.0.0.1", port=proxy.port,
                                   database="demo")
    ((median,),) = con.run(MEDIAN)
    groups = dict(con.run(GROUPS))
    ((count,),) = con.run("SELECT COUNT(*) FROM people WHERE age BETWEEN :low AND :high",
                          low=30, high=50)
    _check(median, groups, count)
    with pytest.raises(pg8000.native.DatabaseError) as refused:
        con.run("SELECT * FROM people")
    assert refused.value.args[0]["C"] == "42501"
    con.close()


def test_sqlalchemy_and_pandas(proxy):
    import pandas as pd
    import sqlalchemy

    engine = sqlalchemy.create_engine(
        f"postgresql+psycopg://alice@127.0.0.1:{proxy.port}/demo")
    inspector = sqlalchemy.inspect(engine)
    assert set(inspector.get_table_names()) == {"people", "regions"}
    assert [c["name"] for c in inspector.get_columns("people")] == [
        "person_id", "age", "income", "region"]
    median = pd.read_sql(MEDIAN, engine)["m"].iloc[0]
    frame = pd.read_sql(GROUPS, engine)
    with engine.connect() as con:
        count = con.execute(sqlalchemy.text(
            "SELECT COUNT(*) FROM people WHERE age BETWEEN :low AND :high"),
            {"low": 30, "high": 50}).scalar()
        with pytest.raises(sqlalchemy.exc.DBAPIError) as refused:
            con.execute(sqlalchemy.text("SELECT * FROM people"))
        assert refused.value.orig.sqlstate == "42501"
    _check(median, dict(zip(frame["region"], frame["n"])), count)
    engine.dispose()


def test_jdbc(proxy, tmp_path):
    out = subprocess.run(["java", "-cp", jdbc_classpath(tmp_path), "JdbcClient",
                          str(proxy.port)], capture_output=True, text=True, timeout=120,
                         check=False)
    assert out.returncode == 0, out.stderr
    lines = [line.split("=", 1) for line in out.stdout.splitlines()]
    checks: dict[str, list[str]] = {}
    for key, value in lines:
        checks.setdefault(key, []).append(value)
    assert 10_000 < float(checks["median"][0]) < 100_000
    assert "iDP" in checks["notice"][0]
    assert checks["groups"] == ["4"] and 2000 < int(checks["total"][0]) < 4000
    assert len(checks["count"]) == 6 and all(500 < int(c) < 1500 for c in checks["count"])
    assert checks["tables"] == ["people,regions,"]
    assert checks["columns"] == ["person_id,age,income,region,"]
    assert checks["refused"] == ["42501"]


def test_node_postgres(proxy):
    out = subprocess.run([*node_client(), str(proxy.port)], capture_output=True, text=True,
                         timeout=120, check=False)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    _check(result["median"], result["groups"], result["count"])
    assert result["refused"] == "42501"
    assert any("iDP" in notice for notice in result["notices"])
