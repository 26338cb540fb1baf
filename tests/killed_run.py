"""A test run to be killed (not collected by itself: its name does not start with
``test_``). tests/test_cleanup.py runs this file in a pytest of its own, waits for the
report it writes, kills that pytest and checks that no PostgreSQL it started is left."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from tests import pgserver, watchdog
from tests.wireserver import RULES, load_people, running_proxy


def _postmaster(data: Path) -> int:
    return int((data / "postmaster.pid").read_text().split()[0])


def test_hold_the_suites_postgresql_and_a_server_with_its_catalog(fresh_postgres, tmp_path):
    load_people(fresh_postgres, 20)
    rules = tmp_path / "rules.toml"
    rules.write_text(RULES.format(auth="trust"))
    with running_proxy(rules, fresh_postgres, tmp_path / "home") as proxy:
        (cluster,) = pgserver._live.values()  # the session's cluster (postgres_url)
        (catalog,) = [marker.parent for marker in Path(os.environ["TMPDIR"]).glob(
            "idp-shadow-*/proxy.pid") if marker.read_text() == str(proxy.process.pid)]
        report = {
            "postmasters": {str(cluster.data): _postmaster(cluster.data),
                            str(catalog / "data"): _postmaster(catalog / "data")},
            "folders": [str(cluster.base), str(catalog), os.environ["TMPDIR"]],
            "pytest": os.getpid(), "server": proxy.process.pid,
            "watchdog": watchdog.watchdog_pid(),
        }
        Path(os.environ["IDP_KILLED_RUN_REPORT"]).write_text(json.dumps(report))
        time.sleep(600)  # killed meanwhile
