"""The totality fuzzer's long run (tests/totality.py; the suite runs a fixed seed set in
tests/pushdown/test_totality.py): random admitted expressions × adversarial rows on each backend.

    python benchmarks/totality_fuzz.py [--n 20000] [--backends duckdb,postgres,sail]
                                       [--seed 1] [--depth 4] [--show 10]

``--n`` expressions per backend (the same expressions on every backend). Each is
refused at analysis, or its per-row values and its statistics (SUM, MAX, MIN, MEDIAN,
COUNT) run on the backend without error, finite, inside the derived domain and equal to
the Python reference of the guarded semantics. Prints per backend the counts of refused
and admitted expressions and of failures by kind, and the first ``--show`` failures;
exits 1 when there is any. PostgreSQL and Sail are throwaway servers (as in the tests).
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


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=20000)
    parser.add_argument("--backends", default="duckdb,postgres,sail")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--depth", type=int, default=4)
    parser.add_argument("--show", type=int, default=10)
    options = parser.parse_args()
    table_rows = totality.as_rows(totality.rows())
    failed = False
    with tempfile.TemporaryDirectory() as folder, ExitStack() as stack:
        for name in options.backends.split(","):
            engine, dialect = _engine(stack, name, Path(folder))
            start = time.monotonic()
            outcome = totality.run(engine, dialect, table_rows, options.seed, options.n,
                                   options.depth)
            kinds = collections.Counter(kind for kind, _, _ in outcome.failures)
            print(f"{name}: {options.n} expressions, {outcome.refused} refused, "
                  f"{outcome.admitted} admitted, {len(outcome.failures)} failures "
                  f"{dict(kinds)} in {time.monotonic() - start:.1f} s", flush=True)
            for kind, text, detail in outcome.failures[:options.show]:
                print(f"  {kind}: {text}\n      {detail[:300]}")
            failed = failed or bool(outcome.failures)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
