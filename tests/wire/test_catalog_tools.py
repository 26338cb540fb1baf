"""What BI tools and editors ask the catalog before any data, through ``idp-proxy serve``
on both backends: ``pg_backend_pid()`` (Superset's SQL Lab, before every statement),
answered with the session's own id, and ``information_schema`` listings (harlequin's
and node scripts' queries, verbatim), which show the declared tables and columns while
the tables themselves still answer only aggregates."""

from __future__ import annotations

import json
import subprocess

import psycopg
import psycopg2
import pytest

from tests.system import node_client

pytestmark = pytest.mark.postgres

# as the backend stores them (tests.factories.PEOPLE_TYPES), not the rules' int as bigint
PEOPLE_COLUMNS = [("person_id", "integer"), ("age", "integer"),
                  ("income", "double precision"), ("region", "text")]


def _budget(con) -> str:
    return con.execute("SHOW idp.budget").fetchone()[0]


def test_pg_backend_pid_is_the_id_the_session_was_given(proxy):
    with psycopg.connect(proxy.dsn("alice"), autocommit=True) as con, \
            psycopg.connect(proxy.dsn("alice"), autocommit=True) as other:
        cursor = con.execute("SELECT pg_backend_pid()")  # the extended protocol
        assert cursor.fetchall() == [(con.info.backend_pid,)]
        assert [(c.name, c.type_code) for c in cursor.description] == [("pg_backend_pid", 23)]
        assert other.execute("SELECT pg_catalog.pg_backend_pid() AS pid").fetchone() == (
            other.info.backend_pid,)
        assert con.info.backend_pid != other.info.backend_pid
        assert con.execute("SELECT 1 WHERE pg_backend_pid() = %s",
                           (con.info.backend_pid,)).fetchall() == [(1,)]
    simple = psycopg2.connect(proxy.dsn("alice"))  # the simple protocol, as Superset's
    cursor = simple.cursor()
    cursor.execute("SELECT pg_backend_pid()")
    assert cursor.fetchall() == [(simple.get_backend_pid(),)]
    simple.close()


@pytest.mark.parametrize("sql", [
    "SELECT pg_backend_pid(), COUNT(*) FROM people",
    "SELECT COUNT(*) FROM people WHERE age > pg_backend_pid()",
    "SELECT pg_backend_pid(), age FROM people",
])
def test_pg_backend_pid_with_protected_data_is_refused_as_before(proxy, sql):
    """The engine refuses these as any function it does not know (which SQLSTATE is the
    analyser's business: not supported, or raw rows)."""
    with psycopg.connect(proxy.dsn("alice"), autocommit=True) as con:
        before = _budget(con)
        with pytest.raises(psycopg.Error) as refused:
            con.execute(sql)
        assert refused.value.sqlstate[:2] in ("0A", "42"), refused.value
        assert len(str(refused.value).strip().splitlines()) == 1
        assert _budget(con) == before


# harlequin-postgres (tconbeer/harlequin-postgres, src/harlequin_postgres/adapter.py at
# 522b441b): its catalog tree, verbatim, with the parameters it passes (psycopg 3).
HARLEQUIN_DATABASES = """
                select datname
                from pg_database
                where
                    datistemplate is false
                    and datallowconn is true
                order by datname asc
                ;"""
HARLEQUIN_SCHEMAS = """
                select schema_name
                from information_schema.schemata
                where
                    catalog_name = %s
                    and schema_name != 'information_schema'
                    and schema_name not like 'pg\\_%%' escape '\\'
                order by schema_name asc
                ;"""
HARLEQUIN_RELATIONS = """
                select table_name, table_type
                from information_schema.tables
                where
                    table_catalog = %s
                    and table_schema = %s
                order by table_name asc
                ;"""
HARLEQUIN_MATVIEWS = """
                select matviewname
                from pg_matviews
                where
                    schemaname = %s
                order by matviewname asc
                ;"""
HARLEQUIN_COLUMNS = """
                select column_name, data_type
                from information_schema.columns
                where
                    table_catalog = %s
                    and table_schema = %s
                    and table_name = %s
                order by ordinal_position asc
                ;"""


