"""EXPLAIN: what a statement would release and spend, shown without reading the data or
spending anything (psql's ``EXPLAIN``, DBeaver's plan button).

The proxy's plan is its releases — each aggregate query, its mechanism and ε — all of
them decided from the statement's text and the rules, so showing them reads nothing
private. ``EXPLAIN ANALYZE`` would compute the answer: refused (send the statement
itself; its NOTICE says what it spent). Formats other than text are refused; the other
options (VERBOSE, COSTS, …) change nothing here.
"""

from __future__ import annotations

import re

from sqlglot import exp

from proxy.errors import NotSupported, SyntaxProblem

_OPTION = re.compile(r"\s*([A-Za-z_]+)(?:\s+([A-Za-z_0-9']+))?\s*")
_OFF = ("false", "off", "0")


def explain_rest(tree: exp.Expression) -> str | None:
    """What follows the word EXPLAIN in a parsed statement (sqlglot keeps it as text),
    "" when nothing does; None when the statement is no EXPLAIN."""
    if not (isinstance(tree, exp.Command) and tree.name.upper() == "EXPLAIN"):
        return None
    return tree.expression.name if tree.expression is not None else ""


def explained(rest: str) -> str:
    """The statement ``EXPLAIN [( option [, …] )] [ANALYZE] [VERBOSE] statement`` wraps,
    from what follows the word EXPLAIN; refused where it would run it."""
    rest = rest.strip()
    if rest.startswith("("):
        end = rest.find(")")
        if end < 0:
            raise SyntaxProblem('syntax error at end of input: EXPLAIN ( … ) misses ")"')
        for option in rest[1:end].split(","):
            match = _OPTION.fullmatch(option)
            if match is None:
                raise SyntaxProblem(f"syntax error in EXPLAIN option {option.strip()!r}")
            name, value = match.group(1).lower(), (match.group(2) or "").strip("'").lower()
            if name in ("analyze", "analyse") and value not in _OFF:
                raise _analyzed()
            if name == "format" and value != "text":
                raise NotSupported(f"EXPLAIN (FORMAT {value.upper()}) is not supported; "
                                   "EXPLAIN shows the releases as text")
        rest = rest[end + 1:].strip()
    while rest.split(None, 1)[:1] and rest.split(None, 1)[0].upper() in (
            "ANALYZE", "ANALYSE", "VERBOSE"):
        if rest.split(None, 1)[0].upper() != "VERBOSE":
            raise _analyzed()
        rest = rest.split(None, 1)[1] if len(rest.split(None, 1)) > 1 else ""
    if not rest:
        raise SyntaxProblem("EXPLAIN takes a statement: EXPLAIN SELECT COUNT(*) FROM t")
    return rest


def _analyzed() -> NotSupported:
    return NotSupported("EXPLAIN ANALYZE would compute the answer and spend its epsilon; "
                        "send the statement itself (its NOTICE says what it spent), or "
                        "EXPLAIN alone to see what it would spend")
