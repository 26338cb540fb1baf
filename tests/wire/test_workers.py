"""``[server] workers``: several processes serve one port of a PostgreSQL backend
(proxy/wire/workers.py). Real servers over real sockets: both workers take sessions,
session limits hold for the whole server, a cancel finds its session whichever worker
receives it, racing sessions never overspend, and SIGTERM leaves no process behind."""

from __future__ import annotations

import os
import signal
import tempfile
import threading
import time
from pathlib import Path

import psycopg
import pytest

from tests.factories import Served, people_table, slow_table
from tests.wireserver import race

pytestmark = pytest.mark.postgres

RULES = """
[server]
auth = "trust"
workers = 2
max_connections_per_analyst = 40
start_check_seconds = 0  # the slow view would hold the start-time check for its whole box

[defaults]
epsilon_per_query = 0.05

[analysts.alice]
budget = 100

[analysts.racer]
budget = 1.0

[tables.slow]
[tables.slow.columns]
x = { type = "int", domain = [0, 1000000] }
""" + people_table()


@pytest.fixture
def served(fresh_postgres, tmp_path):
    served = Served.prepare(tmp_path, RULES, fresh_postgres, 200)
    slow_table(fresh_postgres)
    return served


def _children(pid: int) -> set[int]:
    return {int(child) for child in
            Path(f"/proc/{pid}/task/{pid}/children").read_text().split()}


def _shadow_postmaster(server: int) -> int:
    """The pid of the catalog that server process ``server`` started."""
    for marker in Path(tempfile.gettempdir()).glob("idp-shadow-*/proxy.pid"):
        if marker.read_text() == str(server):
            return int((marker.parent / "data" / "postmaster.pid").read_text().split()[0])
    raise AssertionError(f"no catalog of server {server}")


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_two_workers_serve_and_count_sessions_together(served):
    rules = served.rules
    rules.write_text(rules.read_text().replace("per_analyst = 40", "per_analyst = 3"))
    with served.serve() as proxy:
        assert "2 workers" in "".join(proxy.log)
        assert len(_children(proxy.process.pid)) == 2
        owners = set()
        for _ in range(200):  # idle workers race for each accept: runs of a dozen or more
            with psycopg.connect(proxy.dsn("alice"), autocommit=True) as con:  # go to one
                owners.add(con.info.backend_pid % 2)
                assert con.execute("SELECT COUNT(*) FROM people").fetchone()[0] > 0
            if owners == {0, 1}:
                break
        assert owners == {0, 1}
        time.sleep(0.2)  # the loop's last close reaches the supervisor (it counted 4 once)
        # max_connections_per_analyst = 3 for the server, not per worker
        mine = [psycopg.connect(proxy.dsn("alice"), autocommit=True) for _ in range(3)]
        try:
            with pytest.raises(psycopg.OperationalError,
                               match='too many connections for role "alice"'):
                psycopg.connect(proxy.dsn("alice"))
        finally:
            for con in mine:
                con.close()
        time.sleep(0.2)  # the closes reach the supervisor
        psycopg.connect(proxy.dsn("alice")).close()


def test_a_cancel_reaches_its_session_whichever_worker_receives_it(served):
    """Ten long queries, each in a new session, each cancelled by psycopg's own cancel
    (a new connection, accepted by either worker): every one ends with 57014."""
    with served.serve() as proxy:
        for _ in range(10):
            with psycopg.connect(proxy.dsn("alice"), autocommit=True) as con:
                outcome: list[str] = []

                def ask(con=con, outcome=outcome):
                    try:
                        con.execute("SELECT COUNT(*) FROM slow WHERE x > 5")
                        outcome.append("answered")
                    except psycopg.Error as exc:
                        outcome.append(exc.sqlstate)

                asking = threading.Thread(target=ask)
                asking.start()
                while asking.is_alive():  # a cancel before the statement runs is lost
                    time.sleep(0.1)
                    con.cancel_safe()
                    asking.join(0.2)
                assert outcome == ["57014"]


def test_racing_sessions_on_two_workers_never_overspend(served):
    """32 sessions of one analyst (budget 1.0, ε 0.05) over both workers: 20 answers."""
    with served.serve() as proxy:
        assert race(proxy, "racer", 0) == (20, 12)


def test_a_dead_worker_is_replaced_and_sigterm_stops_everything(served):
    with served.serve() as proxy:
        server = proxy.process.pid
        workers = _children(server)
        with psycopg.connect(proxy.dsn("alice"), autocommit=True) as con:  # starts the catalog
            con.execute("SELECT count(*) FROM pg_class")
        catalog = _shadow_postmaster(server)
        os.kill(min(workers), signal.SIGKILL)
        deadline = time.monotonic() + 10
        while len(_children(server) - {min(workers)}) < 2:
            assert time.monotonic() < deadline, "".join(proxy.log)
            time.sleep(0.05)
        assert proxy.logged("starting another")
        for _ in range(6):  # whichever worker accepts, it serves
            with psycopg.connect(proxy.dsn("alice"), autocommit=True) as con:
                assert con.execute("SELECT COUNT(*) FROM people").fetchone()[0] > 0
        workers = _children(server)
    assert proxy.process.returncode == 0
    assert not any(_alive(pid) for pid in workers | {catalog})


def test_workers_stop_when_their_supervisor_is_killed(served):
    with served.serve() as proxy:
        with psycopg.connect(proxy.dsn("alice"), autocommit=True) as con:
            con.execute("SELECT COUNT(*) FROM people")
        workers = _children(proxy.process.pid)
        proxy.kill()  # SIGKILL: the workers read end-of-file on their control sockets
    deadline = time.monotonic() + 20
    while any(_alive(pid) for pid in workers):
        assert time.monotonic() < deadline, "".join(proxy.log)
        time.sleep(0.1)
