"""A test run to be killed (not collected by itself: its name does not start with
``test_``). tests/test_cleanup.py runs this file in a pytest of its own, waits for the
report it writes, kills that pytest and checks that no PostgreSQL it started is left
(nor, in the split configuration, the Sail server)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import psycopg

from proxy.demo import located_rules
from tests import pgserver, sailserver, watchdog
from tests.factories import Served, served_rules


def _postmaster(data: Path) -> int:
    return int((data / "postmaster.pid").read_text().split()[0])


def _catalog(proxy) -> Path:
    """The folder of the shadow catalog of the running server ``proxy``, started by a
    catalog query (it starts at the first)."""
    with psycopg.connect(proxy.dsn("alice")) as con:
        con.execute("SELECT count(*) FROM pg_class")
    server = proxy.process.pid
    (catalog,) = [marker.parent for marker in Path(os.environ["TMPDIR"]).glob(
        "idp-shadow-*/proxy.pid") if marker.read_text() == str(server)]
    return catalog


def _report_and_wait(report: dict) -> None:
    report.update(pytest=os.getpid(), watchdog=watchdog.watchdog_pid())
    Path(os.environ["IDP_KILLED_RUN_REPORT"]).write_text(json.dumps(report))
    time.sleep(600)  # killed meanwhile


def test_hold_the_suites_postgresql_and_a_server_with_its_catalog(fresh_postgres, tmp_path):
    with Served.prepare(tmp_path, served_rules(), fresh_postgres, 20).serve() as proxy:
        (cluster,) = pgserver._live.values()  # the session's cluster (postgres_url)
        catalog = _catalog(proxy)
        _report_and_wait({
            "postmasters": {str(cluster.data): _postmaster(cluster.data),
                            str(catalog / "data"): _postmaster(catalog / "data")},
            "folders": [str(cluster.base), str(catalog), os.environ["TMPDIR"]],
            "server": proxy.process.pid})


def test_hold_a_sail_server_and_a_server_over_it(sail_url, tmp_path):
    """The split configuration: the proxy over Sail, its ledger in a DuckDB file."""
    rules = located_rules(served_rules(), {
        name: str(tmp_path / "tables" / name) for name in ("people", "regions")})
    with Served.prepare(tmp_path, rules, sail_url, 20, tables=tmp_path / "tables",
                        ledger=f"duckdb:///{tmp_path / 'ledger.duckdb'}").serve() as proxy:
        catalog = _catalog(proxy)
        _report_and_wait({
            "postmasters": {str(catalog / "data"): _postmaster(catalog / "data")},
            "folders": [str(catalog), os.environ["TMPDIR"]], "server": proxy.process.pid,
            "sail": sailserver.live[sail_url]})
