"""The budget under real use, through ``idp-proxy serve`` with real clients on both
backends: racing sessions never overspend, and a dashboard pays for its queries once.
The races and the kill -9 run over Spark too (a Sail server, the ledger in a DuckDB file
or in PostgreSQL beside it: ``--ledger``)."""

from __future__ import annotations

import hashlib
import json
import os
import random
import threading
import time
from decimal import Decimal

import psycopg
import pytest

from proxy.analyze import parse_statements
from proxy.analyze.shapes import canonical_sql
from proxy.backends import open_backend
from proxy.demo import located_rules
from proxy.engine import Engine
from proxy.errors import BackendFailed, BackendUnavailable, QueryCanceled, RolledBack
from proxy.ledger import Charge, Ledger
from proxy.loss import Loss
from proxy.rules import parse_rules
from proxy.session import Session
from tests.databases import new_database
from tests.factories import Served, load_people, people_table
from tests.pgserver import postgres_cluster
from tests.wireserver import race

pytestmark = pytest.mark.postgres

RACES, SESSIONS = 5, 32
CLIENTS, BURST, KILLS = 8, 500, 3


def _rules(racers: str = "") -> str:
    """The served rules: the dashboard, steady and ``racers`` (their [analysts.…]
    sections) over load_people's people."""
    return f"""
[server]
auth = "trust"
max_connections = 64

[defaults]
epsilon_per_query = 0.05
budget_per_analyst = 1.0

[analysts.dashboard]
budget = 10

[analysts.steady]
budget = 1000

{racers}

{people_table()}"""


SLOW = """
[tables.slow]
privacy_unit = "person_id"
[tables.slow.columns]
person_id = { type = "int" }
age = { type = "int", domain = [0, 120] }
"""


# The configurations a test over ``served`` runs in: the two backends, and Spark (Sail)
# with the ledger beside it in a DuckDB file or in PostgreSQL.
ON_SPARK = ["duckdb", "postgres", "spark", "spark-postgres"]


@pytest.fixture(params=["duckdb", "postgres"])
def served(request, tmp_path):
    """A server over 500 people, its ledger beside them or (Spark) apart."""
    ledger, backend, folder = None, None, None
    if request.param.startswith("spark"):
        backend, folder = request.getfixturevalue("sail_url"), tmp_path / "tables"
        ledger = (request.getfixturevalue("fresh_postgres") if request.param.endswith(
            "postgres") else f"duckdb:///{tmp_path / 'ledger.duckdb'}")
    elif request.param == "postgres":
        backend = request.getfixturevalue("fresh_postgres")
    else:
        backend = f"duckdb:///{tmp_path / 'data.duckdb'}"
    text = _rules("\n".join(
        [f"[analysts.race{r}]\nbudget = 1.0" for r in range(RACES)]
        + [f"[analysts.crash{c}]\nbudget = 1000" for c in range(CLIENTS)]))
    return Served.prepare(tmp_path, text if folder is None else located_rules(
        text, {"people": str(folder / "people")}), backend, tables=folder, ledger=ledger)


def _ledger(served, user: str) -> list[dict]:
    return _ledgers(served)[user]


def _ledgers(served) -> dict[str, list[dict]]:
    """Every analyst's committed ledger entries, read in one command."""
    out = served.admin("ledger", "--format", "json")
    assert out.returncode == 0, out.stderr
    entries: dict[str, list[dict]] = {}
    for entry in json.loads(out.stdout, parse_float=Decimal):  # exact ε
        entries.setdefault(entry["analyst"], []).append(entry)
    return entries


