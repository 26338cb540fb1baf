"""TPC-H with customer as the privacy unit (issue 34): which of the 22 standard queries
the proxy answers, unchanged, and what refuses each of the others.

    python benchmarks/tpch.py --data DIR [--queries DIR] [--only 1,5,19] [--answers 5]
                              [--repeat 3] [--backend duckdb|postgres|sail|spark]

``--data``: the Parquet files ``tpchgen-cli`` writes (``pip install tpchgen-cli``, then
``tpchgen-cli parquet -s 0.01 -o DIR``): customer, orders, lineitem, supplier, part,
partsupp, nation, region. They are loaded into a temporary DuckDB file, and with
``--backend postgres`` from there into a throwaway PostgreSQL cluster (tests/pgserver.py,
the system's binaries), where the proxy and the plain queries then run. With ``--backend
sail`` the Parquet files become tables of a throwaway Sail server (Spark Connect,
tests/sailserver.py), with ``spark`` of a real Spark in local mode (tests/sparkserver.py,
2 GB), where the proxy and the plain queries run, the ledger in the SQLite store beside the DuckDB file
it and the true answers from DuckDB.

``--queries``: a folder of ``q01.sql`` … ``q22.sql``, the text of DuckDB's tpch extension
(``extension/tpch/dbgen/queries`` in DuckDB's source tree). Without it the queries are
read from DuckDB itself (``SELECT query FROM tpch_queries()``), which needs the tpch
extension installed or downloadable.

The rules (``RULES``): customer, orders and lineitem protected with the customer as the
unit: customer's ``c_custkey``, orders' ``o_custkey`` (``unit_of``), and lineitem
through its order (``unit_via = { l_orderkey = "orders.o_orderkey" }``, docs/privacy.md
§3.13); nation, region, part and supplier public with their unique keys, and partsupp
public, unique on (ps_partkey, ps_suppkey) together. ε is 1 per aggregate. Each query is asked
``--answers`` times (default 1; the answer cache off, so each is a fresh draw) through a
session (analysis, pushdown, noise), and the line says ``answered`` with the median over
the answers of the median relative error of its aggregate cells against the true answer (the same query run on DuckDB directly; rows
matched on the other select items; a one-row answer against the one true row, whatever
its keys, saying in how many answers they were the true answer's: Q15's supplier is
chosen privately; an answer without aggregates, Q20's suppliers: how many of its rows
the true answer holds), or the refusal's SQLSTATE and message; the last line gives the
median of the answered queries' medians.

Slowdown (issue 34): per answered query, the median time of ``--repeat`` (default 3; 0
skips it) more fresh answers through a session against the median of as many runs of the
plain query on the backend's own database (the same process and DuckDB instance), both
warm (the answers above ran first; the plain query once untimed), the two taking turns.
The line gives the two times and their ratio; a fresh answer is everything an analyst waits for (analysis,
ledger debit, the pushed-down statements, noise).
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import duckdb
import psycopg
import sqlglot
from sqlglot import exp

from proxy.backends import open_backend
from proxy.engine import Engine
from proxy.errors import ProxyError
from proxy.rules import parse_rules
from proxy.session import Session
from tests.pgserver import throwaway_postgres
from tests.sailserver import throwaway_sail
from tests.sparkserver import throwaway_spark

TABLES = ("customer", "orders", "lineitem", "supplier", "part", "partsupp", "nation",
          "region")

EPSILON = 1  # per aggregate, as CWI's figures (issue 34)
RULES = """
[defaults]
epsilon_per_query = 1
budget_per_analyst = 1000000
max_groups = 100000

[analysts.bench]

[tables.customer]
privacy_unit = "c_custkey"
max_rows_per_unit = 1
[tables.customer.columns]
c_custkey    = { type = "int" }
c_name       = { type = "text" }
c_address    = { type = "text" }
c_nationkey  = { type = "int", keys = [NATIONS] }
c_phone      = { type = "text" }
c_acctbal    = { type = "float", domain = [-999.99, 9999.99], resolution = 0.01 }
c_mktsegment = { type = "text", keys = ["AUTOMOBILE", "BUILDING", "FURNITURE", "HOUSEHOLD",
                                        "MACHINERY"] }
c_comment    = { type = "text" }

[tables.orders]
privacy_unit = "o_custkey"
unit_of = "customer.c_custkey"
max_rows_per_unit = 60  # TPC-H: about 22 orders per ordering customer; 32 at most at SF 0.01
[tables.orders.columns]
o_orderkey      = { type = "int" }
o_custkey       = { type = "int" }
o_orderstatus   = { type = "text", keys = ["F", "O", "P"] }
o_totalprice    = { type = "float", domain = [0, 600000], resolution = 0.01 }
o_orderdate     = { type = "date", domain = [1992-01-01, 1998-12-31] }
o_orderpriority = { type = "text", keys = ["1-URGENT", "2-HIGH", "3-MEDIUM",
                                           "4-NOT SPECIFIED", "5-LOW"] }
