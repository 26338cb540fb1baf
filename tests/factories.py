"""The tests' shared builders: rules, tables and their rows, engines, served proxies and
random data sets.

A builder gives a test what it needs made the way every other test makes it; a test
that needs something else says so in the builder's arguments rather than copying it."""

from __future__ import annotations

import datetime as dt
import random
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import NamedTuple

import numpy as np
import psycopg
import pytest

from proxy.backends import open_backend
from proxy.engine import Engine
from proxy.rules import Rules, parse_rules
from tests import wireserver
from tests.databases import load_table, new_database

# -- rules --------------------------------------------------------------------------------

REGIONS = ["north", "south", "east", "west"]


def people_table(*, max_rows_per_unit: int | None = None, individual_queries: bool = True,
                 age: int | None = 120, income: int | None = 1_000_000,
                 regions: list[str] | None = REGIONS) -> str:
    """The rules of the people table: person_id its unit, age in [0, ``age``], income in
    [0, ``income``], region with the keys ``regions`` (None leaves a column out);
    individual queries allowed unless told otherwise."""
    lines = ["[tables.people]", 'privacy_unit = "person_id"']
    if max_rows_per_unit is not None:
        lines.append(f"max_rows_per_unit = {max_rows_per_unit}")
    if individual_queries:
        lines.append("individual_queries = true")
    lines += ["[tables.people.columns]", 'person_id = { type = "int" }']
    if age is not None:
        lines.append(f'age    = {{ type = "int",   domain = [0, {age}] }}')
    if income is not None:
        lines.append(f'income = {{ type = "float", domain = [0, {income}] }}')
    if regions is not None:
        keys = ", ".join(f'"{region}"' for region in regions)
        lines.append(f'region = {{ type = "text",  keys = [{keys}] }}')
    return "\n".join(lines) + "\n"


def served_rules(auth: str = "trust") -> str:
    """The rules most served proxies run under: ``auth`` on the server, ε 0.1 a query,
    alice with a budget of 100, load_people's people and the public regions."""
    return f"""
[server]
auth = "{auth}"

[defaults]
epsilon_per_query = 0.1

[analysts.alice]
budget = 100

{people_table()}
[tables.regions]
public = true
"""


# The in-process engine's rules of tests/test_engine.py, the answer cache's and the time
# quantum's tests: alice's budget pays for three queries at ε 0.3, zoe's for many.
ENGINE_RULES = """
[defaults]
model = "idp"
epsilon_per_query = 0.3
budget_per_analyst = 1.0
report_scale = "rounded"  # the owner's opt-ins: these tests read the bound
noise_scale = "local"  # of raw iDP (the default's own tests: tests/privacy/test_leaks.py)

[analysts.alice]
budget = 1.0

[analysts.zoe]
budget = 100

""" + people_table(max_rows_per_unit=1, individual_queries=False, income=10_000_000) + """
[tables.odd]
[tables.odd.columns]
x = { type = "float", domain = [0, 1] }

[tables.regions]
public = true
"""


# -- tables and their rows ----------------------------------------------------------------

class Table(NamedTuple):
    """A table's rows as columns (name -> values) and its columns' SQL types."""
    columns: dict[str, list]
    types: dict[str, str]


def table_of_rows(rows: list[tuple], types: dict[str, str]) -> Table:
    """The table of ``rows`` (tuples), its columns named and typed in order by ``types``."""
    return Table({name: [row[i] for row in rows] for i, name in enumerate(types)}, types)


def load(url: str, tables: Mapping[str, Table]) -> None:
    """Each table created under its name with its rows, in any backend."""
    for name, table in tables.items():
        load_table(url, name, table.columns, table.types)


PEOPLE_TYPES = {"person_id": "INTEGER", "age": "INTEGER", "income": "DOUBLE PRECISION",
                "region": "TEXT"}