@pytest.mark.parametrize("served", ON_SPARK, indirect=True)
def test_racing_sessions_of_one_analyst_never_overspend(served):
    """Budget 1.0, ε 0.05, 32 distinct queries at once: exactly 20 answers, 5 times.
    Over Spark one process serves them whatever the cores (gRPC is not fork-safe: a
    worker forked after the supervisor's channel hung at start, now and then)."""
    with served.serve() as proxy:
        ready = next(line for line in proxy.log if "idp-proxy serving" in line)
        assert ("workers" in ready) == (served.backend.startswith("postgres")
                                        and (os.cpu_count() or 1) > 1), ready
        for r in range(RACES):
            assert race(proxy, f"race{r}", r * 1000, SESSIONS) == (20, 12)
            with psycopg.connect(proxy.dsn(f"race{r}"), autocommit=True) as con:
                assert Decimal(con.execute("SHOW idp.budget").fetchone()[0]) == 0
    ledgers = _ledgers(served)  # the committed ledger, read after the server stopped
    for r in range(RACES):
        entries = ledgers[f"race{r}"]
        charged = [Decimal(e["epsilon"]) for e in entries if e["status"] == "charged"]
        assert len(charged) == 20 and sum(charged) == Decimal("1.0")
        assert sum(e["status"] == "refused: budget" for e in entries) == 12


DASHBOARD = [
    "SELECT COUNT(*) FROM people WHERE age > 30",
    "SELECT MEDIAN(income) FROM people",
    "SELECT region, COUNT(*) FROM people GROUP BY region",
    "SELECT MAX(age) FROM people WHERE income < 50000",
    "SELECT AVG(income) FROM people WHERE region = 'north'",
    "SELECT SUM(income) FROM people WHERE age BETWEEN 20 AND 40",
    "SELECT MIN(age) FROM people",
    "SELECT region, MEDIAN(age) FROM people GROUP BY region ORDER BY region",
    "SELECT PERCENTILE_CONT(0.9) WITHIN GROUP (ORDER BY income) FROM people",
    "SELECT COUNT(*) FROM people WHERE region IN ('east', 'west')",
]


def test_a_dashboard_refreshing_pays_for_its_queries_once(served):
    """10 queries re-run 30 times cost 10 queries, and every repeat equals the first."""
    with served.serve() as proxy, \
            psycopg.connect(proxy.dsn("dashboard"), autocommit=True) as con:
        first = [con.execute(sql).fetchall() for sql in DASHBOARD]
        for _ in range(29):
            assert [con.execute(sql).fetchall() for sql in DASHBOARD] == first
        spent = Decimal(10) - Decimal(con.execute("SHOW idp.budget").fetchone()[0])
    assert spent == Decimal("0.5")  # one aggregate each, ε 0.05
    entries = _ledger(served, "dashboard")
    assert sum(e["status"] == "charged" for e in entries) == 10
    assert sum(e["status"] == "served from cache" for e in entries) == 290