o_clerk         = { type = "text" }
o_shippriority  = { type = "int", keys = [0] }
o_comment       = { type = "text" }

[tables.lineitem]
unit_via = { l_orderkey = "orders.o_orderkey" }
[tables.lineitem.columns]
l_orderkey      = { type = "int" }
l_partkey       = { type = "int" }
l_suppkey       = { type = "int" }
l_linenumber    = { type = "int", domain = [1, 7] }
l_quantity      = { type = "float", domain = [1, 50] }
l_extendedprice = { type = "float", domain = [900, 105000], resolution = 0.01 }
l_discount      = { type = "float", domain = [0, 0.1], resolution = 0.01 }
l_tax           = { type = "float", domain = [0, 0.08], resolution = 0.01 }
l_returnflag    = { type = "text", keys = ["A", "N", "R"] }
l_linestatus    = { type = "text", keys = ["F", "O"] }
l_shipdate      = { type = "date", domain = [1992-01-01, 1998-12-31] }
l_commitdate    = { type = "date", domain = [1992-01-01, 1998-12-31] }
l_receiptdate   = { type = "date", domain = [1992-01-01, 1998-12-31] }
l_shipinstruct  = { type = "text", keys = ["COLLECT COD", "DELIVER IN PERSON", "NONE",
                                           "TAKE BACK RETURN"] }
l_shipmode      = { type = "text", keys = ["AIR", "FOB", "MAIL", "RAIL", "REG AIR", "SHIP",
                                           "TRUCK"] }
l_comment       = { type = "text" }

[tables.nation]
public = true
unique = ["n_nationkey"]
[tables.nation.columns]
n_nationkey = { type = "int" }
n_name      = { type = "text", keys = ["ALGERIA", "ARGENTINA", "BRAZIL", "CANADA", "EGYPT",
                                      "ETHIOPIA", "FRANCE", "GERMANY", "INDIA", "INDONESIA",
                                      "IRAN", "IRAQ", "JAPAN", "JORDAN", "KENYA", "MOROCCO",
                                      "MOZAMBIQUE", "PERU", "CHINA", "ROMANIA", "SAUDI ARABIA",
                                      "VIETNAM", "RUSSIA", "UNITED KINGDOM", "UNITED STATES"] }
n_regionkey = { type = "int" }
n_comment   = { type = "text" }

[tables.region]
public = true
unique = ["r_regionkey"]
[tables.region.columns]
r_regionkey = { type = "int" }
r_name      = { type = "text", keys = ["AFRICA", "AMERICA", "ASIA", "EUROPE", "MIDDLE EAST"] }
r_comment   = { type = "text" }

[tables.part]
public = true
unique = ["p_partkey"]
[tables.part.columns]
p_partkey     = { type = "int" }
p_name        = { type = "text" }
p_mfgr        = { type = "text" }
p_brand       = { type = "text" }
p_type        = { type = "text" }
p_size        = { type = "int" }
p_container   = { type = "text" }
p_retailprice = { type = "float" }
p_comment     = { type = "text" }

[tables.supplier]
public = true
unique = ["s_suppkey"]
[tables.supplier.columns]
s_suppkey   = { type = "int" }
s_name      = { type = "text" }
s_address   = { type = "text" }
s_nationkey = { type = "int" }
s_phone     = { type = "text" }
s_acctbal   = { type = "float" }
s_comment   = { type = "text" }

[tables.partsupp]
public = true
unique = [["ps_partkey", "ps_suppkey"]]
[tables.partsupp.columns]
ps_partkey    = { type = "int" }
ps_suppkey    = { type = "int" }
ps_availqty   = { type = "int" }
ps_supplycost = { type = "float", domain = [1, 1000] }
ps_comment    = { type = "text" }
""".replace("NATIONS", ", ".join(str(n) for n in range(25)))


def queries(folder: Path | None) -> dict[int, str]:
    """The 22 standard queries by number, from ``folder`` or from DuckDB's tpch
    extension."""
    if folder is not None:
        return {n: (folder / f"q{n:02d}.sql").read_text() for n in range(1, 23)}
    rows = duckdb.sql("SELECT query_nr, query FROM tpch_queries()").fetchall()
    return {int(number): text for number, text in rows}


def load(data: Path, database: Path) -> None:
    """Each table of ``data``'s Parquet files as a table of a new DuckDB file (decimals
    as doubles, which the rules' ``float`` columns declare)."""
    with duckdb.connect(str(database)) as connection:
        for table in TABLES:
            source = data / f"{table}.parquet"
            columns = connection.execute(
                f"DESCRIBE SELECT * FROM read_parquet('{source}')").fetchall()
            select = ", ".join(
                f"CAST({name} AS DOUBLE) AS {name}" if kind.startswith("DECIMAL")
                else name for name, kind, *_ in columns)
            connection.execute(f"CREATE TABLE {table} AS SELECT {select} "
                               f"FROM read_parquet('{source}')")


