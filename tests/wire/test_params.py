"""Parameter types inferred from the declared column a `$n` is compared with, for every
column type the rules know (clients that declare none rely on them)."""

from __future__ import annotations

from proxy.pgtypes import BOOL, DATE, FLOAT8, INT8, TEXT
from proxy.rules import parse_rules
from proxy.wire.params import bind, dummy_values, infer

RULES = parse_rules("""
[tables.t]
[tables.t.columns]
n = { type = "int", domain = [0, 9] }
x = { type = "float", domain = [0, 1] }
s = { type = "text" }
ok = { type = "bool" }
d = { type = "date" }

[tables.r]
public = true
unique = ["code"]
[tables.r.columns]
code = { type = "text" }
zone = { type = "int" }
n = { type = "text" }
""")


def test_each_declared_column_type_gives_its_parameter_type():
    sql = ("SELECT COUNT(*) FROM t WHERE n > $1 AND x < $2 AND s = $3 AND ok = $4 "
           "AND d >= $5 LIMIT $6")
    kinds = infer(sql, (), RULES)
    assert kinds == (INT8, FLOAT8, TEXT, BOOL, DATE, INT8)
    assert "ok = FALSE" in bind(sql, kinds, dummy_values(kinds))


def test_a_joined_public_tables_columns_give_their_parameter_types():
    sql = ("SELECT COUNT(*) FROM t JOIN r AS g ON t.s = g.code WHERE zone > $1 AND g.n = $2 "
           "AND n > $3")
    assert infer(sql, (), RULES) == (INT8, TEXT, INT8)  # unqualified n: the first table's