def test_a_postgresql_outage_gives_class_08_or_57_errors_and_costs_nothing(tmp_path):
    """PostgreSQL stops during a burst of 4 clients and starts again: errors of class 08
    or 57 meanwhile, answers after, no proxy restart, and the budget pays only for
    answers (owed refunds are paid once the database is back). Each phase lasts until
    every client has seen what it is about (not a fixed time): 3 answers before, an
    error during, an answer after the start, then 3 more queries, all answered."""
    with postgres_cluster() as cluster:
        served = Served.prepare(tmp_path, _rules(), cluster.url)
        outcomes: list[tuple[str, str]] = []  # (phase, outcome)
        by_client: list[list[tuple[str, str]]] = [[] for _ in range(4)]
        phase = ["before"]
        stop = threading.Event()

        def until(seen) -> None:
            """Wait (30 s at most) until every client's outcomes satisfy ``seen``."""
            deadline = time.monotonic() + 30
            while not all(seen(list(mine)) for mine in by_client):
                if time.monotonic() > deadline:
                    return  # the assertions below tell what was missing
                time.sleep(0.02)

        def count(mine, now, outcome=None) -> int:
            return sum(p == now and (outcome is None or o == outcome) for p, o in mine)

        with served.serve() as proxy:
            def client(number):
                with psycopg.connect(proxy.dsn("steady"), autocommit=True) as con:
                    query = 0
                    while not stop.is_set():
                        query += 1
                        try:
                            con.execute(f"SELECT COUNT(*) FROM people WHERE income > "
                                        f"{number * 100000 + query}").fetchone()
                            outcome = (phase[0], "answer")  # the phase it ended in
                        except psycopg.Error as exc:
                            outcome = (phase[0], exc.sqlstate or "none")
                        outcomes.append(outcome)
                        by_client[number].append(outcome)
                        time.sleep(0.02)

            threads = [threading.Thread(target=client, args=(n,)) for n in range(4)]
            for thread in threads:
                thread.start()
            until(lambda mine: count(mine, "before", "answer") >= 3)
            phase[0] = "during"
            cluster.stop("fast")
            until(lambda mine: count(mine, "during") > count(mine, "during", "answer"))
            cluster.start()
            phase[0] = "after"
            until(lambda mine: count(mine, "after", "answer") >= 1)
            phase[0] = "settled"
            until(lambda mine: count(mine, "settled") >= 3)
            stop.set()
            for thread in threads:
                thread.join(60)
            with psycopg.connect(proxy.dsn("steady"), autocommit=True) as con:
                spent = Decimal(1000) - Decimal(con.execute("SHOW idp.budget").fetchone()[0])
        seen = {}
        for now, outcome in outcomes:
            seen.setdefault(now, set()).add(outcome)
        told = (seen, "".join(line for line in proxy.log if "ERROR" in line))
        assert seen["before"] == {"answer"} and seen["settled"] == {"answer"}, told
        errors = seen["during"] - {"answer"}
        assert errors and all(code[:2] in ("08", "57") for code in errors), told
        answers = sum(outcome == "answer" for _, outcome in outcomes)
        assert spent == answers * Decimal("0.05")
        entries = _ledger(served, "steady")
        net = sum(Decimal(e["epsilon"]) for e in entries if e["status"] != "refused: budget")
        assert net == spent


def _sql_hash(sql: str) -> str:
    """The ledger's key of a query: the hash of its normalised text."""
    return hashlib.sha256(canonical_sql(parse_statements(sql)[0]).encode()).hexdigest()[:16]


