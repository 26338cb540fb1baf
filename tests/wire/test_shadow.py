"""The schema-only catalog also starts from the PostgreSQL binaries bundled with the
``pgserver`` wheel, which a machine without a PostgreSQL installation serves from."""

from __future__ import annotations

import importlib.util
import os
import shutil
import tempfile
from pathlib import Path

import pytest

from proxy.backends import open_backend
from proxy.rules import parse_rules
from proxy.wire import shadow
from tests.factories import load_people, served_rules


def test_the_catalog_runs_on_the_bundled_binaries(tmp_path, monkeypatch):
    bundled = Path(importlib.util.find_spec("pgserver").origin).parent / "pginstall" / "bin"
    monkeypatch.setattr(shadow, "_binaries", lambda: bundled)
    url = f"duckdb:///{tmp_path / 'data.duckdb'}"
    load_people(url, 10)
    backend = open_backend(url)
    catalog = shadow.ShadowCatalog(parse_rules(served_rules()), backend, 5)
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
    catalog = shadow.ShadowCatalog(parse_rules(served_rules()), backend, 5)
    try:
        for name in ("demo", "other", "demo"):
            catalog.connect("alice", name).close()
        with pytest.raises(shadow.ShadowError) as refused:
            catalog.connect("alice", "third")
        assert refused.value.sqlstate == "53300" and "demo, other" in refused.value.message
    finally:
        catalog.close()
        backend.close()


def test_catalogs_are_copies_of_one_initdb_and_a_foreign_template_is_ignored(tmp_path,
                                                                          monkeypatch):
    """The first catalog's initdb leaves a template in the shared folder that later
    catalogs copy; a template someone else could have written, or a link, is never used."""
    shared = Path(tempfile.mkdtemp())  # the worker's TMPDIR, which PostgreSQL's user reaches
    shared.chmod(0o1777)  # as /var/tmp: the catalog's user makes its template here
    monkeypatch.setattr(shadow, "_SKELETONS", shared)
    rules = parse_rules(served_rules())
    url = f"duckdb:///{tmp_path / 'data.duckdb'}"
    load_people(url, 10)
    backend = open_backend(url)
    initdb_runs = []
    original = shadow.ShadowCatalog._initdb
    monkeypatch.setattr(shadow.ShadowCatalog, "_initdb",
                        lambda self, data: (initdb_runs.append(data), original(self, data)))
    try:
        for _ in range(2):
            catalog = shadow.ShadowCatalog(rules, backend, 5)
            with catalog.connect("alice", "demo") as con:
                assert con.execute("SELECT count(*) FROM people").fetchone() == (0,)
            catalog.close()
        (template,) = shared.glob("idp-proxy-catalog-*")
        assert len(initdb_runs) == 1 and template.stat().st_mode & 0o077 == 0
        template.chmod(0o755)  # now another user could have changed it: not used
        catalog = shadow.ShadowCatalog(rules, backend, 5)
        catalog.close()
        assert len(initdb_runs) == 2
        template.chmod(0o700)  # a link to it in its place (to a real cluster, say): not used
        linked = template.with_name(template.name + "-real")
        template.rename(linked)
        template.symlink_to(linked)
        catalog = shadow.ShadowCatalog(rules, backend, 5)
        catalog.close()
        assert len(initdb_runs) == 3
    finally:
        backend.close()
        shutil.rmtree(shared, ignore_errors=True)


def _processes_in(folder: Path) -> list[int]:
    """The processes whose command line names ``folder`` (a catalog's PostgreSQL)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and str(folder).encode() in (entry / "cmdline").read_bytes():
                found.append(int(entry.name))
        except OSError:
            continue  # gone meanwhile
    return found


def test_a_catalog_starts_at_its_first_query_once_across_worker_processes(tmp_path):
    """A catalog no session asks is never started (its DDL ran once on the machine, at
    the first construction); the first catalog queries of two worker processes at once
    (forked, as proxy/wire/workers.py forks them) start one PostgreSQL, which both use
    and the server's close stops."""
    url = f"duckdb:///{tmp_path / 'data.duckdb'}"
    load_people(url, 10)
    backend = open_backend(url)
    rules = parse_rules(served_rules())
    shadow.ShadowCatalog(rules, backend, 5).close()  # its DDL accepted on this machine
    catalog = shadow.ShadowCatalog(rules, backend, 5)
    folder = catalog._folder
    try:
        assert not (folder / "data" / "postmaster.pid").exists()
        assert _processes_in(folder) == []
        go, children = os.pipe(), []
        for _ in range(2):
            answer = os.pipe()
            pid = os.fork()
            if pid == 0:
                try:
                    os.read(go[0], 1)
                    with catalog.connect("alice", "demo") as con:
                        started, tables = con.execute(
                            "SELECT pg_postmaster_start_time()::text, count(*) FROM pg_class "
                            "WHERE relname IN ('people', 'regions')").fetchone()
                    os.write(answer[1], f"{started} {tables}".encode())
                finally:
                    os._exit(0)
            os.close(answer[1])
            children.append((pid, answer[0]))
        os.write(go[1], b"go")  # both at once
        answers = []
        for pid, reader in children:
            with open(reader, "rb") as read:
                answers.append(read.read().decode())
            os.waitpid(pid, 0)
        assert len(set(answers)) == 1 and answers[0].endswith(" 2"), answers
        assert (folder / "log").read_text().count("ready to accept connections") == 1
        assert _processes_in(folder)
    finally:
        catalog.close()
        backend.close()
    assert _processes_in(folder) == [] and not folder.exists()
