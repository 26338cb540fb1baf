"""Guards that make the backend SQL of an aggregate's expression *total*: for every
row value (NULL, NaN, ±inf, denormals, huge values, anything in or out of a declared
domain) it computes a finite number or NULL on DuckDB, PostgreSQL and Spark, and never
raises (docs/privacy.md §3.6, "Totality"). Each guard mentions its operand once, so a
guarded expression is linear in the size of the analyst's expression (a guard that
wrote its operand twice made SQL that doubled per level).

The rules, with Python mirrors that compute exactly what the engines compute (IEEE
doubles, round to nearest), so the analyser's intervals and the fuzzer's reference
(tests/totality.py) follow the SQL:

- ``within(v, B)``: v when |v| < B; NULL when v is NULL, NaN or at least B; −B when at
  most −B. Written NULLIF(LEAST(GREATEST(COALESCE(v, B), −B), B), B): GREATEST and LEAST
  skip NULL on every engine, so NULL is carried as the value B, which the NULLIF turns
  back into NULL (values at or above B go with it).
- ``snap(v)``: (v + 2⁻⁴⁵⁰) − 2⁻⁴⁵⁰. Exactly v when |v| ≥ 2⁻³⁹⁵ (≈ 1.2·10⁻¹¹⁹); below,
  rounded to a multiple of about 2⁻⁵⁰³, so 0 or at least 2⁻⁵⁰³ (≈ 3.8·10⁻¹⁵²) in
  magnitude; monotone, so an interval [a, b] becomes [snap(a), snap(b)].
- ``operand(v)`` = within(snap(v), 2⁵⁰⁰): every operand of ``*`` and every dividend.
  A product of two is 0 or between 2⁻¹⁰⁰⁶ and 2¹⁰⁰⁰, a quotient by a constant c with
  10⁻¹⁵⁰ ≤ |c| ≤ 10¹⁵⁰ between 10⁻³⁰² and 10³⁰¹: PostgreSQL's underflow error (a product
  or quotient of non-zero doubles that rounds to 0) and overflow cannot happen.
- ``clamp(v, lo, hi)``: v clamped to [lo, hi], NULL kept, v written once (NULL is
  carried as ∓2¹⁰²³ through each side's LEAST/GREATEST; every guarded value is far
  smaller, see ``MAGNITUDE_LIMIT``).
"""

from __future__ import annotations

import math

from sqlglot import exp

DOUBLE = exp.DataType.build("double")
SNAP = 2.0 ** -450
OPERAND_BOUND = 2.0 ** 500
WHOLE_BOUND = 2.0 ** 63  # arguments of rounding functions and integer casts
DIVISOR_RANGE = (1e-150, 1e150)
# Every guarded expression's value stays below this in magnitude (checked structurally
# by the analyser), so the clamp's sentinel 2^1023 is never a value.
MAGNITUDE_LIMIT = 2.0 ** 1020
_SENTINEL = 2.0 ** 1023


def number(value: float) -> exp.Expression:
    """A double constant: CAST(<shortest repr> AS DOUBLE), the same double everywhere."""
    return exp.cast(constant(value), DOUBLE.copy(), copy=False)


def constant(value: float) -> exp.Expression:
    """A constant beside a DOUBLE operand (which makes it one on every engine: PostgreSQL
    reads the numeric text exactly and converts it to the nearest double, as Python's
    ``repr`` round-trips); negative ones parenthesised."""
    literal = exp.Literal.number(repr(float(value)))
    return exp.paren(literal, copy=False) if value < 0 else literal


def within(value: exp.Expression, bound: float) -> exp.Expression:
    """value when |value| < bound; NULL when NULL, NaN or at least bound; −bound when at
    most −bound. ``value`` is used, not copied."""
    carried = exp.Coalesce(this=value, expressions=[constant(bound)])
    low = exp.Greatest(this=carried, expressions=[constant(-bound)], ignore_nulls=True)
    high = exp.Least(this=low, expressions=[constant(bound)], ignore_nulls=True)
    return exp.Nullif(this=high, expression=constant(bound))


def within_value(value: float | None, bound: float) -> float | None:
    if value is None or math.isnan(value) or value >= bound:
        return None
    return max(value, -bound)


def snap(value: exp.Expression) -> exp.Expression:
    """((value) + 2⁻⁴⁵⁰ − 2⁻⁴⁵⁰), parenthesised; ``value`` is used, not copied (and not
    parenthesised again: + and − are left-associative and bind loosest)."""
    return exp.paren(exp.Sub(this=exp.Add(this=value, expression=constant(SNAP)),
                             expression=constant(SNAP)), copy=False)


def snap_value(value: float) -> float:
    return (value + SNAP) - SNAP


def operand(value: exp.Expression, bound: float = math.inf) -> exp.Expression:
    """within(snap(value), 2⁵⁰⁰): an operand of * or a dividend. ``bound``: what the SQL
    itself bounds |value| by (not what the declared domains say), where known; within
    it, the guard at ±2⁵⁰⁰ cannot act and is not written."""
    snapped = snap(value)
    return snapped if bound < OPERAND_BOUND else within(snapped, OPERAND_BOUND)


def clamp(value: exp.Expression, low: float, high: float) -> exp.Expression:
    """value clamped to [low, high], NULL staying NULL (NaN goes to high); ``value`` is
    used, not copied, and written once."""
    top = exp.Least(this=exp.Coalesce(this=value, expressions=[constant(-_SENTINEL)]),
                    expressions=[constant(high)], ignore_nulls=True)
    top = exp.Nullif(this=top, expression=constant(-_SENTINEL))
    bottom = exp.Greatest(this=exp.Coalesce(this=top, expressions=[constant(_SENTINEL)]),
                          expressions=[constant(low)], ignore_nulls=True)
    return exp.Nullif(this=bottom, expression=constant(_SENTINEL))


def depth(tree: exp.Expression) -> int:
    """The nesting depth of a tree (without recursion: the trees checked are deep)."""
    deepest, stack = 0, [(tree, 1)]
    while stack:
        node, level = stack.pop()
        deepest = max(deepest, level)
        stack.extend((child, level + 1) for child in node.iter_expressions())
    return deepest