def people(n: int = 2000, seed: int = 7) -> Table:
    """``n`` people for engines: ids from 1, ages 18–89, lognormal incomes, regions."""
    rng = np.random.default_rng(seed)
    return Table({
        "person_id": list(range(1, n + 1)),
        "age": [int(a) for a in rng.integers(18, 90, n)],
        "income": [float(v) for v in np.round(rng.lognormal(10.5, 0.6, n), 2)],
        "region": [str(r) for r in rng.choice(REGIONS, n)],
    }, PEOPLE_TYPES)


ODD = Table({"x": [0.5]}, {"x": "DOUBLE PRECISION"})  # ENGINE_RULES' odd table


def load_people(url: str, n: int = 3000, folder: Path | None = None) -> None:
    """The people and regions tables of served_rules, with n deterministic people (ids
    from 0); on Spark with ``folder``, as Parquet files in ``folder``/people and
    ``folder``/regions."""
    rng = np.random.default_rng(3)
    where = {name: None if folder is None else str(folder / name)
             for name in ("people", "regions")}
    load_table(url, "people", {
        "person_id": list(range(n)),
        "age": [int(a) for a in rng.integers(18, 90, n)],
        "income": [float(v) for v in np.round(rng.lognormal(10.3, 0.5, n), 2)],
        "region": [REGIONS[i] for i in rng.integers(0, 4, n)],
    }, PEOPLE_TYPES, where["people"])
    load_table(url, "regions", {"region": REGIONS, "label": ["N", "S", "E", "W"]},
               {"region": "TEXT", "label": "TEXT"}, where["regions"])


# A table whose every aggregate takes minutes (slow_table's view).
SLOW_TABLE = """
[tables.slow]
[tables.slow.columns]
x = { type = "int", domain = [0, 1000000] }
"""


def slow_table(url: str) -> None:
    """The table of SLOW_TABLE: a view over a huge (DuckDB) or sleepy (PostgreSQL)
    product."""
    if url.startswith("duckdb"):
        import duckdb

        con = duckdb.connect(url.removeprefix("duckdb:///"))
        con.execute("CREATE VIEW slow AS SELECT (a.range * b.range) % 1000 AS x "
                    "FROM range(1000000) a, range(1000000) b")
        con.close()
        return
    with psycopg.connect(url, autocommit=True) as con:
        con.execute("CREATE VIEW slow AS SELECT g + 0 * length(pg_sleep(0.01)::text) AS x "
                    "FROM generate_series(1, 100000) g")


MANY_KEYS = [f"k{i:04d}" for i in range(1000)]
MANY_RULES = """
[analysts.zoe]
budget = 100

[tables.many]
privacy_unit = "id"
max_rows_per_unit = 1
[tables.many.columns]
id  = { type = "int" }
age = { type = "int",  domain = [0, 120] }
""" + "key = { type = \"text\", keys = [" + ", ".join(f'"{k}"' for k in MANY_KEYS) + "] }\n"


def many() -> Table:
    """The table of MANY_RULES: 1,000 declared keys, rows for the first 990 only (3
    each)."""
    n = 2970
    return Table({"id": list(range(n)), "age": [i % 100 for i in range(n)],
                  "key": [MANY_KEYS[i % 990] for i in range(n)]},
                 {"id": "INTEGER", "age": "INTEGER", "key": "TEXT"})


# -- engines ------------------------------------------------------------------------------

Tables = Mapping[str, Table] | Callable[[], Mapping[str, Table]]


@contextmanager
def open_engine(url: str, rules: str | Rules, tables: Tables = (), then: tuple[str, ...] = (),
                **options) -> Iterator[Engine]:
    """An Engine under ``rules`` (their text, or parsed) over ``url`` with ``tables``
    (or what a function of none gives) loaded first and the statements ``then`` run
    (what no Python value holds: ±infinity); its ledger (whose replay writer would
    otherwise go on retrying, logging into later tests) and backend closed afterwards."""
    load(url, dict(tables() if callable(tables) else tables))
    backend = open_backend(url)
    engine = None
    try:
        for statement in then:
            backend.query(statement)
        engine = Engine(rules if isinstance(rules, Rules) else parse_rules(rules), backend,
                        **options)
        yield engine
    finally:
        try:
            if engine is not None:
                engine.ledger.close()
        finally:
            backend.close()


