"""Analysts see what they may ask (issue 33 item 4): the schema-only catalog holds each
protected table's comment (protected, its privacy unit) and each column's (its
declared keys, domain and resolution), which psql's ``\\d+`` shows and BI tools read
from ``pg_description``; ``SHOW ALL`` lists the idp.* settings with their values.
Through ``idp-proxy serve`` under rules/demo.toml on both backends."""

from __future__ import annotations

import subprocess

import psycopg
import pytest

pytestmark = pytest.mark.postgres

PSQL = "/usr/lib/postgresql/15/bin/psql"


def test_pg_description_holds_the_rules_of_each_column(demo_server):
    with psycopg.connect(demo_server.dsn("alice"), autocommit=True) as con:
        before = con.execute("SHOW idp.budget").fetchone()
        table = con.execute("SELECT obj_description('people'::regclass, 'pg_class')"
                            ).fetchone()[0]
        columns = dict(con.execute(
            "SELECT a.attname, d.description FROM pg_attribute a JOIN pg_description d "
            "ON d.objoid = a.attrelid AND d.objsubid = a.attnum "
            "WHERE a.attrelid = 'visits'::regclass").fetchall())
        people = dict(con.execute(
            "SELECT column_name, col_description('people'::regclass, ordinal_position) "
            "FROM information_schema.columns WHERE table_name = 'people'").fetchall())
        public = con.execute("SELECT obj_description('regions'::regclass, 'pg_class')"
                             ).fetchone()[0]
        assert con.execute("SHOW idp.budget").fetchone() == before
    assert table == ("idp-proxy: protected table, aggregates only (differentially "
                     "private); privacy unit: person_id; at most 1 row per unit")
    assert people["region"] == "keys: north, south, east, west"
    assert people["income"] == "domain: [0, 10000000]; resolution: 0.01"
    assert people["age"] == "domain: [0, 120]; resolution: 1 (default)"
    assert people["person_id"].startswith("privacy unit")
    assert columns["visited_at"] == "domain: [2023-01-01 00:00:00, 2024-12-31 23:59:59]"
    assert columns["department"].startswith("keys: cardiology, dermatology")
    assert public == "idp-proxy: public table, answered as written; joins protected tables " \
                     "on code (unique)"


def test_psql_describe_shows_the_comments(demo_server):
    described = subprocess.run(
        [PSQL, demo_server.dsn("alice"), "-X", "-c", r"\d+ people"],
        capture_output=True, text=True, timeout=60, check=True).stdout
    assert "keys: north, south, east, west" in described
    assert "domain: [0, 10000000]; resolution: 0.01" in described
    shown = subprocess.run(  # the simple query protocol, as psql sends it
        [PSQL, demo_server.dsn("alice"), "-X", "-A", "-t", "-c", "SHOW ALL"],
        capture_output=True, text=True, timeout=60, check=True).stdout
    assert "idp.epsilon|0.1|" in shown and "idp.model|idp|" in shown


def test_show_all_lists_the_idp_settings(demo_server):
    with psycopg.connect(demo_server.dsn("alice"), autocommit=True) as con:
        con.execute("SET idp.epsilon = 0.05")
        con.execute("SET idp.intervals = on")
        rows = {name: value for name, value, _ in con.execute("SHOW ALL").fetchall()}
        budget = con.execute("SHOW idp.budget").fetchone()[0]
    assert rows["idp.epsilon"] == "0.05" and rows["idp.intervals"] == "on"
    assert rows["idp.model"] == "idp" and rows["idp.budget"] == budget
    assert {"idp.sensitivity", "idp.gamma", "idp.prior", "TimeZone"} <= set(rows)