def _burst(proxy, round_number: int, number: int, answered: set[str],
           failures: list[str]) -> None:
    """One client's share of the burst; it ends when the proxy dies under it."""
    analyst = f"crash{number}"
    try:
        with psycopg.connect(proxy.dsn(analyst), autocommit=True) as con:
            for query in range(BURST // CLIENTS):
                sql = f"SELECT COUNT(*) FROM people WHERE income > {round_number * 1000 + query}"
                con.execute(sql).fetchone()
                answered.add(f"{analyst} {_sql_hash(sql)}")
    except psycopg.OperationalError:
        pass  # the proxy died
    except psycopg.Error as exc:
        failures.append(f"{exc.sqlstate} {exc}")


@pytest.mark.slow
@pytest.mark.parametrize("served", ON_SPARK[:3], indirect=True)
def test_no_answer_without_a_committed_debit_across_kill_9(served):
    """SIGKILL at a random moment of a burst of 500 queries from 8 clients, 3 times;
    then: every answer a client received has its committed debit, and every budget
    equals the sum of its committed ledger rows. The moment is drawn within 1 s after
    the round's first answer (debits are under way; the burst lasts far longer, which
    the first assertion checks), not from the server's start, whose time varies."""
    chance = random.Random(20261122)
    answered: set[str] = set()
    failures: list[str] = []
    for round_number in range(KILLS):
        before = len(answered)
        with served.serve() as proxy:
            threads = [threading.Thread(target=_burst, args=(proxy, round_number, n, answered,
                                                               failures))
                       for n in range(CLIENTS)]
            for thread in threads:
                thread.start()
            deadline = time.monotonic() + 60
            while len(answered) == before and not failures and time.monotonic() < deadline:
                time.sleep(0.01)
            time.sleep(chance.uniform(0.0, 1.0))
            proxy.kill()
            for thread in threads:
                thread.join(60)
        assert len(answered) - before < BURST  # the kill cut the burst short
    with served.serve() as proxy, \
            psycopg.connect(proxy.dsn("crash0"), autocommit=True) as con:
        assert con.execute("SELECT COUNT(*) FROM people").fetchone()[0] > 0  # up again
    assert not failures
    assert len(answered) > KILLS  # the kills did not all land before the first answer
    debited = set()
    ledgers = _ledgers(served)
    out = served.admin("budget", "show", "--format", "json")
    accounts = {a["analyst"]: a for a in json.loads(out.stdout, parse_float=Decimal)}
    for number in range(CLIENTS):
        analyst = f"crash{number}"
        entries = ledgers.get(analyst, [])
        debited |= {f"{analyst} {e['sql_hash']}" for e in entries if e["status"] == "charged"}
        spent = Decimal(accounts[analyst]["spent"])
        assert spent == sum(Decimal(e["epsilon"]) for e in entries)
    assert answered <= debited


def test_a_refund_the_database_cannot_take_is_paid_when_it_is_back(tmp_path):
    """The debit commits, PostgreSQL dies during the computation and stays down for the
    refund: the refund is owed, and paid before the next debit once it is back."""
    with postgres_cluster() as cluster:
        load_people(cluster.url, 50)
        with psycopg.connect(cluster.url, autocommit=True) as con:
            con.execute("CREATE VIEW slow AS SELECT g AS person_id, g % 100 AS age FROM "
                        "generate_series(1, 1000) g WHERE pg_sleep(0.01) IS NOT NULL")
        rules = parse_rules(_rules() + SLOW)
        engine = Engine(rules, open_backend(cluster.url))
        session = Session.open(engine, "steady")
        failed: list[Exception] = []

        def slow_query():
            try:
                list(session.execute("SELECT COUNT(*) FROM slow WHERE age > 5"))
            except Exception as exc:  # noqa: BLE001 -- the test inspects it
                failed.append(exc)

        query = threading.Thread(target=slow_query)
        query.start()
        deadline = time.monotonic() + 30  # the debit is committed, the computation runs
        with psycopg.connect(cluster.url, autocommit=True) as watch:
            while not (watch.execute("SELECT count(*) FROM idp.ledger WHERE status = "
                                     "'charged'").fetchone()[0] and watch.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE state = 'active' AND "
                    "query LIKE '%slow%' AND pid <> pg_backend_pid()").fetchone()[0]):
                assert time.monotonic() < deadline and not failed, failed
                time.sleep(0.02)
        time.sleep(0.2)  # well into its 10 s
        cluster.stop("immediate")
        query.join(30)
        assert [type(exc) for exc in failed] == [BackendUnavailable]
        cluster.start()
        list(session.execute("SELECT COUNT(*) FROM people WHERE age > 5"))
        statuses = [(e[9], e[6]) for e in engine.ledger.entries("steady")]
        assert statuses == [("charged", Decimal("0.05")),
                            ("refunded: backend unreachable", Decimal("-0.05")),
                            ("charged", Decimal("0.05"))]
        assert engine.ledger.remaining("steady") == Decimal("999.95")
        engine.backend.close()


GROUPED_RULES = """
[defaults]
epsilon_per_query = 0.05
budget_per_analyst = 1.0
global_budget = 1.5

[analysts.a]
budget = 1.0

[analysts.b]
budget = 1.0
""" + people_table()


def _grouped_engine(backend_url):
    load_people(backend_url, 200)
    return Engine(parse_rules(GROUPED_RULES), open_backend(backend_url))