def engine_fixture(rules: str | Rules, tables: Tables = (), *, shared: bool = False,
                   name: str = "engine", **options):
    """A test module's engine fixture: open_engine() on each backend, new for each test, or
    with ``shared`` one per backend for the whole module (for tests that only read the
    tables and look at their own ledger entries)."""
    if shared:
        @pytest.fixture(scope="module", name=name)
        def shared_engine(module_backend_url):
            with open_engine(module_backend_url, rules, tables, **options) as made:
                yield made
        return shared_engine

    @pytest.fixture(name=name)
    def new_engine(backend_url):
        with open_engine(backend_url, rules, tables, **options) as made:
            yield made
    return new_engine


# -- served proxies -----------------------------------------------------------------------

class Served(NamedTuple):
    """What ``idp-proxy serve`` and the admin commands are given: the rules file, the
    backend, the home folder (IDP_PROXY_HOME) and the ledger (None: beside the data)."""
    rules: Path
    backend: str
    home: Path
    ledger: str | None = None

    @classmethod
    def prepare(cls, folder: Path, rules: str, backend: str, people: int | None = 500, *,
                tables: Path | None = None, ledger: str | None = None) -> Served:
        """``rules`` written to ``folder``/rules.toml and ``people`` people (load_people;
        None: none) loaded into ``backend`` (on Spark as Parquet files in ``tables``)."""
        if people is not None:
            load_people(backend, people, tables)
        (folder / "rules.toml").write_text(rules)
        return cls(folder / "rules.toml", backend, folder / "home", ledger)

    def serve(self, *extra: str, **options):
        """The server on a free port (wireserver.running_proxy)."""
        return wireserver.running_proxy(self.rules, self.backend, self.home, *extra,
                                        ledger=self.ledger, **options)

    def admin(self, *args: str, **options):
        """An admin command on the same rules, backend and ledger (wireserver.admin)."""
        return wireserver.admin(self.rules, self.backend, self.home, *args,
                                ledger=self.ledger, **options)


@contextmanager
def backend_database(backend: str, folder: Path, postgres_url: str | None):
    """A DuckDB file in ``folder``, or (``backend`` "postgres") a new database on the
    server at ``postgres_url``, dropped afterwards."""
    if backend == "duckdb":
        yield f"duckdb:///{folder / 'data.duckdb'}"
        return
    with new_database(postgres_url) as url:
        yield url


@contextmanager
def people_proxy(backend: str, folder: Path, postgres_url: str | None = None):
    """``idp-proxy serve`` (trust auth on loopback) over load_people's tables on
    ``backend`` ("duckdb" or "postgres": a new database on ``postgres_url``), for
    tests that share one server (module-scoped fixtures)."""
    with backend_database(backend, folder, postgres_url) as url, \
            Served.prepare(folder, served_rules(), url, people=3000).serve() as running:
        yield running


DEMO_RULES = Path(__file__).resolve().parent.parent / "rules" / "demo.toml"


@contextmanager
def demo_served_fresh(backend: str, folder: Path, postgres_url: str | None = None):
    """The demo served in this process (so that conftest's no_noise reaches its
    mechanisms), with the answer cache off so that every statement is answered fresh
    and charged."""
    rules = folder / "demo.toml"
    rules.write_text(DEMO_RULES.read_text().replace(
        "[defaults]\n", "[defaults]\nanswer_cache = false\n", 1))
    with demo_database(backend, folder, postgres_url) as url, \
            wireserver.serving_in_process(rules, url) as proxy:
        yield proxy


