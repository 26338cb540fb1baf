"""What privacy costs: the engine's time per query as a ratio to the plain aggregate run
directly on the same backend, for DuckDB and PostgreSQL (and Spark), in one run.

    python benchmarks/pushdown.py [--rows 10000000] [--backends duckdb,postgres] [--repeat 5]
                                  [--only instance] [--pg jit=off]

``--backends`` also takes ``sail`` and ``spark``: the Spark backend over a throwaway
Spark Connect server, Sail's (pysail) or a real Spark's in local mode (tests/sparkserver.py;
needs java), with the ledger in a DuckDB file beside it. A plain Spark table has no data
version, so nothing is cached there: every run is fresh and the cache column shows "-".

The engine's time covers everything an analyst waits for: analysis, the ledger debit,
the per-unit bound check, the statistics query and the noise. Every timed run of the
"idp-proxy" column is a fresh answer: before each, the session's ε moves in its sixth
decimal (0.100001, 0.100002, ...), which changes the answer-cache key and nothing the
backend computes, so the cache is looked up and written as it is for any new query but
never answers. A repeated query answered from the cache is timed in its own column. The
ledger is checked after each case (every fresh run charged, every repeat served from the
cache). The per-unit bound's first computation (once per data version) is reported on
its own line. PostgreSQL is a throwaway server started from the system's binaries (as in
the tests). The "DP instance" cases ask under ``SET idp.model = 'dp'; SET
idp.sensitivity = 'instance'`` (the exponential mechanism, docs/privacy.md §5.3); the
"clipped" cases are SUM, AVG and STDDEV with their automatic clipping bound (§3.14: the
statistics include the per-unit contributions against the bound's ladder);
``--only`` keeps the cases whose name contains a word. ``--off NAME`` turns a
backend's capability off (a boolean field of proxy.backends.base.Capabilities, e.g.
``extremes_in_pass``): the "before" of a change a capability gates, in the same
checkout.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from proxy.analyze import analyze, parse_statements
from proxy.backends import open_backend
from proxy.engine import Engine
from proxy.errors import BackendFailed
from proxy.rules import parse_rules
from proxy.session import Session
from proxy.settings import Settings
from tests.pgserver import throwaway_postgres
from tests.sailserver import throwaway_sail
from tests.sparkserver import throwaway_spark

RULES = parse_rules("""
[defaults]
epsilon_per_query = 0.1
[analysts.bench]
budget = 1000000
[tables.rows]
[tables.rows.columns]
x = { type = "float", domain = [0, 1000] }
a = { type = "int", domain = [0, 100] }
b = { type = "int", keys = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10] }
[tables.visits]
privacy_unit = "unit"
[tables.visits.columns]
unit = { type = "int" }
x = { type = "float", domain = [0, 1000] }
a = { type = "int", domain = [0, 100] }
""", "benchmark rules")

INSTANCE = Settings(model="dp", sensitivity="instance")
_MEDIAN = {"duckdb": "SELECT quantile_disc(x, 0.5) FROM rows",
           "postgres": "SELECT percentile_disc(0.5) WITHIN GROUP (ORDER BY x) FROM rows"}

# (name, private SQL, plain SQL per dialect[, the session's settings])
CASES = [
    ("COUNT with range", "SELECT COUNT(*) FROM rows WHERE a BETWEEN 10 AND 50",
     {"duckdb": "SELECT count(*) FROM rows WHERE a BETWEEN 10 AND 50",
      "postgres": "SELECT count(*) FROM rows WHERE a BETWEEN 10 AND 50"}),
    ("MEDIAN", "SELECT MEDIAN(x) FROM rows",
     {"duckdb": "SELECT quantile_disc(x, 0.5) FROM rows",
      "postgres": "SELECT percentile_disc(0.5) WITHIN GROUP (ORDER BY x) FROM rows"}),
    ("MEDIAN with WHERE", "SELECT MEDIAN(x) FROM rows WHERE a < 30",
     {"duckdb": "SELECT quantile_disc(x, 0.5) FROM rows WHERE a < 30",
      "postgres": "SELECT percentile_disc(0.5) WITHIN GROUP (ORDER BY x) FROM rows WHERE a < 30"}),
    ("MAX", "SELECT MAX(x) FROM rows",
     {"duckdb": "SELECT max(x) FROM rows", "postgres": "SELECT max(x) FROM rows"}),
    ("MAX with WHERE", "SELECT MAX(x) FROM rows WHERE a < 30",
     {"duckdb": "SELECT max(x) FROM rows WHERE a < 30",
      "postgres": "SELECT max(x) FROM rows WHERE a < 30"}),
    ("COUNT GROUP BY (11 keys)", "SELECT b, COUNT(*) FROM rows GROUP BY b",
     {"duckdb": "SELECT b, count(*) FROM rows GROUP BY b",
      "postgres": "SELECT b, count(*) FROM rows GROUP BY b"}),
    ("MEDIAN GROUP BY (11 keys)", "SELECT b, MEDIAN(x) FROM rows GROUP BY b",
     {"duckdb": "SELECT b, quantile_disc(x, 0.5) FROM rows GROUP BY b",
      "postgres": "SELECT b, percentile_disc(0.5) WITHIN GROUP (ORDER BY x) FROM rows GROUP BY b"}),
    ("DP instance MEDIAN", "SELECT MEDIAN(x) FROM rows", _MEDIAN, INSTANCE),
    ("DP instance MEDIAN with WHERE", "SELECT MEDIAN(x) FROM rows WHERE a < 30",
     {"duckdb": "SELECT quantile_disc(x, 0.5) FROM rows WHERE a < 30",
      "postgres": "SELECT percentile_disc(0.5) WITHIN GROUP (ORDER BY x) FROM rows WHERE a < 30"},
     INSTANCE),
    ("DP instance PERCENTILE 0.9 (vs median)",
     "SELECT PERCENTILE_DISC(0.9) WITHIN GROUP (ORDER BY x) FROM rows", _MEDIAN, INSTANCE),
    ("DP instance MAX (vs median)", "SELECT MAX(x) FROM rows", _MEDIAN, INSTANCE),
    ("DP instance MEDIAN GROUP BY (11 keys)", "SELECT b, MEDIAN(x) FROM rows GROUP BY b",
     {"duckdb": "SELECT b, quantile_disc(x, 0.5) FROM rows GROUP BY b",
      "postgres": "SELECT b, percentile_disc(0.5) WITHIN GROUP (ORDER BY x) FROM rows GROUP BY b"},
     INSTANCE),
    *[(f"clipped {level}{kind}", f"SELECT {kind}(x) FROM {table}",
       {"duckdb": f"SELECT {kind.lower()}(x) FROM {table}",
        "postgres": f"SELECT {kind.lower()}(x) FROM {table}"})
      for level, table in (("", "rows"), ("user-level ", "visits"))
      for kind in ("SUM", "AVG", "STDDEV")],
    ("user-level COUNT", "SELECT COUNT(*) FROM visits WHERE a BETWEEN 10 AND 50",
     {"duckdb": "SELECT count(*) FROM visits WHERE a BETWEEN 10 AND 50",
      "postgres": "SELECT count(*) FROM visits WHERE a BETWEEN 10 AND 50"}),
]
_SET = {INSTANCE: "SET idp.model = 'dp'; SET idp.sensitivity = 'instance'"}
# PostgreSQL's plain SQL is Spark SQL too (Spark 4's and Sail's percentile_disc … WITHIN
# GROUP is exact, as the proxy's percentiles are)
_PLAIN = {"duckdb": "duckdb", "postgres": "postgres", "sparkexact": "postgres"}


def load(backend, rows: int) -> None:
    """rows: one row per record, x with a million distinct values in [0, 1000), a with
    101; visits: the same shape, two to four rows per unit."""
    if backend.dialect == "duckdb":
        body = ("SELECT range AS id, CAST(hash(range) % 1000000 AS DOUBLE) / 1000 AS x, "
                "CAST(hash(range * 7) % 101 AS INTEGER) AS a, "
                "CAST(hash(range * 7) % 101 AS INTEGER) // 10 AS b FROM range({n})")
        unit = "(range // 3 + CAST(hash(range) % 2 AS BIGINT))"
    elif backend.dialect == "sparkexact":  # Parquet tables in the server's warehouse
        body = ("SELECT id AS id, CAST(pmod(xxhash64(id), 1000000) AS DOUBLE) / 1000 AS x, "
                "CAST(pmod(xxhash64(id * 7), 101) AS INT) AS a, "
                "CAST(pmod(xxhash64(id * 7), 101) AS INT) DIV 10 AS b FROM range({n})")
        unit = "(id DIV 3 + pmod(xxhash64(id), 2))"
    else:
        body = ("SELECT g AS id, ((hashint8(g) & 1048575) % 1000000)::float8 / 1000 AS x, "
                "((hashint8(g * 7) & 1048575) % 101)::int AS a, "
                "((hashint8(g * 7) & 1048575) % 101)::int / 10 AS b FROM generate_series(1, {n}) g")
        unit = "(g / 3 + (hashint8(g) & 1))"
    tables = {"rows": body.format(n=rows),
              "visits": body.replace("AS id", f"AS id, {unit} AS unit").format(n=rows)}
    if backend.dialect == "sparkexact":
        # written by the backend's own session (Sail keeps tables per session); Sail
        # fails a CREATE TABLE … AS statement's collect (its row count is a uint64)
        from pyspark.sql import SparkSession

        session = SparkSession.builder.remote(backend.url).getOrCreate()
        for table, select in tables.items():
            session.sql(select).write.saveAsTable(table)
        return
    with backend.transaction() as tx:
        for table, select in tables.items():
            tx.execute(f"CREATE TABLE {table} AS {select}")
    if backend.dialect == "postgres":
        backend.query("ANALYZE rows")
        backend.query("ANALYZE visits")


def timed(action, repeat: int, before=None) -> float:
    """The median time of ``action`` over ``repeat`` runs; ``before`` (untimed) runs
    ahead of each."""
    times = []
    for _ in range(repeat):
        if before is not None:
            before()
        start = time.perf_counter()
        action()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


_MICRO_STEPS = itertools.count(1)  # ε = 0.1 + step · 0.000001, never the same twice


def fresh_epsilon(session) -> None:
    """Move the session's ε in its sixth decimal: a new answer-cache key, the same work."""
    list(session.execute(f"SET idp.epsilon = {0.1 + next(_MICRO_STEPS) * 1e-6:.6f}"))


