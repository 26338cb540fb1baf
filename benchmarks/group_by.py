"""GROUP BY over many declared keys (issue 17 item 6): the time the noise takes per
query and the whole query's ratio to the same GROUP BY run directly, DuckDB in-process.

    python benchmarks/group_by.py [--rows 1000000] [--repeat 15] [--profile] [KEYS ...]

KEYS defaults to 11 100 1000. Every query is fresh (the answer cache is off); the noise
is the time spent in ``release_group`` over all the groups of one query. ``--profile``
prints a cProfile of one more query per key count.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import statistics
import sys
import tempfile
import time
from pathlib import Path

import duckdb

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import proxy.engine as engine_module
from proxy.backends import open_backend
from proxy.engine import Engine
from proxy.rules import parse_rules
from proxy.session import Session

SQL = "SELECT g, COUNT(*) FROM t GROUP BY g"


def _rules(keys: int) -> str:
    listed = ", ".join(f'"k{i}"' for i in range(keys))
    return f"""
[defaults]
epsilon_per_query = 0.001
answer_cache = false
[analysts.owner]
budget = 1000000
[tables.t]
privacy_unit = "uid"
max_rows_per_unit = 1
[tables.t.columns]
uid = {{ type = "int" }}
g = {{ type = "text", keys = [{listed}] }}
"""


_noise: list[float] = []
_release_group = engine_module.release_group


def _timed_release_group(*args, **kwargs):
    start = time.perf_counter()
    try:
        return _release_group(*args, **kwargs)
    finally:
        _noise[-1] += time.perf_counter() - start


def run(keys: int, rows: int, repeat: int, profile: bool) -> None:
    path = Path(tempfile.mkdtemp()) / "data.duckdb"
    with duckdb.connect(str(path)) as con:
        con.execute(f"CREATE TABLE t AS SELECT i::INTEGER AS uid, 'k' || (i % {keys}) AS g "
                    "FROM range(?) r(i)", [rows])
    backend = open_backend(f"duckdb:///{path}")
    session = Session.open(Engine(parse_rules(_rules(keys)), backend), "owner")
    engine_module.release_group = _timed_release_group
    _noise.clear()
    totals = []
    for attempt in range(repeat + 1):  # the first warms up
        _noise.append(0.0)
        start = time.perf_counter()
        (answer,) = list(session.execute(SQL))
        totals.append(time.perf_counter() - start)
        assert len(answer.rows) == keys
    if profile:
        _noise.append(0.0)
        profiler = cProfile.Profile()
        profiler.runcall(lambda: list(session.execute(SQL)))
        pstats.Stats(profiler).sort_stats("tottime").print_stats(15)
    engine_module.release_group = _release_group
    backend.close()
    plain = []
    with duckdb.connect(str(path)) as con:
        for _ in range(repeat + 1):
            start = time.perf_counter()
            con.execute(SQL).fetchall()
            plain.append(time.perf_counter() - start)
    noise, whole = statistics.median(_noise[1:repeat + 1]), statistics.median(totals[1:])
    direct = statistics.median(plain[1:])
    print(f"keys {keys:6,}  rows {rows:,}: noise {noise * 1e3:7.2f} ms/query, whole query "
          f"{whole * 1e3:7.1f} ms, DuckDB directly {direct * 1e3:6.1f} ms, ratio "
          f"{whole / direct:5.2f}x", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("keys", nargs="*", type=int, default=[11, 100, 1000])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    for keys in args.keys:
        run(keys, args.rows, args.repeat, args.profile)


if __name__ == "__main__":
    main()
