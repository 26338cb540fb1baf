"""PostgreSQL data versions: the cached per-unit bound c must follow every way the unit
column can change, and the proxy must fall back to reading the column where its write
counter cannot be trusted."""

from __future__ import annotations

import psycopg
import pytest

from proxy.analyze import analyze, parse_statements
from proxy.backends import open_backend
from proxy.engine import Engine
from proxy.rules import parse_rules
from proxy.settings import Settings
from tests.databases import load_table

pytestmark = pytest.mark.postgres

RULES = parse_rules("""
[analysts.zoe]
budget = 100
[tables.visits]
privacy_unit = "person_id"
[tables.visits.columns]
person_id = { type = "int" }
other_id = { type = "int" }
""")


@pytest.fixture
def visits(fresh_postgres):
    # person 1 owns two rows; other_id, if it became the unit, has a unit with three
    load_table(fresh_postgres, "visits", {"person_id": [1, 1, 2, 3], "other_id": [5, 5, 5, 6]},
               {"person_id": "INTEGER", "other_id": "INTEGER"})
    return fresh_postgres


def _version(backend):
    with backend.transaction(snapshot=True) as tx:
        return backend.data_version(tx, "visits")


def _c(engine):
    """The shift s = c·g (g = 1) the engine uses for a user-level query now."""
    plan = analyze(parse_statements("SELECT COUNT(*) FROM visits")[0], RULES, Settings())
    return engine.statistics(plan)[0]


@pytest.mark.parametrize("change,c_after", [
    ("INSERT INTO visits VALUES (2, 7), (2, 7)", 3),
    ("UPDATE visits SET person_id = 1 WHERE person_id = 2", 3),
    ("DELETE FROM visits WHERE person_id = 1", 1),
    ("TRUNCATE visits", 1),
    (("ALTER TABLE visits RENAME COLUMN person_id TO tmp; "
      "ALTER TABLE visits RENAME COLUMN other_id TO person_id; "
      "ALTER TABLE visits RENAME COLUMN tmp TO other_id"), 3),
    ("ALTER TABLE visits ALTER COLUMN person_id TYPE bigint USING 1", 4),
])
def test_every_change_to_the_unit_column_moves_the_version(visits, change, c_after):
    backend = open_backend(visits)
    engine = Engine(RULES, backend)
    before = _version(backend)
    assert before is not None and _c(engine) == 2
    with psycopg.connect(visits, autocommit=True) as con:
        con.execute(change)
    assert _version(backend) != before
    assert _c(engine) == c_after
    backend.close()


def test_a_disabled_counter_is_not_trusted(visits):
    backend = open_backend(visits)
    engine = Engine(RULES, backend)
    assert _version(backend) is not None
    with psycopg.connect(visits, autocommit=True) as con:
        con.execute("ALTER TABLE visits DISABLE TRIGGER idp_data_version")
        con.execute("INSERT INTO visits VALUES (3, 1), (3, 1)")
    assert _version(backend) is None
    assert _c(engine) == 3  # read from the unit column's fingerprint instead
    with psycopg.connect(visits, autocommit=True) as con:
        con.execute("ALTER TABLE visits ENABLE ALWAYS TRIGGER idp_data_version")
    re_enabled = _version(backend)
    assert re_enabled is not None and _c(engine) == 3
    with psycopg.connect(visits, autocommit=True) as con:  # as a logical replica applies
        con.execute("SET session_replication_role = replica")
        con.execute("INSERT INTO visits VALUES (3, 1)")
    assert _version(backend) != re_enabled and _c(engine) == 4
    backend.close()