def ledger_counts(store) -> dict[str, int]:
    return dict(store.query("SELECT status, count(*) FROM idp.ledger GROUP BY status"))


def run_backend(label: str, url: str, rows: int, repeat: int, only: str | None = None,
                ledger: str | None = None, off: tuple[str, ...] = ()) -> list[tuple]:
    """``ledger``: the URL of the store beside a non-transactional backend (Spark);
    ``off``: capabilities turned off."""
    backend = open_backend(url)
    backend.capabilities = dataclasses.replace(backend.capabilities,
                                               **dict.fromkeys(off, False))
    store = open_backend(ledger) if ledger else backend
    try:
        results = _run(label, backend, store, rows, repeat, only)
    finally:  # an open Spark Connect session would keep the process from exiting
        for opened in {backend, store}:
            opened.close()
    if ledger is None:  # c is kept per data version in the store: a restart reads it
        results.append(_restarted(label, url, results[-1][2]))
    return results


def _restarted(label: str, url: str, raw: float) -> tuple:
    """The first user-level COUNT of a new engine over the backend opened again (a
    restart of the proxy): c is read from the store, not computed (on DuckDB the data
    version's content hash is still read once per process)."""
    backend = open_backend(url)
    try:
        engine = Engine(RULES, backend)
        session = Session.open(engine, "bench")
        fresh_epsilon(session)
        start = time.perf_counter()
        list(session.execute(CASES[-1][1]))
        first = time.perf_counter() - start
        engine.ledger.close()
    finally:
        backend.close()
    return label, "user-level COUNT, first after a restart", raw, first, first, None


