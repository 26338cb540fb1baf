"""The schema-only catalog also starts from the PostgreSQL binaries bundled with the
``pgserver`` wheel, which a machine without a PostgreSQL installation serves from."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from proxy.backends import open_backend
from proxy.rules import parse_rules
from proxy.wire import shadow
from tests.wireserver import RULES, load_people


def test_the_catalog_runs_on_the_bundled_binaries(tmp_path, monkeypatch):
    bundled = Path(importlib.util.find_spec("pgserver").origin).parent / "pginstall" / "bin"
    monkeypatch.setattr(shadow, "_binaries", lambda: bundled)
    url = f"duckdb:///{tmp_path / 'data.duckdb'}"
    load_people(url, 10)
    backend = open_backend(url)
    catalog = shadow.ShadowCatalog(parse_rules(RULES.format(auth="trust")), backend, 5)
    try:
        with catalog.connect("alice", "demo") as con:
            assert "PostgreSQL 16" in con.execute("SELECT version()").fetchone()[0]
            names = con.execute("SELECT relname FROM pg_class WHERE relkind = 'r' AND "
                                "relnamespace = 'public'::regnamespace ORDER BY 1").fetchall()
            assert names == [("people",), ("regions",)]
            with pytest.raises(Exception, match="read-only"):
                con.execute("CREATE TABLE t (a int)")
    finally:
        catalog.close()
        backend.close()


def test_database_names_are_bounded(tmp_path, monkeypatch):
    monkeypatch.setattr(shadow, "_MAX_DATABASES", 2)
    url = f"duckdb:///{tmp_path / 'data.duckdb'}"
    load_people(url, 10)
    backend = open_backend(url)
    catalog = shadow.ShadowCatalog(parse_rules(RULES.format(auth="trust")), backend, 5)
    try:
        for name in ("demo", "other", "demo"):
            catalog.connect("alice", name).close()
        with pytest.raises(shadow.ShadowError) as refused:
            catalog.connect("alice", "third")
        assert refused.value.sqlstate == "53300" and "demo, other" in refused.value.message
    finally:
        catalog.close()
        backend.close()
