"""The totality fuzzer's long run (tests/totality.py; the suite runs a fixed seed set in
tests/pushdown/test_totality.py): random admitted expressions × adversarial rows on each backend.

    python benchmarks/totality_fuzz.py [--n 20000] [--backends duckdb,postgres,sail]
                                       [--seed 1] [--depth 4] [--show 10]
    python benchmarks/totality_fuzz.py --where [--n 5000] [--backends duckdb,postgres]

``--n`` expressions per backend (the same expressions on every backend). Each is
refused at analysis, or its per-row values and its statistics (SUM, MAX, MIN, MEDIAN,
COUNT) run on the backend without error, finite, inside the derived domain and equal to
the Python reference of the guarded semantics. Prints per backend the counts of refused
and admitted expressions and of failures by kind, and the first ``--show`` failures;
exits 1 when there is any. PostgreSQL and Sail are throwaway servers (as in the tests).

``--where``: the WHERE fuzzer instead (tests/where_totality.py): ``--n`` random WHERE
clauses and time buckets under WHERE ranges per backend, each refused at analysis or its
statistics run without error and its rows in scope (and groups) equal PostgreSQL's own
evaluation of the original statement, in UTC and in Europe/Berlin.
"""

from __future__ import annotations

import argparse
import collections
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from proxy.backends import open_backend  # noqa: E402
from proxy.backends.duckdb_backend import DuckDBBackend  # noqa: E402
from proxy.engine import Engine  # noqa: E402
from tests import totality  # noqa: E402
from tests.databases import load_table  # noqa: E402


def _engine(stack: ExitStack, name: str, folder: Path) -> tuple[Engine, str]:
    columns = totality.rows()
    if name == "duckdb":
        url = f"duckdb:///{folder / 'fuzz.duckdb'}"
    elif name == "postgres":
        from tests.pgserver import throwaway_postgres

        url = stack.enter_context(throwaway_postgres())
    else:
        from tests.databases import spark_session
        from tests.sailserver import throwaway_sail

        url = stack.enter_context(throwaway_sail(folder / "sail"))
        stack.callback(lambda: spark_session(url).stop())
        spark_session(url).sql(f"DROP TABLE IF EXISTS {totality.TABLE}")
    load_table(url, totality.TABLE, columns, totality.TYPES)
    backend = open_backend(url)
    stack.callback(backend.close)
    store = None
    if name == "sail":
        store = DuckDBBackend(":memory:")
        stack.callback(store.close)
    return Engine(totality.RULES, backend, store=store), backend.dialect


def _where(stack: ExitStack, options, folder: Path) -> bool:
    from tests import where_totality as fuzz
    from tests.pgserver import throwaway_postgres

    postgres = stack.enter_context(throwaway_postgres())
    load_table(postgres, fuzz.TABLE, fuzz.rows(), fuzz.TYPES)
    truth = fuzz.postgres_truth(postgres)
    stack.callback(truth.close)
    for statement in fuzz.infinities():
        truth(statement, "UTC")
    failed = False
    for name in options.backends.split(","):
        url = f"duckdb:///{folder / 'where.duckdb'}" if name == "duckdb" else postgres
        if name == "duckdb":
            load_table(url, fuzz.TABLE, fuzz.rows(), fuzz.TYPES)
        backend = open_backend(url)
        stack.callback(backend.close)
        if name == "duckdb":
            for statement in fuzz.infinities():
                backend.query(statement)
        engine = Engine(fuzz.RULES, backend)
        start = time.monotonic()
        outcome = fuzz.run(engine, truth, options.seed, options.n)
        failed = _report(name, options, outcome, start) or failed
    return failed


def _report(name: str, options, outcome, start: float) -> bool:
    kinds = collections.Counter(kind for kind, _, _ in outcome.failures)
    print(f"{name}: {options.n} statements, {outcome.refused} refused, "
          f"{outcome.admitted} admitted, {len(outcome.failures)} failures "
          f"{dict(kinds)} in {time.monotonic() - start:.1f} s", flush=True)
    for kind, text, detail in outcome.failures[:options.show]:
        print(f"  {kind}: {text}\n      {detail[:300]}")
    return bool(outcome.failures)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=20000)
    parser.add_argument("--backends", default="duckdb,postgres,sail")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--depth", type=int, default=4)
    parser.add_argument("--show", type=int, default=10)
    parser.add_argument("--where", action="store_true")
    options = parser.parse_args()
    if options.where:
        with tempfile.TemporaryDirectory() as folder, ExitStack() as stack:
            return 1 if _where(stack, options, Path(folder)) else 0
    table_rows = totality.as_rows(totality.rows())
    failed = False
    with tempfile.TemporaryDirectory() as folder, ExitStack() as stack:
        for name in options.backends.split(","):
            engine, dialect = _engine(stack, name, Path(folder))
            start = time.monotonic()
            outcome = totality.run(engine, dialect, table_rows, options.seed, options.n,
                                   options.depth)
            failed = _report(name, options, outcome, start) or failed
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