def test_harlequin_catalog_lists_the_declared_tables_and_columns(proxy):
    with psycopg.connect(proxy.dsn("alice"), autocommit=True) as con:
        databases = [name for (name,) in con.execute(HARLEQUIN_DATABASES)]
        assert "demo" in databases
        assert con.execute(HARLEQUIN_SCHEMAS, ("demo",)).fetchall() == [("public",)]
        assert con.execute(HARLEQUIN_RELATIONS, ("demo", "public")).fetchall() == [
            ("people", "BASE TABLE"), ("regions", "BASE TABLE")]
        assert con.execute(HARLEQUIN_MATVIEWS, ("public",)).fetchall() == []
        assert con.execute(HARLEQUIN_COLUMNS, ("demo", "public", "people")).fetchall() \
            == PEOPLE_COLUMNS
        assert con.execute(HARLEQUIN_COLUMNS, ("demo", "public", "regions")).fetchall() \
            == [("region", "text"), ("label", "text")]
        assert con.execute("SELECT has_table_privilege('people', 'select'), "
                           "has_table_privilege('people', 'insert')").fetchone() == (True, False)
        # harlequin's "Preview Data" sends SELECT *: still refused, nothing spent
        before = _budget(con)
        for sql in ('select * from "public"."people" limit 100', "SELECT * FROM people",
                    'TABLE "people"', "SELECT * FROM public.PEOPLE"):
            with pytest.raises(psycopg.Error) as refused:
                con.execute(sql)
            assert refused.value.sqlstate == "42501", (sql, refused.value)
        assert _budget(con) == before


def test_node_postgres_scripts_list_tables_and_columns(proxy):
    out = subprocess.run([*node_client("node_catalog.js"), str(proxy.port)],
                         capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["tables"] == ["people", "regions"]
    assert result["columns"] == [list(column) for column in PEOPLE_COLUMNS]
    assert result["hasTable"] is True
    assert result["columnInfo"] == [name for name, _ in PEOPLE_COLUMNS]
    assert result["privilege"] is True
    assert result["refused"] == "42501"


def test_the_catalog_holds_no_rows_and_grants_nothing_but_reading(proxy):
    """The grant lets the analyst's role read the shadow's tables, which are empty;
    writing stays impossible, and the data only answers through the engine."""
    with psycopg.connect(proxy.dsn("alice"), autocommit=True) as con:
        privileges = con.execute(
            "SELECT table_name, privilege_type FROM information_schema.table_privileges "
            "WHERE table_schema = 'public' AND grantee = 'PUBLIC' ORDER BY 1, 2").fetchall()
        assert privileges == [("people", "SELECT"), ("regions", "SELECT")]
        (count,) = con.execute("SELECT COUNT(*) FROM people").fetchone()  # the engine's
        assert 2000 < count < 4000
        with pytest.raises(psycopg.Error) as refused:
            con.execute("SELECT relname, n_live_tup FROM pg_stat_user_tables")
        assert refused.value.sqlstate == "42501"


# Grafana's PostgreSQL data source (grafana/grafana public/app/plugins/datasource/
# grafana-postgresql-datasource/postgresMetaQuery.ts at 12f912ab): its query editor's table
# and column lists, as it builds them for schema "public" and table "people".
_GRAFANA_SCHEMA_CONSTRAINT = """
          quote_ident(table_schema) IN (
          SELECT
            CASE WHEN trim(s[i]) = '"$user"' THEN user ELSE trim(s[i]) END
          FROM
            generate_series(
              array_lower(string_to_array(current_setting('search_path'),','),1),
              array_upper(string_to_array(current_setting('search_path'),','),1)
            ) as i,
            string_to_array(current_setting('search_path'),',') s
          )"""
GRAFANA_TABLES = """SELECT quote_ident(table_name) AS "table"
      FROM information_schema.tables
      WHERE quote_ident(table_schema) = 'public'
      ORDER BY 1"""
GRAFANA_COLUMNS = f"""SELECT quote_ident(column_name) AS "column", data_type AS "type"
    FROM information_schema.columns
    WHERE
      CASE WHEN array_length(parse_ident('people'),1) = 2
        THEN quote_ident(table_schema) = (parse_ident('people'))[1]
          AND quote_ident(table_name) = (parse_ident('people'))[2]
        ELSE quote_ident(table_name) = 'people'
          AND {_GRAFANA_SCHEMA_CONSTRAINT}
      END"""


def test_grafana_query_editor_lists_tables_and_columns(proxy):
    with psycopg.connect(proxy.dsn("alice"), autocommit=True) as con:
        assert con.execute(GRAFANA_TABLES).fetchall() == [("people",), ("regions",)]
        assert con.execute(GRAFANA_COLUMNS).fetchall() == PEOPLE_COLUMNS
