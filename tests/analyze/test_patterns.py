"""LIKE, NOT LIKE, ILIKE and NOT ILIKE with a constant pattern in WHERE, on a protected
table's text column and a joined public table's (``proxy.analyze.patterns``): on both
backends the rows in scope are those PostgreSQL's own LIKE selects (backslash escapes,
``ESCAPE 'c'``, ``ESCAPE ''``), over values made to trip escaping and quoting; every
other use is refused for free."""

from __future__ import annotations

import re

import pytest

from proxy.analyze import analyze, parse_statements, statement_tokens
from proxy.analyze.shapes import ShapeCache, shape_of
from proxy.rules import parse_rules
from proxy.settings import Settings
from tests.factories import open_engine, table_of_rows
from tests.probes import recorded_statistics, refused_for_free

RULES = parse_rules("""
[defaults]
noise_scale = "local"
budget_per_analyst = 10

[analysts.alice]

[tables.items]
[tables.items.columns]
name  = { type = "text" }
kind  = { type = "text" }
price = { type = "float", domain = [0, 100] }
day   = { type = "date" }

[tables.kinds]
public = true
unique = ["code"]
[tables.kinds.columns]
code  = { type = "text" }
label = { type = "text" }
""", "patterns.toml")
NAMES = ["PROMO BRUSHED", "promo plated", "STANDARD", "100%", "100 percent", "a_b", "axb",
         "back\\slash", "back\\\\two", "O'Brien", "é_accent", "", "%", "_", "\\", None]
ITEMS = [(name, "ab"[i % 2], float(i), f"2024-01-{i % 28 + 1:02d}")
         for i, name in enumerate(NAMES)]


def _tables():
    return {"items": table_of_rows(ITEMS, {"name": "TEXT", "kind": "TEXT",
                                           "price": "DOUBLE PRECISION", "day": "DATE"}),
            "kinds": table_of_rows([("a", "Alpha%"), ("b", "Beta_")],
                                   {"code": "TEXT", "label": "TEXT"})}


def _matches(value: str | None, pattern: str, escape: str = "\\",
             fold: bool = False) -> bool:
    """PostgreSQL's LIKE, as a regular expression (the reference)."""
    if value is None:
        return False
    out, i = [], 0
    while i < len(pattern):
        if escape and pattern[i] == escape:
            out.append(re.escape(pattern[i + 1]))
            i += 2
            continue
        out.append({"%": ".*", "_": "."}.get(pattern[i], re.escape(pattern[i])))
        i += 1
    return re.fullmatch("".join(out), value, re.DOTALL | (re.IGNORECASE if fold else 0)) \
        is not None