def _at_once(engine, count: int, start=None, offset: int = 0,
             analysts: str = "ab") -> list[tuple[str, str]]:
    """``count`` sessions (the ``analysts`` in turn) ask distinct queries at once (new
    ones for each ``offset``)."""
    outcomes, barrier = [], threading.Barrier(count)

    def ask(number: int) -> None:
        analyst = analysts[number % len(analysts)]
        session = Session.open(engine, analyst)
        barrier.wait()
        if start is not None:
            start(number)
        try:
            list(session.execute(f"SELECT COUNT(*) FROM people WHERE age > {number + offset}"))
            outcomes.append((analyst, "answer"))
        except Exception as exc:  # noqa: BLE001 -- the test inspects it
            outcomes.append((analyst, type(exc).__name__))

    threads = [threading.Thread(target=ask, args=(number,)) for number in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    return outcomes


def _balanced_ledger(engine) -> None:
    entries = engine.ledger.entries()
    spent = {name: spent for name, _, spent, _ in engine.ledger.budgets()}
    for name in "ab":
        assert spent[name] == sum(e[6] for e in entries
                                  if e[2] == name and e[9] != "refused: budget")
    assert engine.ledger.budgets("")[0][2] == sum(e[6] for e in entries
                                                 if e[9] != "refused: budget")


def test_debits_at_once_share_commits_and_each_is_still_conditional(backend_url):
    """64 sessions of two analysts (1.0 each) under a global budget of 1.5, ε 0.05: exactly
    30 answers; an analyst's debit that the global budget refuses is undone in its batch
    (spent is the ledger's sum); on DuckDB debits waiting for a commit share the next."""
    engine = _grouped_engine(backend_url)
    batches, lead = [], engine.ledger._lead

    def counted(own):
        batches.append(len(engine.ledger._waiting))
        return lead(own)

    engine.ledger._lead = counted
    outcomes = _at_once(engine, 64)
    assert sorted({outcome for _, outcome in outcomes}) == ["BudgetExhausted", "answer"]
    assert [outcome for _, outcome in outcomes].count("answer") == 30
    statuses = [e[9] for e in engine.ledger.entries()]
    assert statuses.count("charged") == 30 and statuses.count("refused: budget") == 34
    _balanced_ledger(engine)
    if engine.ledger.backend.capabilities.group_commit:
        assert len(batches) < 64, batches  # fewer commits than debits
    engine.backend.close()


def test_a_cancel_of_the_session_leading_a_batch_fails_only_its_own_debit(duckdb_url):  # group commit is DuckDB's
    """The session whose thread runs a group commit is cancelled in the middle of it: its
    query fails (QueryCanceled, nothing debited) and the other debits of the batch go
    into the next one."""
    engine = _grouped_engine(duckdb_url)
    assert engine.ledger.backend.capabilities.group_commit
    take, seen, cancelled = engine.ledger._take, [], []

    def cancelling(tx, debit):
        seen.append(tx)
        if len(seen) == 1:  # the first batch held: the other debits queue into the next
            time.sleep(0.3)  # (the SQLite store commits too fast for them to meet)
        if not cancelled and seen.count(tx) == 2:  # in a batch of two or more
            cancelled.append(tx)
            engine.backend.interrupt(threading.get_ident())
        return take(tx, debit)

    engine.ledger._take = cancelling
    outcomes = _at_once(engine, 16)
    assert cancelled
    assert sorted(outcome for _, outcome in outcomes) == ["QueryCanceled"] + ["answer"] * 15
    statuses = [e[9] for e in engine.ledger.entries()]
    assert statuses == ["charged"] * 15
    _balanced_ledger(engine)
    engine.backend.close()


def test_a_debit_cancelled_while_it_waits_for_a_batch_is_not_taken(duckdb_url):  # group commit is DuckDB's
    """A session cancelled while its debit waits for the next group commit fails with
    QueryCanceled and pays nothing; the batch's other debits commit."""
    engine = _grouped_engine(duckdb_url)
    assert engine.ledger.backend.capabilities.group_commit
    ledger, outcomes, threads = engine.ledger, {}, {}
    for analyst in "ab":
        ledger.ensure_analyst(analyst)

    def debit(analyst: str) -> None:
        threads[analyst] = threading.get_ident()
        try:
            ledger.debit(Charge(analyst, f"SELECT {analyst}", "idp", "count", Loss.of(Decimal("0.05")),
                                "one record"))
            outcomes[analyst] = "debited"
        except QueryCanceled:
            outcomes[analyst] = "cancelled"

    with engine.ledger.backend._lock:  # the writer lock: a leads the batch and waits for it
        threading.Thread(target=debit, args=("a",)).start()
        while not ledger._leading:
            time.sleep(0.01)
        threading.Thread(target=debit, args=("b",)).start()  # b waits for a's batch
        while len(ledger._waiting) < 2:
            time.sleep(0.01)
        engine.backend.interrupt(threads["b"])
    deadline = time.monotonic() + 30
    while len(outcomes) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert outcomes == {"a": "debited", "b": "cancelled"}
    assert [(e[2], e[9]) for e in engine.ledger.entries()] == [("a", "charged")]
    _balanced_ledger(engine)
    engine.backend.close()


@pytest.mark.postgres
def test_a_deadlock_is_told_as_one_not_as_a_lost_connection(fresh_postgres, caplog):
    """Issue 30 item 5: a deadlock came to the client as 58000 and to the log as
    "postgres connection lost". Two transactions locking two rows in opposite orders:
    the one PostgreSQL rolls back fails with its own SQLSTATE (40P01), logged as a
    rollback; the other commits."""
    import logging

    backend = open_backend(fresh_postgres)
    backend.query("CREATE TABLE pair (k int PRIMARY KEY)")
    backend.query("INSERT INTO pair VALUES (1), (2)")
    both = threading.Barrier(2)
    outcomes: dict[int, object] = {}

    def lock(first: int, second: int) -> None:
        try:
            with backend.transaction() as tx:
                tx.execute("SELECT k FROM pair WHERE k = %s FOR UPDATE", (first,))
                both.wait(10)
                tx.execute("SELECT k FROM pair WHERE k = %s FOR UPDATE", (second,))
            outcomes[first] = "committed"
        except Exception as exc:  # noqa: BLE001 — the test inspects it
            outcomes[first] = exc

    with caplog.at_level(logging.WARNING, logger="idp_proxy"):
        racers = [threading.Thread(target=lock, args=pair) for pair in ((1, 2), (2, 1))]
        for racer in racers:
            racer.start()
        for racer in racers:
            racer.join(30)
    backend.close()
    failed = [o for o in outcomes.values() if o != "committed"]
    assert len(failed) == 1 and sorted(outcomes) == [1, 2], outcomes
    assert isinstance(failed[0], RolledBack) and failed[0].sqlstate == "40P01", failed
    assert "connection lost" not in caplog.text and "rolled a transaction back" in caplog.text


@pytest.mark.postgres
def test_one_analysts_racing_debits_under_a_global_budget_never_deadlock(postgres_url):
    """Issue 30 item 5: the conditional UPDATE locked the analyst's and the global row in
    its scan's order, which differed between statements: "deadlock detected" (seen once
    in twelve runs of 8 rounds x 64 sessions). Every debit now locks them in name order
    first. 4 rounds of 48 sessions of one analyst and 16 of another, budgets ample:
    every query answered, and the ledger balances."""
    rules = GROUPED_RULES.replace("global_budget = 1.5", "global_budget = 1000").replace(
        "[analysts.a]\nbudget = 1.0", "[analysts.a]\nbudget = 1000").replace(
        "[analysts.b]\nbudget = 1.0", "[analysts.b]\nbudget = 1000")
    with new_database(postgres_url) as url:
        load_people(url, 200)
        engine = Engine(parse_rules(rules), open_backend(url))
        for round_ in range(4):
            outcomes = _at_once(engine, 64, offset=1000 * round_, analysts="aaab")
            assert [outcome for _, outcome in outcomes] == ["answer"] * 64, outcomes
        _balanced_ledger(engine)
        engine.backend.close()


def test_the_embedded_duckdb_keeps_its_ledger_in_a_sqlite_file_beside_it(tmp_path):
    """docs/budget.md "Where the ledger lives": the debit is in FILE.ledger.sqlite, read
    again when the file is opened again; a file that held its ledger before the store
    keeps it; a data file whose store went missing is refused, not served afresh."""
    data, old = tmp_path / "data.duckdb", tmp_path / "old.duckdb"
    url = f"duckdb:///{data}"
    load_people(url, 20)
    backend = open_backend(url)
    engine = Engine(parse_rules(GROUPED_RULES), backend)
    assert engine.ledger.backend is not backend and engine.cache.backend is engine.ledger.backend
    engine.ledger.ensure_analyst("a")
    engine.ledger.debit(Charge("a", "SELECT 1", "idp", "count", Loss.of(Decimal("0.05")),
                               "one record"))
    backend.close()
    backend = open_backend(url)
    assert Ledger(backend.ledger_store(), parse_rules(GROUPED_RULES)).budgets("a")[0][2] == \
        Decimal("0.05")
    backend.close()
    for suffix in ("", "-wal", "-shm"):
        (tmp_path / f"data.duckdb.ledger.sqlite{suffix}").unlink(missing_ok=True)
    backend = open_backend(url)
    with pytest.raises(BackendFailed, match="ledger.sqlite, which is missing"):
        backend.ledger_store()
    backend.close()
    backend = open_backend(f"duckdb:///{old}")
    backend.query("CREATE SCHEMA idp")
    backend.query("CREATE TABLE idp.budgets (analyst TEXT PRIMARY KEY, budget_micro BIGINT "
                  "NOT NULL, spent_micro BIGINT NOT NULL DEFAULT 0)")
    assert backend.ledger_store() is backend
    backend.close()
    assert not (tmp_path / "old.duckdb.ledger.sqlite").exists()


@pytest.mark.parametrize("store", ["duckdb", "sqlite"])
def test_a_refund_of_a_charge_made_before_a_reset_takes_nothing_back(tmp_path, store):
    """The owner resets an account while a statement charged before it is in flight:
    the statement's refund (parts not computed, an outage) must not take spent below
    zero (it did: spent −0.5, remaining 1.5 of a budget of 1; the review of
    2026-11-29). A charge made after the reset is refunded as before."""
    from proxy.backends.sqlite_store import SQLiteStore

    rules = parse_rules("[defaults]\nbudget_per_analyst = 1\n[analysts.a]\n"
                        "[tables.t]\n[tables.t.columns]\nx = { type = \"int\" }\n")
    backend = open_backend(f"duckdb:///{tmp_path / 'l.duckdb'}") if store == "duckdb" \
        else SQLiteStore(str(tmp_path / "l.sqlite"))
    ledger = Ledger(backend, rules)
    try:
        ledger.ensure_analyst("a")
        before = Charge("a", "SELECT 1", "idp", "m", Loss.of(Decimal("0.6")), "n")
        ledger.debit(before)
        time.sleep(0.002)
        ledger.reset("a")
        ledger.refund(Charge("a", "SELECT 1", "idp", "m", Loss.of(Decimal("0.5")), "n",
                             made=before.made, made_micro=before.made_micro))
        assert ledger.remaining("a") == Decimal(1)
        assert [e[9] for e in ledger.entries("a")] == ["charged"]  # no refund row
        after = Charge("a", "SELECT 2", "idp", "m", Loss.of(Decimal("0.4")), "n")
        ledger.debit(after)
        ledger.refund(after)
        assert ledger.remaining("a") == Decimal(1)
    finally:
        backend.close()
