"""TPC-H with customer as the privacy unit (issue 34): which of the 22 standard queries
the proxy answers, unchanged, and what refuses each of the others.

    python benchmarks/tpch.py --data DIR [--queries DIR] [--only 1,5,19]

``--data``: the Parquet files ``tpchgen-cli`` writes (``pip install tpchgen-cli``, then
``tpchgen-cli parquet -s 0.01 -o DIR``): customer, orders, lineitem, supplier, part,
partsupp, nation, region. They are loaded into a temporary DuckDB file.

``--queries``: a folder of ``q01.sql`` … ``q22.sql``, the text of DuckDB's tpch extension
(``extension/tpch/dbgen/queries`` in DuckDB's source tree). Without it the queries are
read from DuckDB itself (``SELECT query FROM tpch_queries()``), which needs the tpch
extension installed or downloadable.

The rules (``RULES``): customer and orders protected with the customer as the unit
(``c_custkey``, ``o_custkey``); lineitem protected row-level, since a table's unit is
one of its own columns (a line item is protected, not a customer: issue 34's item 1
changes this); nation, region, part and supplier public with their unique keys, and
partsupp public. Each query is asked once through a session (analysis, pushdown,
noise), and the line says ``answered`` or the refusal's SQLSTATE and message.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import duckdb

from proxy.backends import open_backend
from proxy.engine import Engine
from proxy.errors import ProxyError
from proxy.rules import parse_rules
from proxy.session import Session

TABLES = ("customer", "orders", "lineitem", "supplier", "part", "partsupp", "nation",
          "region")

RULES = """
[defaults]
epsilon_per_query = 0.1
budget_per_analyst = 1000000
max_groups = 100000

[analysts.bench]

[tables.customer]
privacy_unit = "c_custkey"
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
n_name      = { type = "text" }
n_regionkey = { type = "int" }
n_comment   = { type = "text" }

[tables.region]
public = true
unique = ["r_regionkey"]
[tables.region.columns]
r_regionkey = { type = "int" }
r_name      = { type = "text" }
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
[tables.partsupp.columns]
ps_partkey    = { type = "int" }
ps_suppkey    = { type = "int" }
ps_availqty   = { type = "int" }
ps_supplycost = { type = "float" }
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


def ask(engine: Engine, sql: str) -> str:
    """``answered`` (with the number of rows), or the refusal's SQLSTATE and message."""
    try:
        answers = list(Session.open(engine, "bench").execute(sql))
    except ProxyError as error:
        return f"{error.sqlstate} {error.message}"
    rows = sum(len(answer.rows) for answer in answers if getattr(answer, "rows", None))
    return f"answered ({rows} rows)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", type=Path, required=True)
    parser.add_argument("--queries", type=Path)
    parser.add_argument("--only", help="query numbers, comma-separated")
    args = parser.parse_args()
    texts = queries(args.queries)
    numbers = [int(n) for n in args.only.split(",")] if args.only else sorted(texts)
    with tempfile.TemporaryDirectory() as folder:
        database = Path(folder) / "tpch.duckdb"
        load(args.data, database)
        backend = open_backend(f"duckdb:///{database}")
        try:
            engine = Engine(parse_rules(RULES, "tpch.toml"), backend)
            answered = 0
            for number in numbers:
                outcome = ask(engine, texts[number])
                answered += outcome.startswith("answered")
                print(f"Q{number:02d}  {outcome}", flush=True)
            print(f"{answered} of {len(numbers)} answered")
        finally:
            backend.close()


if __name__ == "__main__":
    main()