def copy_to_spark(data: Path, url: str) -> None:
    """Each Parquet file as a table of the Spark Connect server's warehouse, decimals as
    doubles, written by the backend's own session (Sail keeps tables per session)."""
    from pyspark.sql import SparkSession
    from pyspark.sql.functions import col
    from pyspark.sql.types import DecimalType

    session = SparkSession.builder.remote(url).getOrCreate()
    for table in TABLES:
        frame = session.read.parquet(str((data / f"{table}.parquet").resolve()))
        frame.select([col(field.name).cast("double") if isinstance(field.dataType, DecimalType)
                      else col(field.name) for field in frame.schema.fields]
                     ).write.saveAsTable(table)


def copy_to_postgres(database: Path, url: str) -> None:
    """The DuckDB file's tables into PostgreSQL, typed alike (doubles, dates, text)."""
    kinds = {"BIGINT": "bigint", "INTEGER": "integer", "DOUBLE": "double precision",
             "DATE": "date", "VARCHAR": "text"}
    with duckdb.connect(str(database), read_only=True) as source, \
            psycopg.connect(url, autocommit=True) as target:
        for table in TABLES:
            columns = source.execute(f"DESCRIBE {table}").fetchall()
            target.execute(f"CREATE TABLE {table} (" + ", ".join(
                f"{name} {kinds[kind]}" for name, kind, *_ in columns) + ")")
            with target.cursor().copy(f"COPY {table} FROM STDIN") as copy:
                for row in source.execute(f"SELECT * FROM {table}").fetchall():
                    copy.write_row(row)
            target.execute(f"ANALYZE {table}")


def ask(engine: Engine, sql: str) -> tuple[str, list[tuple] | None]:
    """``answered`` (with the number of rows) and the rows, or the refusal's SQLSTATE
    and message and None."""
    try:
        answers = list(Session.open(engine, "bench").execute(sql))
    except ProxyError as error:
        return f"{error.sqlstate} {error.message}", None
    rows = [tuple(row) for answer in answers for row in (getattr(answer, "rows", None) or ())]
    return f"answered ({len(rows)} rows)", rows


def timed(action) -> float:
    start = time.perf_counter()
    action()
    return time.perf_counter() - start


def slowdown(engine: Engine, backend, sql: str, repeat: int) -> str:
    """``private s / plain s = ratio×``: fresh answers against the plain query, warm,
    the two taking turns (a load that comes and goes weighs on both alike)."""
    try:
        backend.read(sql)  # warm: the answers ran first, the plain query once here
    except ProxyError as error:  # DuckDB's text that another backend does not run
        return f"the plain query failed on this backend: {error.sqlstate} {error.message}"
    runs = [(timed(lambda: backend.read(sql)), timed(lambda: ask(engine, sql)))
            for _ in range(repeat)]
    plain = statistics.median(run[0] for run in runs)
    private = statistics.median(run[1] for run in runs)
    return f"{private:.3f} s / plain {plain:.3f} s = {private / plain:.2f}x"


def _aggregated(sql: str) -> list[bool]:
    """Whether each select item holds an aggregate function, or is a column a CTE
    aggregates (Q15's total_revenue); else it is a group key."""
    tree = sqlglot.parse_one(sql, read="duckdb")
    stepped = {item.alias_or_name for cte in tree.find_all(exp.CTE)
               for item in cte.this.selects if item.find(exp.AggFunc)}
    return [bool(item.find(exp.AggFunc)) or (isinstance(item.unalias(), exp.Column)
                                             and item.unalias().name in stepped)
            for item in tree.selects]


def keys_found(sql: str, noisy: list[tuple], true: list[tuple]) -> bool:
    """Whether every row of the answer has the keys of a row of the true answer (said
    of one-row answers only: a grouped answer lists every public key, empty or not)."""
    keys = [i for i, flag in enumerate(_aggregated(sql)) if not flag]
    truth = {tuple(row[i] for i in keys) for row in true}
    return all(tuple(row[i] for i in keys) in truth for row in noisy)


