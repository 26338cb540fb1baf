"""What the data-version trigger costs the data owner's own writers on PostgreSQL: 4
clients each making N single-row autocommit INSERTs into a table without the trigger,
with it as it was before 2026-11-28 (the version counted), and as it is (counted and
notified, ``pg_notify``, with a listener draining, as a served proxy listens).

    PYTHONPATH=. python benchmarks/notify_cost.py [N]
"""
import sys
import threading
import time

import psycopg

from proxy.backends.postgres_backend import _VERSION_SETUP
from tests.pgserver import throwaway_postgres

N = int(sys.argv[1]) if len(sys.argv) > 1 else 3000
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
        for name in ("plain", "counted", "notified"):
            con.execute(f"CREATE TABLE {name} (x int)")
        notify_fn = _VERSION_SETUP[0]
        quiet_fn = notify_fn.replace("bump_data_version", "bump_quietly").replace(
            "PERFORM pg_notify('idp_data_writes', '');", "")
        con.execute(notify_fn)
        con.execute(quiet_fn)
        con.execute("CREATE TRIGGER v AFTER INSERT OR UPDATE OR DELETE ON counted FOR EACH STATEMENT EXECUTE FUNCTION idp.bump_quietly()")
        con.execute("CREATE TRIGGER v AFTER INSERT OR UPDATE OR DELETE ON notified FOR EACH STATEMENT EXECUTE FUNCTION idp.bump_data_version()")
        listener = psycopg.connect(url, autocommit=True)
        listener.execute("LISTEN idp_data_writes")  # as a served proxy does
        stop = threading.Event()
        def drain():
            while not stop.is_set():
                for _ in listener.notifies(timeout=0.2):
                    pass
        drainer = threading.Thread(target=drain)
        drainer.start()
        for round_ in range(2):
            for name in ("plain", "counted", "notified"):
                print(f"round {round_}: {name:9s} {run(url, name):8.0f} inserts/s", flush=True)
        stop.set()
        drainer.join()
        listener.close()
