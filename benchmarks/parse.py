"""The proxy's CPU per fresh statement, split by stage (issue 17 item 3, "parse once").

Drives, in process on a small DuckDB table, what a connection's worker threads do for
one simple-query message (``proxy.wire.connection``): route the message, check it
with the session (refusals before anything runs), then answer it. A dashboard-like
mix of statements (COUNT with ranges, MEDIAN, GROUP BY, SUM with WHERE), each with
new literals every time, so every statement is fresh: never an answer-cache hit, and
never seen with the same literals before.

Each stage's CPU is the calling thread's (``time.thread_time``), summed over every
call of the functions named below while the message is handled; "rest" is the
remainder of the message's CPU (cache lookup and debit, pushdown SQL, noise, and the
backend's work in this thread).

    .venv/bin/python benchmarks/parse.py [N [SHAPES]]

SHAPES sets the size of the shape cache (proxy.analyze.shapes); 0 keeps nothing, so
every statement is parsed (once) and analysed, as for a shape seen the first time.

Measured 2026-11-23 on the shared 2-core machine (load average 5-6 from other work),
400 statements, mean CPU ms per statement; before = main at 9349a73 (its tree
extracted to /tmp/before and run with ``PYTHONPATH=/tmp/before``), after = branch
parse-once, run alternately (two runs each, within 0.1 ms of each other):

| stage | before | after | after, SHAPES = 0 |
|---|---|---|---|
| route | 0.80 | 0.22 | 0.28 |
| parse + analyze | 1.83 | 0.00 | 1.00 |
| cache key (normalised SQL, answer-cache key) | 0.65 | 0.21 | 0.76 |
| shape cache (shape, look-up and binding, or keeping) | - | 0.16 | 0.34 |
| all the stages above | 3.29 | 0.59 | 2.38 |
| rest (cache look-up, debit, statistics, noise; DuckDB's work in this thread) | 11.4 | 11.3 | 12.3 |

Before, a message was tokenised three times, parsed three times and analysed twice
(routing, the connection's check, the run's own check); after, once each, and a shape
seen before is neither parsed nor analysed. What is left of "cache key" is the
answer-cache key (a hash of the plan's repr), not sqlglot.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from types import SimpleNamespace

import duckdb
from per_answer import RULES as COUNT_RULES  # this script's folder is on the path

import proxy.analyze
import proxy.answer_cache
import proxy.engine
import proxy.session
import proxy.wire.connection
from proxy.backends import open_backend
from proxy.engine import Engine
from proxy.rules import parse_rules
from proxy.session import Session
from proxy.wire.connection import Connection

try:
    import proxy.analyze.shapes as SHAPES
except ImportError:  # before the shape cache
    SHAPES = None

# per_answer.py's table with two more columns
RULES = COUNT_RULES + """income = { type = "float", domain = [0, 1000000] }
region = { type = "text", keys = ["north", "south", "east", "west"] }
"""

DASHBOARD = [
    "SELECT COUNT(*) FROM people WHERE age >= {a} AND age < {b}",
    "SELECT MEDIAN(income) FROM people WHERE age BETWEEN {a} AND {b}",
    "SELECT region, COUNT(*) AS n FROM people WHERE income > {c} GROUP BY region",
    "SELECT SUM(income) FROM people WHERE region = '{r}' AND age > {a}",
]
REGIONS = ["north", "south", "east", "west"]

# stage -> where the proxy looks functions up, and their names (missing ones skipped,
# so the script runs before and after the change); every call of them is timed.
STAGES = {
    "route": [(proxy.wire.connection, "read_message")],
    "parse+analyze": [(proxy.session, "parse_statements"), (proxy.session, "parse_tokens"),
                      (proxy.wire.route, "_tree"), (proxy.session, "analyze")],
    "cache key": [(proxy.session, "canonical_sql"), (proxy.engine, "cache_key")],
}
if SHAPES is not None:
    STAGES["cache key"].append((SHAPES, "canonical_sql"))
    STAGES["shape cache"] = [(proxy.session, "shape_of"), (SHAPES.ShapeCache, "plan"),
                             (SHAPES.ShapeCache, "remember")]


class Clock:
    """Exclusive thread CPU per stage: a call's time less that of timed calls inside it."""

    def __init__(self) -> None:
        self.spent: dict[str, float] = defaultdict(float)
        self._inner = [0.0]

    def timed(self, function, stage: str):
        def wrapper(*args, **kwargs):
            self._inner.append(0.0)
            start = time.thread_time()
            try:
                return function(*args, **kwargs)
            finally:
                took = time.thread_time() - start
                self.spent[stage] += took - self._inner.pop()
                self._inner[-1] += took

        return wrapper

    def install(self) -> list:
        """Wrap each stage's functions where the proxy looks them up; return what to undo."""
        undo = []
        for stage, places in STAGES.items():
            for owner, name in places:
                if name in vars(owner):
                    undo.append((owner, name, vars(owner)[name]))
                    setattr(owner, name, self.timed(vars(owner)[name], stage))
        return undo