def _run(label: str, backend, store, rows: int, repeat: int, only: str | None) -> list[tuple]:
    print(f"[{label}] loading {rows:,} rows ...", file=sys.stderr, flush=True)
    load(backend, rows)
    engine = Engine(RULES, backend, store=store)
    cached = backend.capabilities.transactional  # Spark: no data version, so no answer is cached
    session = Session.open(engine, "bench")
    results = []
    fresh_epsilon(session)
    start = time.perf_counter()
    list(session.execute(CASES[-1][1]))  # the first user-level query computes c
    first = time.perf_counter() - start
    for name, private_sql, plain, *chosen in CASES:
        if only is not None and only not in name:
            continue
        settings = chosen[0] if chosen else Settings()
        list(session.execute(_SET.get(settings, "RESET idp.model; RESET idp.sensitivity")))
        print(f"[{label}] {name} ...", file=sys.stderr, flush=True)
        try:
            results.append(_case(label, name, private_sql, plain, settings, backend, store,
                                 engine, session, repeat, cached))
        except BackendFailed as failed:  # one line in the table; the other cases still run
            results.append((label, name, f"failed: {failed.message}"))
    raw = timed(lambda: backend.query(CASES[-1][2][_PLAIN[backend.dialect]]), repeat)
    results.append((label, "user-level COUNT, first (computes c)", raw, first, first, None))
    engine.ledger.close()  # its writer thread, before the backend closes
    return results


