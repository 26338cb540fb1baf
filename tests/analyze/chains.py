"""TPC-H's shape in miniature for the tests of chains, joins and EXISTS (issue 34):
customer, orders and lineitem protected with the customer as the unit (orders by
``unit_of``, lineitem through its order), supplier, nation, region, part and partsupp
public, with NULL keys and dangling references; tests/analyze/test_joins_chains.py reads
them on DuckDB and PostgreSQL, tests/backends/test_spark.py on Sail."""

from __future__ import annotations

from tests.factories import table_of_rows

RULES = """
[defaults]
noise_scale = "local"  # raw iDP: the statistics its sensitivities read
budget_per_analyst = 10

[analysts.alice]

[tables.customer]
privacy_unit = "c_custkey"
max_rows_per_unit = 1
[tables.customer.columns]
c_custkey   = { type = "int" }
c_nationkey = { type = "int" }

[tables.orders]
privacy_unit = "o_custkey"
unit_of = "customer.c_custkey"
max_rows_per_unit = 3
[tables.orders.columns]
o_orderkey = { type = "int" }
o_custkey  = { type = "int" }
o_comment  = { type = "text" }

[tables.lineitem]
unit_via = { l_orderkey = "orders.o_orderkey" }
[tables.lineitem.columns]
l_orderkey = { type = "int" }
l_partkey  = { type = "int" }
l_suppkey  = { type = "int" }
l_price    = { type = "float", domain = [0, 100] }

[tables.supplier]
public = true
unique = ["s_suppkey"]
[tables.supplier.columns]
s_suppkey   = { type = "int" }
s_nationkey = { type = "int" }

[tables.nation]
public = true
unique = ["n_nationkey"]
[tables.nation.columns]
n_nationkey = { type = "int" }
n_name      = { type = "text" }
n_regionkey = { type = "int" }

[tables.region]
public = true
unique = ["r_regionkey"]
[tables.region.columns]
r_regionkey = { type = "int" }
r_name      = { type = "text" }

[tables.part]
public = true
unique = ["p_partkey"]
[tables.part.columns]
p_partkey = { type = "int" }
p_type    = { type = "text" }
p_weight  = { type = "float", domain = [0, 5] }

[tables.partsupp]
public = true
unique = [["ps_partkey", "ps_suppkey"]]
[tables.partsupp.columns]
ps_partkey = { type = "int" }
ps_suppkey = { type = "int" }
ps_cost    = { type = "float", domain = [0, 10] }

[tables.visits]
privacy_unit = "person_id"
[tables.visits.columns]
person_id = { type = "int" }
"""
REGIONS = [(1, "east"), (2, "west")]
NATIONS = [(10, "ab", 1), (11, "cd", 1), (12, "ef", 2), (13, "gh", None)]
# supplier 4's nation does not exist, supplier 5's is NULL; l_suppkey 9 dangles
SUPPLIERS = [(1, 10), (2, 11), (3, 12), (4, 99), (5, None), (6, 13)]
PARTS = [(1, "PROMO tin", 2.0), (2, "plain", 7.5), (3, "PROMOTED", None), (4, None, 1.0)]
# (part, supplier) unique together; some pairs of the line items have no row
PARTSUPP = [(p, s, p + s / 10) for p in range(1, 6) for s in range(1, 8) if (p + s) % 3]
PARTSUPP += [(None, 1, 1.0), (1, None, 1.0)]
CUSTOMERS = [(c, 10 + c % 4) for c in range(1, 8)]
# customer c has c % 3 + 1 orders; every third one has "special requests" in its comment
ORDERS = [(100 * c + k, c, "special requests" if (c + k) % 3 == 0 else "sealed")
          for c in range(1, 8) for k in range(c % 3 + 1)]
ORDERS += [(900, None, "sealed")]
# every other line item from a supplier of its customer's nation (4: one that dangles)
LINES = [(o, (o + i) % 5 + 1, o // 100 % 4 + 1 if i % 2 else (o + 2 * i) % 7 + 1,
          float((o * 7 + i) % 120)) for o, *_ in ORDERS for i in range(o % 4 + 1)]
LINES += [(777, 1, 1, 5.0)]


def tables():
    return {
        "customer": table_of_rows(CUSTOMERS, {"c_custkey": "BIGINT", "c_nationkey": "BIGINT"}),
        "orders": table_of_rows(ORDERS, {"o_orderkey": "BIGINT", "o_custkey": "BIGINT",
                                         "o_comment": "TEXT"}),
        "lineitem": table_of_rows(LINES, {"l_orderkey": "BIGINT", "l_partkey": "BIGINT",
                                          "l_suppkey": "BIGINT",
                                          "l_price": "DOUBLE PRECISION"}),
        "supplier": table_of_rows(SUPPLIERS, {"s_suppkey": "BIGINT", "s_nationkey": "BIGINT"}),
        "nation": table_of_rows(NATIONS, {"n_nationkey": "BIGINT", "n_name": "TEXT",
                                          "n_regionkey": "BIGINT"}),
        "region": table_of_rows(REGIONS, {"r_regionkey": "BIGINT", "r_name": "TEXT"}),
        "part": table_of_rows(PARTS, {"p_partkey": "BIGINT", "p_type": "TEXT",
                                      "p_weight": "DOUBLE PRECISION"}),
        "partsupp": table_of_rows(PARTSUPP, {"ps_partkey": "BIGINT", "ps_suppkey": "BIGINT",
                                             "ps_cost": "DOUBLE PRECISION"}),
        "visits": table_of_rows([(1,)], {"person_id": "BIGINT"}),
    }
