"""Comparisons as the analysis reads them, below every module that reads conditions
(``predicate``, ``key_restriction``, ``constants``, ``shapes``): a comparison with its
operands swapped, each comparison on two values computed here, and whether a number
literal lies beyond a double's range."""

from __future__ import annotations

import math
from decimal import Decimal, InvalidOperation

from sqlglot import exp

# a comparison with its operands swapped (``5 < n`` is ``n > 5``)
FLIPPED = {exp.GT: exp.LT, exp.GTE: exp.LTE, exp.LT: exp.GT, exp.LTE: exp.GTE,
           exp.EQ: exp.EQ, exp.NEQ: exp.NEQ}
# each comparison on two values the analysis computes itself
HOLDS = {exp.EQ: lambda a, b: a == b, exp.NEQ: lambda a, b: a != b,
         exp.LT: lambda a, b: a < b, exp.LTE: lambda a, b: a <= b,
         exp.GT: lambda a, b: a > b, exp.GTE: lambda a, b: a >= b}


def beyond_double(text: str) -> bool:
    """Whether a number literal is out of a double's range: beyond about 1.8·10³⁰⁸ in
    magnitude, or not 0 but closer to 0 than the smallest double. PostgreSQL fails
    ("out of range for type double precision") when it reads such a number as a double,
    which it does to compare it with a float column, after the query is charged."""
    try:
        value = Decimal(text)
    except InvalidOperation:
        return False
    as_double = float(value)
    return math.isinf(as_double) or (as_double == 0 and value != 0)


def between_as_range(node: exp.Between) -> exp.And:
    """``x BETWEEN a AND b`` as ``x >= a AND x <= b``, which it is (not a SYMMETRIC one:
    the caller decides that first)."""
    return exp.And(this=exp.GTE(this=node.this, expression=node.args["low"]),
                   expression=exp.LTE(this=node.this, expression=node.args["high"]))