def _case(label, name, private_sql, plain, settings, backend, store, engine, session,
          repeat: int, cached: bool) -> tuple:
    """(label, name, plain, statistics, fresh answer, cache hit) seconds of one case."""
    plan = analyze(parse_statements(private_sql)[0], RULES, settings)
    raw = timed(lambda sql=plain[_PLAIN[backend.dialect]]: backend.query(sql), repeat)
    stats = timed(lambda plan=plan: engine.statistics(plan), repeat)
    answer = lambda sql=private_sql: list(session.execute(sql))
    before = ledger_counts(store)
    ours = timed(answer, repeat, before=lambda: fresh_epsilon(session))
    hit = None
    if cached:
        answer()  # the last ε once more: from the cache; timed next, ε unchanged
        hit = timed(answer, repeat)
    engine.ledger.flush()  # replays' rows are written in batches, off the answer's path
    after = ledger_counts(store)
    fresh = after.get("charged", 0) - before.get("charged", 0)
    hits = after.get("served from cache", 0) - before.get("served from cache", 0)
    if (fresh, hits) != ((repeat, repeat + 1) if cached else (repeat, 0)):
        print(f"[{label}] {name}: expected {repeat} fresh answers and "
              f"{repeat + 1 if cached else 0} cache hits, the ledger shows {fresh} and "
              f"{hits}", file=sys.stderr, flush=True)
    return label, name, raw, stats, ours, hit


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--backends", default="duckdb,postgres")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--only", help="run the cases whose name contains this word")
    parser.add_argument("--off", action="append", default=[], metavar="CAPABILITY",
                        help="a backend capability turned off, e.g. extremes_in_pass (repeatable)")
    parser.add_argument("--pg", action="append", default=[], metavar="NAME=VALUE",
                        help="a setting of the throwaway PostgreSQL, e.g. jit=off (repeatable)")
    args = parser.parse_args()
    pg_settings = {"work_mem": "256MB", "shared_buffers": "1GB",
                   **dict(setting.split("=", 1) for setting in args.pg)}
    results = []
    for name in args.backends.split(","):
        with tempfile.TemporaryDirectory() as folder:
            if name == "duckdb":
                results += run_backend(name, f"duckdb:///{folder}/bench.duckdb", args.rows,
                                       args.repeat, args.only, off=tuple(args.off))
            elif name == "postgres":
                with throwaway_postgres(pg_settings) as url:
                    results += run_backend(name, url, args.rows, args.repeat, args.only,
                                           off=tuple(args.off))
            elif name in ("sail", "spark"):
                server = (throwaway_sail(Path(folder) / name) if name == "sail" else
                          throwaway_spark(Path(folder) / name, "4g", quick=False))
                with server as url:
                    results += run_backend(name, url, args.rows, args.repeat, args.only,
                                           ledger=f"duckdb:///{folder}/ledger.duckdb",
                                           off=tuple(args.off))
    print(f"\n{args.rows:,} rows, median of {args.repeat} runs"
          + (f"; off: {', '.join(args.off)}" if args.off else "") + "\n")
    print("plain: the aggregate alone on the backend; statistics: the pushed-down statistics\n"
          "(incl. the per-unit bound check) in one snapshot; idp-proxy: a fresh answer, all an\n"
          "analyst waits for (analysis, cache lookup, durable ledger debit, statistics, noise,\n"
          "cache entry); cache hit: the same query repeated, answered from the answer cache.\n")
    print(f"{'backend':<9} {'query':<40} {'plain':>8} {'statistics':>11} {'ratio':>7} "
          f"{'idp-proxy':>10} {'ratio':>7} {'cache hit':>10}")
    for dialect, name, raw, *rest in results:
        if not rest:
            print(f"{dialect:<9} {name:<40} {raw}")
            continue
        stats, ours, hit = rest
        hit_text = "-" if hit is None else f"{hit:.3f}s"
        print(f"{dialect:<9} {name:<40} {raw:>7.3f}s {stats:>10.3f}s {stats / raw:>6.2f}x "
              f"{ours:>9.3f}s {ours / raw:>6.2f}x {hit_text:>10}")


if __name__ == "__main__":
    main()