def test_a_role_that_cannot_install_the_counter_falls_back_to_the_fingerprint(visits):
    with psycopg.connect(visits, autocommit=True) as con:
        con.execute("CREATE ROLE reader LOGIN")
        con.execute("GRANT SELECT ON visits TO reader")
        con.execute("CREATE SCHEMA idp AUTHORIZATION reader")
    reader_url = visits.replace("//idp@", "//reader@", 1)
    assert reader_url != visits
    backend = open_backend(reader_url)
    engine = Engine(RULES, backend)
    assert _version(backend) is None and _c(engine) == 2
    with psycopg.connect(visits, autocommit=True) as con:
        con.execute("INSERT INTO visits VALUES (2, 7), (2, 7)")
    assert _c(engine) == 3
    backend.close()
    with psycopg.connect(visits, autocommit=True) as con:
        con.execute("DROP OWNED BY reader CASCADE")
        con.execute("DROP ROLE reader")


def test_a_counter_of_an_older_proxy_that_notifies_is_replaced_and_keeps_its_version(
        visits):
    """The trigger function of the proxy of 2026-11-28 counted writes and notified them
    (``pg_notify``, whose lock at every writer's commit cost the owner's single-row
    writers a quarter of their rate or more): the next start replaces it by the counter
    alone (a served proxy polls the counters), and the version, with every answer cached
    under it, stays the same; writes still move it, and notify nobody."""
    Engine(RULES, backend := open_backend(visits))
    with psycopg.connect(visits, autocommit=True) as con:
        con.execute("""CREATE OR REPLACE FUNCTION idp.bump_data_version() RETURNS trigger
            LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
            BEGIN
              INSERT INTO idp.versions AS v (table_oid, version) VALUES (TG_RELID, 1)
              ON CONFLICT (table_oid) DO UPDATE SET version = v.version + 1;
              PERFORM pg_notify('idp_data_writes', '');
              RETURN NULL;
            END $$""")
    old = _version(backend)
    backend.close()
    Engine(RULES, backend := open_backend(visits))
    assert _version(backend) == old
    with psycopg.connect(visits, autocommit=True) as con:
        source = con.execute("SELECT prosrc FROM pg_proc WHERE oid = "
                             "to_regprocedure('idp.bump_data_version()')").fetchone()[0]
        assert "INSERT INTO idp.versions" in source and "pg_notify" not in source
        # a session's own notifications arrive with its commit's reply: none came
        con.execute("LISTEN idp_data_writes")
        con.execute("INSERT INTO visits VALUES (4, 4)")
        assert list(con.notifies(timeout=0)) == []
    assert _version(backend) != old
    backend.close()


def test_the_version_function_reads_what_the_catalog_statement_reads_and_is_kept_current(
        visits):
    """The data version is read through idp.data_version (a PL/pgSQL function: its plan
    kept per connection): the same rows as the catalog statement it runs, in the caller's
    snapshot, so the same version text; a function whose text differs (an older proxy's,
    or altered) is replaced at the next start, and a write seen in the snapshot moves
    both alike."""
    from proxy.backends.postgres_backend import _VERSION_SQL

    Engine(RULES, backend := open_backend(visits))

    def both() -> tuple[list, list]:
        with backend.transaction(snapshot=True) as tx:
            return tx.execute("SELECT * FROM idp.data_version(%s)", ("visits",)), \
                tx.execute(_VERSION_SQL, ("visits",))

    function, statement = both()
    assert function == statement and len(function) == 1
    assert _version(backend) == backend.fingerprint_text(statement[0])
    with psycopg.connect(visits, autocommit=True) as con:
        con.execute("INSERT INTO visits VALUES (4, 4)")
        con.execute("""CREATE OR REPLACE FUNCTION idp.data_version(relation text)
            RETURNS TABLE (class_oid oid, class_file oid, class_xmin xid, trigger_oid oid,
            trigger_xmin xid, counted bigint, attributes text) LANGUAGE plpgsql STABLE AS $$
            BEGIN RETURN QUERY SELECT 0::oid, 0::oid, '0'::xid, 0::oid, '0'::xid,
              0::bigint, ''::text; END $$""")
    backend.close()
    Engine(RULES, backend := open_backend(visits))
    function, statement = both()
    assert function == statement and statement[0][5] == 2
    assert _version(backend) == backend.fingerprint_text(statement[0])
    backend.close()
