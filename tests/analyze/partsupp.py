"""A small stand-in for TPC-H's lineitem (protected, one customer per two line items),
partsupp, part and supplier (public), with Q20's statement over them: the tests of a
subquery staged inside a public subquery and of keys read as the pairs a public table
holds share it."""

from __future__ import annotations

from tests.factories import Table

RULES = """
[defaults]
model = "dp"
epsilon_per_query = 0.5
budget_per_analyst = 100
max_groups = 100000  # a stage of two keys and a value is not an answer of 300,000 values

[analysts.alice]

[analysts.poor]
budget = 0.4

[tables.lines]
privacy_unit = "cust"
max_rows_per_unit = 2
[tables.lines.columns]
cust   = { type = "int" }
l_part = { type = "int" }
l_supp = { type = "int" }
qty    = { type = "float", domain = [0, 50] }

[tables.stock]
public = true
unique = [["ps_part", "ps_supp"]]
[tables.stock.columns]
ps_part = { type = "int" }
ps_supp = { type = "int" }
avail   = { type = "int" }

[tables.parts]
public = true
unique = ["p_key"]
[tables.parts.columns]
p_key  = { type = "int" }
p_name = { type = "text" }

[tables.suppliers]
public = true
unique = ["s_key"]
[tables.suppliers.columns]
s_key  = { type = "int" }
s_name = { type = "text" }
"""
# (part, supplier) pairs stocked and their line items' quantities: (1, 1) ships 30 (half:
# 15 > 10 in stock), (1, 2) 40 (20 < 30), (2, 2) 20 (10 > 5), (3, 3) is no forest part,
# (4, 3) ships nothing: its value is released like any other's (0 without noise: 1 > 0)
STOCK = Table({"ps_part": [1, 1, 2, 3, 4], "ps_supp": [1, 2, 2, 3, 3],
               "avail": [10, 30, 5, 100, 1]},
              {"ps_part": "INTEGER", "ps_supp": "INTEGER", "avail": "INTEGER"})
SHIPPED = {(1, 1): [10.0] * 3, (1, 2): [10.0] * 4, (2, 2): [5.0] * 4, (3, 3): [50.0] * 2}
ITEMS = [(pair, qty) for pair, quantities in SHIPPED.items() for qty in quantities]
LINES = Table({"cust": [i // 2 for i in range(len(ITEMS))],
               "l_part": [part for (part, _), _ in ITEMS],
               "l_supp": [supp for (_, supp), _ in ITEMS], "qty": [q for _, q in ITEMS]},
              {"cust": "INTEGER", "l_part": "INTEGER", "l_supp": "INTEGER",
               "qty": "DOUBLE PRECISION"})
PARTS = Table({"p_key": [1, 2, 3, 4], "p_name": ["forest a", "forest b", "oak", "forest c"]},
              {"p_key": "INTEGER", "p_name": "TEXT"})
SUPPLIERS = Table({"s_key": [1, 2, 3], "s_name": ["s1", "s2", "s3"]},
                  {"s_key": "INTEGER", "s_name": "TEXT"})

Q20 = ("SELECT s_name FROM suppliers WHERE s_key IN (SELECT ps_supp FROM stock WHERE ps_part "
       "IN (SELECT p_key FROM parts WHERE p_name LIKE 'forest%') AND avail > (SELECT 0.5 * "
       "SUM(qty) FROM lines WHERE l_part = ps_part AND l_supp = ps_supp)) ORDER BY s_name")
