"""``LIKE``, ``NOT LIKE``, ``ILIKE`` and ``NOT ILIKE`` in WHERE: a text column against a
constant pattern, read as PostgreSQL reads it and sent in one spelling every backend
reads alike.

A pattern is a per-record condition like a comparison (a record's own value against
a constant), so it keeps every sensitivity (docs/privacy.md §1, §3). What needs care
is totality and agreement between the backends:

- PostgreSQL's LIKE escapes with a backslash by default, DuckDB's with nothing unless
  ``ESCAPE`` is given, and Spark fails on a backslash before an ordinary character; a
  pattern ending in its escape character fails in PostgreSQL (22025). The pattern is a
  constant, so it is read here, with PostgreSQL's rules (backslash, or the one
  character of ``ESCAPE 'c'``, none with ``ESCAPE ''``): a literal character, ``%`` or
  ``_``; a trailing escape is refused (22025) before anything is spent. It is then
  written again with only ``%``, ``_`` and ``\\`` escaped, by a backslash, with
  ``ESCAPE '\\'`` spelled out: the same condition in PostgreSQL, DuckDB and Spark, and
  one none of them can fail on. A pattern written again without any backslash (no
  literal ``%``, ``_`` or ``\\``) is sent without ``ESCAPE``: each of the three reads a
  pattern without its escape character the same, whatever escape it defaults to, and
  DuckDB reads ``LIKE`` alone as a plain string test it pushes into the scan, where
  ``LIKE … ESCAPE`` is a function it tests on every row after the joins (TPC-H Q09's
  ``p_name LIKE '%green%'``: its first pass 22 s at SF 1 with ``ESCAPE``, 2.3 s without).
- Only columns declared ``text`` (of the protected tables or of public tables joined),
  or ``LOWER``/``UPPER`` of one (Metabase's case-insensitive "contains": ``LOWER(col)
  LIKE '%abc%'``; both total, though beyond ASCII the backends' case mapping may
  differ): LIKE on a number or a date fails in PostgreSQL, after the debit.
- A NULL value gives NULL (the row is out of scope), in every backend.
"""

from __future__ import annotations

from sqlglot import exp

from proxy.errors import NotSupported, Refused
from proxy.rules import Table

PATTERNS = (exp.Like, exp.ILike)
CASED = (exp.Lower, exp.Upper)  # of a text column, before a pattern (Metabase's "contains")
ESCAPE = "\\"


def canonical_patterns(condition: exp.Expression, table: Table, resolve_column
                       ) -> exp.Expression:
    """``condition`` with each LIKE/ILIKE written in the one spelling (module doc); a
    pattern that is not a string constant, a column that is not declared text, or an
    escape that is not one character is refused."""
    for node in list(condition.find_all(exp.Escape, *PATTERNS)):
        if isinstance(node, PATTERNS) and isinstance(node.parent, exp.Escape):
            continue  # its Escape rewrites it
        escape = ESCAPE
        if isinstance(node, exp.Escape):
            given = node.expression
            if not (isinstance(node.this, PATTERNS) and isinstance(given, exp.Literal)
                    and given.is_string and len(given.name) <= 1):
                raise NotSupported("ESCAPE takes one character in quotes, after LIKE or "
                                   "ILIKE: col LIKE 'a!%' ESCAPE '!'")
            escape, like = given.name, node.this
        else:
            like = node
        rewritten = _canonical(like, escape, table, resolve_column)
        if node is condition:
            condition = rewritten
        else:
            node.replace(rewritten)
    return condition


def _canonical(like: exp.Expression, escape: str, table: Table, resolve_column
               ) -> exp.Expression:
    word = "ILIKE" if isinstance(like, exp.ILike) else "LIKE"
    column, pattern = like.this, like.expression
    if not (isinstance(pattern, exp.Literal) and pattern.is_string):
        number = isinstance(pattern, exp.Literal)  # PostgreSQL has no text ~~ integer
        raise NotSupported(f"{word} takes a constant pattern in quotes: col {word} 'abc%'",
                           "42883" if number else None)
    inner = column.this.unnest() if isinstance(column, CASED) else column
    if not isinstance(inner, exp.Column):
        raise NotSupported(f"{word} applies to a text column, or LOWER or UPPER of one: col "
                           f"{word} 'abc%'")
    name = resolve_column(inner)
    declared = table.columns[name]
    if declared.type != "text":
        raise NotSupported(f"{word} applies to text columns; {name} is {declared.type}: "
                           "compare it with =, <, BETWEEN or IN", "42883")  # as PostgreSQL
    written_pattern = respelled(pattern.name, escape)
    written = like.__class__(this=column.copy(), expression=exp.Literal.string(written_pattern),
                             negate=like.args.get("negate"))
    if ESCAPE not in written_pattern:  # nothing escaped: read alike with no ESCAPE at all
        return written
    return exp.Escape(this=written, expression=exp.Literal.string(ESCAPE))


def respelled(pattern: str, escape: str) -> str:
    """``pattern`` read with ``escape`` as PostgreSQL does, written with a backslash
    escaping exactly ``%``, ``_`` and the backslash."""
    out, i = [], 0
    while i < len(pattern):
        char = pattern[i]
        if escape and char == escape:
            if i + 1 == len(pattern):
                raise Refused("LIKE pattern must not end with escape character; escape it "
                              "too to match it", "22025")
            out.append(_literal(pattern[i + 1]))
            i += 2
            continue
        out.append(char if char in "%_" else _literal(char))
        i += 1
    return "".join(out)


def _literal(char: str) -> str:
    return ESCAPE + char if char in "%_" + ESCAPE else char