def rows_found(noisy: list[tuple], true: list[tuple]) -> str:
    """Of an answer without aggregates (public rows chosen by released values, Q20):
    how many of its rows the true answer holds, of how many it has."""
    truth = set(true)
    return f"{sum(row in truth for row in noisy)}/{len(noisy)}"


def relative_errors(sql: str, noisy: list[tuple], true: list[tuple]) -> list[float]:
    """|noisy − true| / |true| of every aggregate cell of the answer (the select items
    holding an aggregate function), rows matched on the other items (the group keys);
    cells whose true value is 0 or NULL, and rows of groups the true answer lacks, are
    left out — but where both answers are one row (Q15's top supplier, chosen
    privately), its cells are compared whatever its keys."""
    aggregated = _aggregated(sql)
    keys = [i for i, flag in enumerate(aggregated) if not flag]
    truth = {tuple(row[i] for i in keys): row for row in true}
    errors = []
    for row in noisy:
        expected = truth.get(tuple(row[i] for i in keys))
        if expected is None and len(noisy) == len(true) == 1:
            expected = true[0]
        if expected is None:
            continue
        for i, flag in enumerate(aggregated):
            if flag and expected[i] not in (None, 0) and row[i] is not None:
                errors.append(abs(float(row[i]) - float(expected[i])) / abs(float(expected[i])))
    return errors


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", type=Path, required=True)
    parser.add_argument("--queries", type=Path)
    parser.add_argument("--only", help="query numbers, comma-separated")
    parser.add_argument("--answers", type=int, default=1, help="fresh answers per query")
    parser.add_argument("--repeat", type=int, default=3,
                        help="timed runs of the slowdown (0: not measured)")
    parser.add_argument("--backend", choices=("duckdb", "postgres", "sail", "spark"),
                        default="duckdb")
    args = parser.parse_args()
    texts = queries(args.queries)
    numbers = [int(n) for n in args.only.split(",")] if args.only else sorted(texts)
    with tempfile.TemporaryDirectory() as folder, contextlib.ExitStack() as stack:
        database = Path(folder) / "tpch.duckdb"
        load(args.data, database)
        url = f"duckdb:///{database}"
        if args.backend == "postgres":
            url = stack.enter_context(throwaway_postgres())
            copy_to_postgres(database, url)
        truth = open_backend(url)
        true = {number: [tuple(row) for row in truth.read(texts[number])]
                for number in numbers}
        # the ledger where the proxy keeps it by default (beside a DuckDB file: its
        # SQLite store; PostgreSQL: the database itself), so the answers' writes do not
        # touch the data file the versions are read from
        backend, store = truth, truth.ledger_store()
        if args.backend in ("sail", "spark"):  # the ledger beside the DuckDB file
            url = stack.enter_context(
                throwaway_sail(Path(folder) / "sail") if args.backend == "sail"
                else throwaway_spark(Path(folder) / "spark", "2g"))
            backend = open_backend(url)
            copy_to_spark(args.data, url)
        try:
            rules = RULES.replace("[defaults]", "[defaults]\nanswer_cache = false")
            engine = Engine(parse_rules(rules, "tpch.toml"), backend, store=store)
            answered, medians = 0, []
            for number in numbers:
                asked = [ask(engine, texts[number]) for _ in range(args.answers)]
                outcome, rows = asked[0]
                if rows is not None:
                    answered += 1
                    each = [statistics.median(errors) for errors in (
                        relative_errors(texts[number], rows, true[number])
                        for _, rows in asked) if errors]
                    if each:
                        medians.append(statistics.median(each))
                        outcome += f", median relative error {medians[-1]:.3%}"
                    if not any(_aggregated(texts[number])):  # rows only (Q20's suppliers)
                        outcome += (f"; rows also in the true answer (of its "
                                    f"{len(set(true[number]))}): " + ", ".join(
                                        rows_found(rows, true[number]) for _, rows in asked))
                    found = sum(keys_found(texts[number], rows, true[number])
                                for _, rows in asked)
                    if found < len(asked) and all(len(rows) == 1 for _, rows in asked):
                        outcome += (f"; the true answer's keys in {found} of {len(asked)} "
                                    "answers")
                    if args.repeat > 0:
                        outcome += "; " + slowdown(engine, backend, texts[number], args.repeat)
                print(f"Q{number:02d}  {outcome}", flush=True)
            print(f"{answered} of {len(numbers)} answered")
            if medians:
                print(f"median relative error of the answered queries at epsilon "
                      f"{EPSILON} per aggregate: {statistics.median(medians):.3%} (median of "
                      f"the {len(medians)} queries' medians over their cells)")
        finally:  # an open Spark Connect session would keep the process from exiting
            for opened in {backend, truth}:
                opened.close()


if __name__ == "__main__":
    main()