def _quoted(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


# (the WHERE, the names it keeps by PostgreSQL's rules)
CASES = [
    ("name LIKE 'PROMO%'", lambda n: _matches(n, "PROMO%")),
    ("name ILIKE 'promo%'", lambda n: _matches(n, "promo%", fold=True)),
    ("name NOT LIKE '%o%'", lambda n: n is not None and not _matches(n, "%o%")),
    ("NOT name NOT ILIKE '%O%'", lambda n: _matches(n, "%O%", fold=True)),
    ("name LIKE '100\\%'", lambda n: _matches(n, "100\\%")),
    ("name LIKE 'a\\_b'", lambda n: _matches(n, "a\\_b")),
    ("name LIKE 'a_b'", lambda n: _matches(n, "a_b")),
    ("name LIKE 'back\\\\%'", lambda n: _matches(n, "back\\\\%")),
    ("name LIKE '\\b%'", lambda n: _matches(n, "\\b%")),  # an escaped ordinary character
    ("name LIKE '%!%' ESCAPE '!'", lambda n: _matches(n, "%!%", "!")),
    ("name LIKE 'back\\%' ESCAPE ''", lambda n: _matches(n, "back\\%", "")),
    ("name LIKE 'O''%'", lambda n: _matches(n, "O'%")),
    ("name LIKE '_'", lambda n: _matches(n, "_")),
]


@pytest.fixture(scope="module")
def both_engines(module_backend_url):
    """One engine per backend for the patterns' cases: each compares two statements' statistics
    (nothing charged, no ledger) on the same engine, so they share it; the tables
    loaded once, not once per case."""
    with open_engine(module_backend_url, RULES, _tables) as engine:
        yield engine


@pytest.mark.parametrize("where,keeps", CASES)
def test_a_pattern_keeps_the_rows_postgresql_keeps(both_engines, where, keeps):
    kept = [name for name in NAMES if keeps(name)]
    assert kept  # every case selects something, so the comparison means something
    listed = ", ".join(_quoted(name) for name in kept)
    for aggregate in ("COUNT(*)", "SUM(price)"):
        found = recorded_statistics(both_engines, f"SELECT {aggregate} FROM items WHERE {where}")
        wanted = recorded_statistics(
            both_engines, f"SELECT {aggregate} FROM items WHERE name IN ({listed})")
        assert found[:3] == wanted[:3], where


def test_a_public_columns_pattern_filters_a_join(backend_url):
    with open_engine(backend_url, RULES, _tables) as engine:
        found = recorded_statistics(engine, "SELECT COUNT(*) FROM items i JOIN kinds k "
                                            "ON i.kind = k.code WHERE label LIKE '%\\_'")
        wanted = recorded_statistics(engine, "SELECT COUNT(*) FROM items WHERE kind = 'b'")
        assert found[1] == wanted[1]


REFUSED = [
    ("SELECT COUNT(*) FROM items WHERE name LIKE '\\'", "22025", "must not end with escape"),
    ("SELECT COUNT(*) FROM items WHERE name LIKE 'ab!' ESCAPE '!'", "22025", "escape"),
    ("SELECT COUNT(*) FROM items WHERE name LIKE kind", "0A000", "constant pattern"),
    ("SELECT COUNT(*) FROM items WHERE 'abc' LIKE name", "0A000", "constant pattern"),
    ("SELECT COUNT(*) FROM items WHERE price LIKE '1%'", "42883", "price is float"),
    ("SELECT COUNT(*) FROM items WHERE day LIKE '2024%'", "42883", "day is date"),
    ("SELECT COUNT(*) FROM items WHERE name LIKE 'a%' ESCAPE '!!'", "0A000", "one character"),
    ("SELECT COUNT(*) FROM items WHERE name LIKE ANY ('a%', 'b%')", "0A000", "constant"),
    ("SELECT COUNT(*) FROM items WHERE name SIMILAR TO 'a%'", "0A000", "operator SIMILAR TO"),
    ("SELECT COUNT(*) FROM items WHERE nope LIKE 'a%'", "42703", "not declared"),
]


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    url = f"duckdb:///{tmp_path_factory.mktemp('patterns') / 'data.duckdb'}"
    with open_engine(url, RULES, _tables) as engine:
        yield engine


@pytest.mark.parametrize("sql,sqlstate,fragment", REFUSED)
def test_other_patterns_are_refused_for_free(engine, sql, sqlstate, fragment):
    refused_for_free(engine, sql, sqlstate, fragment)


def test_a_kept_shape_never_binds_a_new_pattern_unread():
    """The shape cache binds only literals the analysis kept as written: a pattern is
    respelled, so another pattern of the same shape is analysed afresh."""
    cache, context = ShapeCache(), ("alice",)

    def shape(sql):
        return shape_of(statement_tokens(sql)[0])

    first = "SELECT COUNT(*) FROM items WHERE name LIKE 'a%' AND price > 3"
    tree = parse_statements(first)[0]
    cache.remember(shape(first), context, RULES, tree, analyze(tree, RULES, Settings()))
    _, again = cache.plan(shape(first.replace("> 3", "> 5")), context, RULES)
    # nothing to escape in 'a%': sent without ESCAPE (patterns.py)
    assert again.where.sql() == ("\"name\" LIKE 'a%' AND \"price\" > 5")
    assert cache.plan(shape(first.replace("'a%'", "'b\\x%'")), context, RULES) is None