@contextmanager
def demo_database(backend: str, folder: Path, postgres_url: str | None = None):
    """The URL of the demo's tables (as ``idp-proxy serve`` with no options creates
    them), in a DuckDB file or copied into a new PostgreSQL database, column types kept."""
    import duckdb

    from proxy.demo import create_demo
    from proxy.pgtypes import postgres_type

    demo = folder / "demo.duckdb"
    create_demo(demo)
    with backend_database(backend, folder, postgres_url) as url:
        if backend == "postgres":
            con = duckdb.connect(str(demo), read_only=True)
            for (table,) in con.execute("SELECT table_name FROM information_schema.tables "
                                        "ORDER BY table_name").fetchall():
                described = con.execute(f'DESCRIBE "{table}"').fetchall()
                columns = con.execute(f'SELECT * FROM "{table}"').fetchnumpy()
                load_table(url, table, {name: columns[name].tolist() for name, *_ in described},
                           {name: postgres_type(kind) for name, kind, *_ in described})
            con.close()
        else:
            demo.rename(url.removeprefix("duckdb:///"))
        yield url


@contextmanager
def demo_proxy(backend: str, folder: Path, postgres_url: str | None = None):
    """``idp-proxy serve`` under rules/demo.toml over the demo's tables (demo_database),
    a copy of it in ``folder`` (which running_proxy may change)."""
    rules = folder / "demo.toml"
    rules.write_text(DEMO_RULES.read_text())
    with demo_database(backend, folder, postgres_url) as url:
        with wireserver.running_proxy(rules, url, folder / "home") as running:
            running.backend_url = url  # a PostgreSQL test may ask the data itself
            yield running


# -- random data sets ---------------------------------------------------------------------

def _how_many(rng: random.Random, count: int | tuple[int, int]) -> int:
    """``count`` itself, or a number drawn from the range (low, high), both included."""
    return count if isinstance(count, int) else rng.randint(*count)


def random_datasets(seed: int, count: int, unit_rows: Callable[[random.Random, int | None], list],
                    units: int | tuple[int, int] = (0, 5),
                    null_unit: float = 0.0) -> Iterator[list]:
    """``count`` random data sets from one seed, each the rows ``unit_rows(rng, unit)``
    of its units 0, 1, … — ``units`` of them (a range: drawn) — and, with probability
    ``null_unit``, of the NULL unit after them. The draws are made in that order, so a
    data set is the same for the same seed and arguments."""
    rng = random.Random(seed)
    for _ in range(count):
        numbered = range(_how_many(rng, units))
        present = [*numbered, *([None] if null_unit and rng.random() < null_unit else [])]
        yield [row for unit in present for row in unit_rows(rng, unit)]


def rows_of(row: Callable[[random.Random, int | None], object],
            count: int | tuple[int, int] = 1) -> Callable[[random.Random, int | None], list]:
    """``unit_rows`` of random_datasets: ``count`` rows a unit (a range: drawn), each
    ``row(rng, unit)``."""
    return lambda rng, unit: [row(rng, unit) for _ in range(_how_many(rng, count))]


def bucket_offset(moment, seconds: bool, bucket: str) -> int:
    """``guards.moment_offset`` in Python: the whole seconds (``seconds`` false: days) from
    the start of the moment's day, week (from Monday), month or year to it."""
    start = {"day": moment.replace(hour=0, minute=0, second=0, microsecond=0),
             "week": (moment - dt.timedelta(days=moment.weekday())).replace(
                 hour=0, minute=0, second=0, microsecond=0),
             "month": moment.replace(day=1, hour=0, minute=0, second=0, microsecond=0),
             "year": moment.replace(month=1, day=1, hour=0, minute=0, second=0,
                                    microsecond=0)}[bucket]
    return int((moment - start).total_seconds()) if seconds else (moment - start).days