def handle(engine: Engine, session, sql: str) -> None:
    """One simple-query message as a connection handles it in its worker threads: its
    own ``_read_and_check`` (on a stand-in holding the server and session), then each
    statement's work. Before the shape cache that method returned statements alone, and
    each was checked again to run (``Session.execute``); both forms are handled, so the
    script measures either version of the proxy."""
    stand_in = SimpleNamespace(server=SimpleNamespace(rules=engine.rules, engine=engine),
                               session=session, _zones=lambda statements: None)  # no SETs
    for item in Connection._read_and_check(stand_in, sql):  # type: ignore[arg-type]
        if isinstance(item, tuple):
            if item[1] is not None:
                session.run(item[1])
        else:
            list(session.execute(item.text))


def _message(number: int) -> str:
    template = DASHBOARD[number % len(DASHBOARD)]
    return template.format(a=number % 60, b=60 + number % 61, c=1000 + number,
                           r=REGIONS[number % 4])


def main(n: int = 400, shapes: int | None = None) -> None:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "bench.duckdb"
        with duckdb.connect(str(path)) as con:
            con.execute("CREATE TABLE people AS SELECT range AS person_id, "
                        "CAST(range % 90 AS INTEGER) AS age, "
                        "CAST(range * 37 % 100000 AS DOUBLE) AS income, "
                        "['north', 'south', 'east', 'west'][range % 4 + 1] AS region "
                        "FROM range(1000)")
        backend = open_backend(f"duckdb:///{path}")
        engine = Engine(parse_rules(RULES), backend)
        if shapes is not None:  # 0: every statement parsed and analysed, once
            engine.shapes = SHAPES.ShapeCache(shapes)
        session = Session.open(engine, "bench")
        for warm in range(40):
            handle(engine, session, _message(100000 + warm))
        totals: dict[str, list[float]] = defaultdict(list)
        clock = Clock()
        undo = clock.install()
        try:
            for number in range(n):
                clock.spent.clear()
                start = time.thread_time()
                handle(engine, session, _message(number))
                whole = time.thread_time() - start
                for stage in STAGES:
                    totals[stage].append(clock.spent[stage])
                totals["stages"].append(sum(clock.spent.values()))
                totals["rest"].append(whole - sum(clock.spent.values()))
                totals["total"].append(whole)
        finally:
            for module, name, original in undo:
                setattr(module, name, original)
            backend.close()
    print(f"{n} fresh statements ({len(DASHBOARD)} shapes, new literals each), "
          "CPU ms per statement, mean (median):")
    for stage, values in totals.items():
        print(f"  {stage:14} {statistics.fmean(values) * 1e3:6.2f} "
              f"({statistics.median(values) * 1e3:.2f})")


if __name__ == "__main__":
    main(*(int(arg) for arg in sys.argv[1:3]))
