"""Parameter types inferred from the declared column a `$n` is compared with, for every
column type the rules know (clients that declare none rely on them)."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import psycopg
import pytest
import sqlglot

from proxy.pgtypes import BOOL, DATE, FLOAT8, INT8, TEXT
from proxy.rules import parse_rules
from proxy.wire import types
from proxy.wire.params import BadParameter, _bound_by_parse, bind, dummy_values, infer

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


@pytest.mark.parametrize("sql, values", [
    ("SELECT COUNT(*) FROM t WHERE n BETWEEN $1 AND 50 AND x <= $2", (5, 1001.5)),
    ("SELECT COUNT(*) FROM t WHERE n-$1 > 0 AND x>-$2", (-5, -0.25)),  # never a -- comment
    ("SELECT COUNT(*) FROM t WHERE s = $1 OR s=$1 || '$2' /* $2 */", ("it's -- not\\", 7)),
    ("SELECT COUNT(*) FROM t WHERE d >= $1::date AND ok = $2 AND s IS DISTINCT FROM $3",
     (dt.date(2020, 1, 2), True, None)),
    ("SELECT SUM(x) FROM t WHERE n IN ($2, $1) LIMIT $3", (Decimal("1E+1"), 2, 3)),
    ("SELECT MEDIAN(x) FROM t WHERE x < $1", (dt.datetime(2020, 1, 2, 3, 4),)),
])
def test_values_spliced_into_the_text_read_as_the_parsed_and_rendered_statement(sql, values):
    """``bind`` splices each literal where its ``$n`` stands (no parse): the text parses
    to the same statement as the one sqlglot parsed, bound and rendered; a ``$n`` in a
    string or a comment is left as it is."""
    spliced = bind(sql, (), values)
    assert (sqlglot.parse_one(spliced, read="postgres").sql(dialect="postgres")
            == sqlglot.parse_one(_bound_by_parse(sql, (), values), read="postgres").sql(
                dialect="postgres"))
    assert ("'$2'" in spliced) == ("'$2'" in sql) and ("/* $2 */" in spliced) == (
        "/* $2 */" in sql)


def test_a_parameter_without_its_value_or_a_non_finite_one_is_refused():
    with pytest.raises(BadParameter, match=r"uses \$3 but 2"):
        bind("SELECT COUNT(*) FROM t WHERE n > $1 AND n < $3", (), (1, 2))
    with pytest.raises(BadParameter, match="finite"):
        bind("SELECT COUNT(*) FROM t WHERE x > $1", (), (float("nan"),))


@pytest.mark.parametrize("sql,what", [
    ("SELECT to_char(d, $1), COUNT(*) FROM t GROUP BY 1", "a to_char format"),
    ("SELECT date_trunc($1, d), COUNT(*) FROM t GROUP BY 1", "a date_trunc unit"),
    ("SELECT d AT TIME ZONE $1, COUNT(*) FROM t GROUP BY 1", "an AT TIME ZONE zone"),
])
def test_a_parameter_that_decides_the_groups_is_refused_with_what_it_stands_for(sql, what):
    """A format, unit or zone decides the keys, so the analysis reads it as written; a
    parameter there was described with a stand-in and refused with a message about it
    ("…not 'None'", "got ", "time zone '' is not a zone name"; the review of
    2026-11-29). Now the refusal names it."""
    from proxy.errors import NotSupported
    with pytest.raises(NotSupported, match=f"\\$1 stands for {what}.*write its value"):
        infer(sql, (), RULES)


@pytest.mark.parametrize("sql, kinds", [
    ("SELECT COUNT(*) * $1 FROM t", (INT8,)),
    ("SELECT region, SUM(x) / $1 FROM t GROUP BY 1", (FLOAT8,)),
    ("SELECT CASE WHEN $1 THEN COUNT(*) END FROM t", (BOOL,)),
    ("SELECT COUNT(*) FROM t WHERE $1 AND n > $2", (BOOL, INT8)),
])
def test_a_parameter_beside_an_aggregate_or_as_a_condition_gets_postgresql_s_type(sql, kinds):
    """PostgreSQL infers bigint beside COUNT, double precision beside SUM, boolean where a
    condition stands; the proxy said text, and the statement was refused at Parse with a
    message about the stand-in (the review of 2026-11-29)."""
    assert infer(sql, (), RULES) == kinds
    bind(sql, kinds, dummy_values(kinds))


# what PostgreSQL's boolin reads, and what it refuses
_BOOL_TEXTS = ["t", "tr", "tru", "true", "TRUE", " True\t", "truee", "f", "fa", "fals",
               "false", "y", "ye", "yes", "n", "no", "non", "o", "on", "of", "off", "offf",
               "1", "0", "01", "10", "", " ", "\u00a0true", "ｔｒｕｅ", "yess", "nope"]


def test_a_bool_parameter_in_text_is_read_as_postgresql_reads_it(postgres_url):
    """Bound in text, a bool is read as PostgreSQL's boolin reads it (prefixes of true,
    false, yes, no; on and off from two letters; 1 and 0; ASCII blanks around): 'tr' and
    'of' were refused, a no-break space was taken as a blank."""
    with psycopg.connect(postgres_url, autocommit=True) as pg:
        for text in _BOOL_TEXTS:
            result = pg.pgconn.exec_params(b"SELECT $1::bool", [text.encode()], [BOOL])
            if result.status == psycopg.pq.ExecStatus.TUPLES_OK:
                expected = result.get_value(0, 0) == b"t"
                assert types.decode(text.encode(), BOOL, False) is expected, text
            else:
                with pytest.raises(types.BadValue):
                    types.decode(text.encode(), BOOL, False)
