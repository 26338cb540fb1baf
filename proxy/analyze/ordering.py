"""ORDER BY and LIMIT of an answer: applied to its released rows, so ORDER BY names a
result column (by position, name or the same expression) and LIMIT is a whole number.
Read alike for an aggregate query and for a filter's values (``key_listing``)."""

from __future__ import annotations

from decimal import Decimal, InvalidOperation

from sqlglot import exp

from proxy.errors import AmbiguousColumn, NotSupported


def order_by(select: exp.Select, names: list[str]) -> tuple[tuple[int, bool, bool], ...]:
    """(result column, descending, NULLs first) for each ORDER BY term; ``names``: the
    result columns'. Refused where a term is no result column."""
    order = select.args.get("order")
    if not order:
        return ()
    keys = []
    for ordered in order.expressions:
        target = ordered.this
        index = None
        if isinstance(target, exp.Literal) and not target.is_string:
            index = int(target.name) - 1 if target.name.isdigit() else None  # not 0.5, 1e0
        elif isinstance(target, exp.Column) and not target.table:
            _unambiguous(select, target.this, names)
            index = _named(target.this, names)
        else:
            rendered = [item.this if isinstance(item, exp.Alias) else item
                        for item in select.expressions]
            matches = [i for i, e in enumerate(rendered) if e == target]
            index = matches[0] if matches else None
        if index is not None and not 0 <= index < len(names):
            raise NotSupported(f"ORDER BY position {index + 1} is not in the select list "
                               f"(1 to {len(names)})", "42P10")
        if index is None:
            raise NotSupported("ORDER BY must name a result column (by name, alias or position); "
                               "it is applied to the noisy answers")
        keys.append(ordering_of(index, ordered))
    return tuple(keys)


def _named(name: exp.Identifier, names: list[str]) -> int | None:
    """The result column ``name`` names, as PostgreSQL folds it (unquoted: lower case)
    and then matches exactly: ``ORDER BY "N"`` and ``ORDER BY n`` are two columns (the
    first of any case was taken: the review of 2026-11-29); a name matching none
    exactly but one whatever its case (an unquoted alias kept as written) is that one."""
    folded = folded_name(name)
    if folded in names:
        return names.index(folded)
    alike = [i for i, known in enumerate(names) if known.lower() == folded.lower()]
    return alike[0] if len(alike) == 1 and not name.quoted else None


def _unambiguous(select: exp.Select, name: exp.Identifier, names: list[str]) -> None:
    """PostgreSQL's 42702 where the name ORDER BY reads is that of two result columns
    that are not the same expression (``SELECT a AS x, b AS X … ORDER BY x``: aliases
    folded as PostgreSQL folds them); the same expression twice is one column."""
    if len(select.expressions) != len(names):
        return
    wanted = folded_name(name)
    items = [item.unalias() for item, known in zip(select.expressions, names)
             if (folded_name(item.args["alias"]) if isinstance(item, exp.Alias)
                 else known) == wanted]
    if any(item != items[0] for item in items[1:]):
        raise AmbiguousColumn(f'ORDER BY "{wanted}" is ambiguous')


def folded_name(name: exp.Identifier) -> str:
    """A name as PostgreSQL reads it: unquoted in lower case, quoted as written."""
    return name.name if name.quoted else name.name.lower()


def ordering_of(index: int, ordered: exp.Ordered) -> tuple[int, bool, bool]:
    """(``index``, descending, NULLs first) of an ORDER BY term: NULLS FIRST or LAST as
    written, else PostgreSQL's (first when descending), which the parser fills in."""
    return index, bool(ordered.args.get("desc")), bool(ordered.args.get("nulls_first"))


def sorted_rows(rows: list[tuple], order: tuple[tuple[int, bool, bool], ...]) -> list[int]:
    """The positions of ``rows`` in the order of ``order``'s terms (stable)."""
    positions = list(range(len(rows)))
    for index, descending, nulls_first in reversed(order):
        # reversed for DESC: NULLs sort first when their key is the larger one then
        positions.sort(key=lambda i: ((rows[i][index] is None) == (nulls_first == descending),
                                      rows[i][index]), reverse=descending)
    return positions


def limit_of(select: exp.Select) -> int | None:
    """LIMIT n, None without one; refused unless a whole number."""
    limit = select.args.get("limit")
    if not limit:
        return None
    value = limit.expression
    if isinstance(value, exp.Literal) and not value.is_string and value.name.isdigit():
        return int(value.name)
    if isinstance(value, exp.Neg) and isinstance(value.this, exp.Literal):
        raise NotSupported("LIMIT must not be negative", "2201W")  # PostgreSQL's
    raise NotSupported("LIMIT takes a whole number")


def offset_of(select: exp.Select) -> int:
    """OFFSET n, 0 without one; refused unless a whole number."""
    offset = select.args.get("offset")
    if not offset:
        return 0
    value = offset.expression.unnest() if offset.expression is not None else None
    if isinstance(value, exp.Literal) and not value.is_string:
        try:
            number = Decimal(value.name)  # OFFSET 0.0 ROWS (Ibis): no row skipped
        except InvalidOperation:
            number = None
        if number is not None and number == number.to_integral_value():
            return int(number)
    if isinstance(value, exp.Neg) and isinstance(value.this, exp.Literal):
        raise NotSupported("OFFSET must not be negative", "2201X")  # PostgreSQL's
    raise NotSupported("OFFSET takes a whole number")
