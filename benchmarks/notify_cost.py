"""What the data-version trigger costs the data owner's own writers on PostgreSQL: 4
clients each making N single-row autocommit INSERTs into a table without the trigger
("plain"), with a trigger that only counts ("counted"), and with the proxy's own trigger
function while the proxy's own watcher runs, as in a served proxy ("served":
``PostgresBackend.watch_writes``; since issue 37 a poller reading ``idp.versions`` every
``write_poll_ms``, before it a listener draining the function's ``pg_notify``). Run it
against an older proxy's code with PYTHONPATH to compare.

    PYTHONPATH=. python benchmarks/notify_cost.py [N] [POLL_MS]
"""
import inspect
import sys
import threading
import time

import psycopg

from proxy.backends.postgres_backend import _VERSION_SETUP, PostgresBackend
from tests.pgserver import throwaway_postgres

N = int(sys.argv[1]) if len(sys.argv) > 1 else 3000
POLL_MS = int(sys.argv[2]) if len(sys.argv) > 2 else 25
CLIENTS = 4


def run(url, table):
    def work():
        with psycopg.connect(url, autocommit=True) as con:
            for i in range(N):
                con.execute(f"INSERT INTO {table} VALUES (%s)", (i,))
    threads = [threading.Thread(target=work) for _ in range(CLIENTS)]
    start = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return CLIENTS * N / (time.perf_counter() - start)


with throwaway_postgres() as url:
    with psycopg.connect(url, autocommit=True) as con:
        con.execute("CREATE SCHEMA idp")
        con.execute("CREATE TABLE idp.versions (table_oid oid PRIMARY KEY, version bigint NOT NULL)")
        for name in ("plain", "counted", "served"):
            con.execute(f"CREATE TABLE {name} (x int)")
        served_fn = _VERSION_SETUP[0]
        counted_fn = served_fn.replace("bump_data_version", "bump_quietly").replace(
            "PERFORM pg_notify('idp_data_writes', '');", "")
        con.execute(served_fn)
        con.execute(counted_fn)
        con.execute("CREATE TRIGGER v AFTER INSERT OR UPDATE OR DELETE ON counted FOR EACH STATEMENT EXECUTE FUNCTION idp.bump_quietly()")
        con.execute("CREATE TRIGGER v AFTER INSERT OR UPDATE OR DELETE ON served FOR EACH STATEMENT EXECUTE FUNCTION idp.bump_data_version()")
    backend = PostgresBackend(url)
    # the proxy's watcher (it takes the poll period since issue 37)
    backend.watch_writes(*[POLL_MS][:len(inspect.signature(backend.watch_writes).parameters)])
    deadline = time.monotonic() + 30
    while backend.quiet_mark() is None:
        assert time.monotonic() < deadline, "the proxy's watcher never started"
        time.sleep(0.01)
    for round_ in range(2):
        for name in ("plain", "counted", "served"):
            print(f"round {round_}: {name:9s} {run(url, name):8.0f} inserts/s", flush=True)
    backend.close()
