"""GROUP BY terms whose keys are public by construction: the key set of each term is
computed from the rules alone (declared keys, domains, the literals of the query), every
key is answered, and none is read from the data (SPEC §3.4).

Recognised terms, each over one declared column:

- a column with declared ``keys``;
- a column of a public table joined to the protected one (``proxy.analyze.joins``)
  without declared keys: its keys are that table's distinct values, read from it (it is
  public) by the engine in the query's snapshot, at most ``max_groups`` of them;
- ``date_trunc(unit, col)`` on a date or timestamp column with a declared domain: every
  bucket from the first to the last of the domain; ``date_trunc(unit, col + n * INTERVAL
  'c')`` with n an int column of a declared domain: that range widened by n's shifts;
- ``extract(field FROM col)`` / ``date_part('field', col)``: every value the field takes
  over the domain narrowed by the WHERE (its years for ``year``), also within whole-number
  arithmetic (``CAST(extract(dow FROM col) AS integer) + 1``);
- ``floor(x / w) * w`` (or ``floor(x / w)``) and, on an int column, ``x / w * w`` (or
  ``x / w``) over a declared numeric domain: every bin from L to U;
- ``floor(extract(epoch from col) / w) * w`` on a date or timestamp column with a
  declared domain (Grafana's ``$__timeGroup``; w in seconds): every bin, as epoch
  seconds, from the first to the last moment of the domain (a timestamp without time
  zone is read as UTC, as both engines compute its epoch);
- ``width_bucket(x, lo, hi, n)``: buckets 1..n, with 0 and n + 1 where the domain reaches
  beyond ``lo`` and ``hi``;
- ``CASE WHEN cond THEN 'a' … [ELSE 'z'] END`` with literal outputs: those literals;
- a condition (``EXTRACT(isodow FROM t) IN (6, 7)``, ``age > 30``): false and true, a row
  where it is NULL in neither;
- a constant (``ABS(1)``, a quoted string, a whole number): one group of every row.

One term's keys come from the data instead: a plain protected column without declared
keys (``SELECTED``), when the rules declare ``[defaults] delta``. Its keys are those a
DP partition selection releases after the debit (``proxy.engine.Engine.answer``,
``proxy.privacy.partition_selection``), () until then; ``selection_refusal`` says
whether the rules and the column allow it, and why not.

Values are normalised as every statistic sees them (``proxy.pushdown.values.clamped_to_domain``):
a value outside the declared domain, ±inf included, is clamped to the nearer bound and so
lands in the first or last bucket; NaN and NULL belong to no group (but a CASE's
NULL output, its ELSE's or an absent ELSE's, is a group, as in SQL). Positions
(``GROUP BY 1``) and select aliases name a term of the select list. Several terms group by every combination (the product of the key
sets), at most ``[defaults] max_groups`` of them.
"""

from __future__ import annotations

import datetime as dt
import math
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import replace
from typing import Any

from sqlglot import exp

from proxy.analyze.comparisons import HOLDS
from proxy.analyze.derived_keys import derived_case, unit_columns
from proxy.analyze.key_restriction import (
    column_bounds,
    exact_number,
    literal_number,
    names,
    restricted,
)
from proxy.analyze.number_keys import number_term, numeric_column
from proxy.analyze.predicate import check_predicate
from proxy.analyze.substrings import substring_case
from proxy.analyze.time_keys import (
    canonical,
    epoch_bin_term,
    field_values,
    interval_parts,
    part_field,
    time_term,
    tool_time_term,
    truncate,
)
from proxy.errors import NotSupported, Refused
from proxy.result_types import expression_type, of_columns
from proxy.rules import Column, Table, parse_moment
from proxy.statistics import MAGNITUDE_CAP
from proxy.vocabulary import (
    CASE,
    COLUMN,
    EPOCH_BIN,
    FLOOR_BIN,
    PUBLIC,
    RANGES,
    SELECTED,
    TIME_PART,
    TIME_TRUNC,
    TRUNC_BIN,
    WIDTH_BUCKET,
    GroupKey,
    JoinedColumn,
)
from proxy.zones import reading_zone

SELECTABLE_TYPES = ("int", "text", "bool")

ALLOWED = ("a column with declared keys or of a joined public table, date_trunc('month', col), extract(month FROM col), "
           "floor(extract(epoch FROM col) / 86400) * 86400, floor(col / 10) * 10, "
           "width_bucket(col, lo, hi, n) or CASE WHEN … THEN 'literal' … END")
TRUNC_UNITS = ("year", "quarter", "month", "week", "day", "hour", "minute", "second")
_INT4 = 2**31 - 1  # PostgreSQL's integer: the tools cast an extract to it


def group_terms(select: exp.Select, table: Table, resolve, max_groups: int
                ) -> tuple[GroupKey, ...]:
    """The GROUP BY terms of ``select``, their key sets from the rules; refuse a term
    without a public key set, or more than ``max_groups`` combinations of keys."""
    group = select.args.get("group")
    if not group:
        return ()
    terms: list[GroupKey] = []
    where = select.args.get("where")
    for node in group.expressions:
        node = dereferenced(node, select, table)
        term = restricted(group_term(node, table, resolve, where.this if where else None),
                          where.this if where else None, table, resolve)
        term = replace(term, pg=expression_type(node, of_columns(table, resolve)))
        if not any(term.same_term(seen) for seen in terms):
            terms.append(term)
    check_group_count(terms, max_groups)
    return tuple(terms)


def check_group_count(terms, max_groups: int) -> None:
    """Refuse more than ``max_groups`` combinations of keys."""
    count = math.prod(len(term.keys) for term in terms)
    if count > max_groups:
        narrow = "".join(
            f"; or narrow the range of {term.column} in WHERE (here {_shown(term.keys[0])} "
            f"to {_shown(term.keys[-1])}: {len(term.keys):,} {term.unit} buckets)"
            for term in terms if term.kind == TIME_TRUNC and len(term.keys) > 1)
        raise NotSupported(f"GROUP BY would answer {count:,} groups (every combination of keys), "
                           f"more than the rules' max_groups = {max_groups:,}; use coarser "
                           f"buckets or fewer group columns{narrow}")


def _shown(key) -> str:
    return key.isoformat(" ") if isinstance(key, dt.datetime) else str(key)


def matching_group(node: exp.Expression, terms: tuple[GroupKey, ...], table: Table,
                   resolve, where: exp.Where | None = None) -> int | None:
    """The index of the GROUP BY term a select item computes; None when it is none
    (``where``: the statement's, whose lists may give a term its keys)."""
    if not terms:
        return None
    bare = node
    while isinstance(bare, exp.Paren):
        bare = bare.this
    if not _own_shape(bare) and tool_time_term(bare) and _reads_time(bare, table, resolve):
        text = canonical(bare, resolve)  # by its text: its ranges are those the WHERE leaves
        found = next((i for i, seen in enumerate(terms)
                      if seen.kind == RANGES and seen.unit == text), None)
        if found is not None or not any(seen.shifts for seen in terms):
            return found  # else a field of a shifted clock (time_keys._shifted_field)
    try:
        term = group_term(node, table, resolve, where.this if where is not None else None)
    except Refused:
        return None
    # a plain int column: as grouped without δ (integer_domain_keys), or with it
    forms = (term, integer_domain_keys(term, table, None)) if term.kind == SELECTED else (term,)
    return next((i for i, seen in enumerate(terms) if any(map(seen.same_term, forms))), None)


# a cast's type as PostgreSQL's parser names it (``1::integer`` is a column ``int4``)
_CAST_NAMES = {
    exp.DataType.Type.INT: "int4", exp.DataType.Type.BIGINT: "int8",
    exp.DataType.Type.SMALLINT: "int2", exp.DataType.Type.DOUBLE: "float8",
    exp.DataType.Type.FLOAT: "float4", exp.DataType.Type.DECIMAL: "numeric",
    exp.DataType.Type.BOOLEAN: "bool", exp.DataType.Type.CHAR: "bpchar",
}


def default_name(node: exp.Expression) -> str:
    """PostgreSQL's name for an unnamed result column: the column's, the function's,
    ``case``, else ``?column?``."""
    if isinstance(node, exp.Column):
        return node.name
    if isinstance(node, exp.Case):
        return "case"
    if isinstance(node, exp.Extract):
        return "extract"
    if isinstance(node, (exp.Window, exp.Filter, exp.WithinGroup)):  # OVER, FILTER: the function
        return default_name(node.this)
    if isinstance(node, exp.Cast):  # its operand's name, else the type's (FigureColname)
        inner = default_name(node.this)
        return inner if inner != "?column?" else _CAST_NAMES.get(
            node.to.this, node.to.this.value.lower())
    if isinstance(node, exp.Anonymous):
        return node.name.lower()
    if isinstance(node, exp.Func):
        return node.sql(dialect="postgres").split("(")[0].strip().lower() or "?column?"
    return "?column?"


def dereferenced(node: exp.Expression, select: exp.Select, table: Table) -> exp.Expression:
    """``GROUP BY 2`` and ``GROUP BY alias`` name a select item (an input column of that
    name wins over an alias, as in PostgreSQL)."""
    items = select.expressions
    if isinstance(node.unnest(), exp.Literal) and not node.unnest().is_string:
        node = node.unnest()  # GROUP BY (2) is a position too, as PostgreSQL parses it
        if not node.name.isdigit() or not 1 <= int(node.name) <= len(items):
            raise NotSupported(f"GROUP BY position {node.name} is not in the select list "
                               f"(1 to {len(items)})", "42P10")
        target = items[int(node.name) - 1].unalias()
    elif (isinstance(node, exp.Column) and not node.table
          and node.name.lower() not in table.columns):
        named = [item.unalias() for item in items
                 if isinstance(item, exp.Alias) and item.alias.lower() == node.name.lower()]
        target = named[0] if len(named) == 1 else node
    else:
        return node
    if target.find(exp.AggFunc):
        raise NotSupported(f"GROUP BY {node.sql(dialect='postgres')} names an aggregate; "
                           f"group by {ALLOWED}")
    return target


# The terms one statement's analysis worked out (``terms_kept``): a select item that
# computes a GROUP BY term is recognised by working the term out again, and a CASE over
# an int domain's values (121 ages × 4 regions) took 0.2–0.5 s each time.
_KEPT: ContextVar[dict | None] = ContextVar("group_terms_kept", default=None)


@contextmanager
def terms_kept():
    """Within: each term worked out once per table, text and WHERE."""
    token = _KEPT.set({})
    try:
        yield
    finally:
        _KEPT.reset(token)


def group_term(node: exp.Expression, table: Table, resolve,
               where: exp.Expression | None = None) -> GroupKey:
    """One term, recognised by its shape, else computed from columns with public values
    (``derived_keys``: LOWER(region), ROUND(age, -1)); refused (one line) when its keys
    are not public. Time buckets are listed only where the WHERE clause's literal bounds
    on their column (a time range, as BI tools send) let rows in: the other buckets are
    empty by the text."""
    kept = _KEPT.get()
    if kept is None:
        return _worked_out(node, table, resolve, where)
    try:
        key = (id(table), canonical(node, resolve), None if where is None else where.sql())
    except Refused:  # a column the statement does not resolve: refused as it is
        return _worked_out(node, table, resolve, where)
    found = kept.get(key)
    if found is None or found[0] is not table:  # (the table held: its id not reused)
        found = kept[key] = (table, _worked_out(node, table, resolve, where))
    return found[1]


def _worked_out(node: exp.Expression, table: Table, resolve,
                where: exp.Expression | None) -> GroupKey:
    while isinstance(node, exp.Paren):
        node = node.this
    try:
        return _shaped_term(node, table, resolve, where)
    except NotSupported:
        derived = derived_case(node, table, resolve, where)
        if derived is None:  # a capped bin of a column without public values?
            capped = _capped_bin(node, table, resolve, default_name(node), where)
            if capped is not None:
                return capped
            raise
        if not derived.args.get("ifs"):  # the WHERE admits no key: zero rows, nothing sent
            return GroupKey(default_name(node), CASE, None, (), "text")
        # a row whose inputs are not all declared values (or NULL) meets no WHEN: in
        # no group, as for GROUP BY region, not in the NULL group SQL's CASE would give
        return _case(derived, table, resolve, default_name(node), unmatched=False)


def _shaped_term(node: exp.Expression, table: Table, resolve,
                 where: exp.Expression | None) -> GroupKey:
    name = default_name(node)
    if isinstance(node, exp.Column):
        return _plain_column(resolve(node), table, name)
    if isinstance(node, exp.Coalesce):
        public = _public_coalesce(node, table, resolve, name)
        if public is not None:
            return public
    part = _time_part(node, table, resolve, name, where)
    if part is not None:
        return part
    if _shifted_trunc(node) is not None:
        return _shifted_buckets(node, table, resolve, name, where)
    if tool_time_term(node) and _reads_time(node, table, resolve):
        return time_term(node, table, resolve, name,
                         lambda column: within_where(column, where, resolve))
    if isinstance(node, (exp.TimestampTrunc, exp.DateTrunc)):
        unit = _unit(node.args.get("unit"))
        column = _time_column(node.this, table, resolve, f"date_trunc('{unit}', …)")
        if unit not in TRUNC_UNITS:
            raise NotSupported(f"date_trunc takes one of {', '.join(TRUNC_UNITS)}; got {unit}")
        first, last = within_where(column, where, resolve)
        keys = _truncations(first, last, unit) if first <= last else ()
        if column.type == "date":  # PostgreSQL's date_trunc(text, timestamptz): a moment
            return GroupKey(name, TIME_TRUNC, column.name, keys, "timestamptz", unit,
                            zone=reading_zone().key)
        return GroupKey(name, TIME_TRUNC, column.name, keys, "timestamp", unit)
    if isinstance(node, exp.WidthBucket):
        return _width_bucket(node, table, resolve, name)
    numbered = number_term(node, table, resolve, name)
    if numbered is not None:
        return numbered
    binned = _bin(node, table, resolve, name, where)
    if binned is not None:
        return binned
    listed = substring_case(node, table, resolve, where) if isinstance(
        node, exp.Substring) else None  # on declared keys: a derived key (below)
    if listed is not None:  # a row whose value is no declared key: in no group
        return _case(listed, table, resolve, name, unmatched=False)
    if isinstance(node, (exp.Predicate, exp.Connector, exp.Not)):
        return _condition(node, table, resolve, name)
    value = None if node.find(exp.Column) else _constant_value(node)
    if value is not None:  # every row's key: one group (Metabase's ABS(1) "pivot-grouping")
        return GroupKey(name, CASE, None, (value,), "text" if isinstance(value, str) else "int",
                        branches=((exp.true(), value),))
    if isinstance(node, exp.Case):
        return _case(node, table, resolve, name)
    raise NotSupported(f"GROUP BY {node.sql(dialect='postgres')} has no public set of keys; "
                       f"group by {ALLOWED}")


def _time_part(node: exp.Expression, table: Table, resolve, name: str,
               where: exp.Expression | None) -> GroupKey | None:
    """``extract(field FROM col)``, and whole-number arithmetic over it as the tools
    write it (Metabase's day of week ``CAST(extract(dow FROM col) AS integer) + 1``,
    Ibis's from Monday ``CAST(EXTRACT(dow FROM col) + 6 AS SMALLINT) % 7``): the values
    the field takes over the column's time range (the domain narrowed by the WHERE), each
    mapped by a·v + b, then taken modulo a positive constant m where written; None for
    other shapes. The backend extracts the field from the clamped moment and computes
    a·v + b [% m] (``proxy.pushdown.group_sql``): whole numbers far from overflow, m
    not 0, so it cannot fail."""
    node, modulus = _modulo(node)
    shape = _affine_part(node)
    if shape is None:
        return None
    extract, scale, offset = shape
    field = part_field(extract.this)
    column = _time_column(extract.expression, table, resolve, f"extract({field} FROM …)")
    first, last = within_where(column, where, resolve)
    values = [scale * v + offset for v in field_values(field, first, last)]
    if any(abs(value) > _INT4 for value in values):
        raise NotSupported(f"GROUP BY {node.sql(dialect='postgres')} reaches beyond the "
                           "integer range")
    if modulus:  # PostgreSQL's %: the remainder takes the dividend's sign
        values = [int(math.copysign(abs(value) % modulus, value)) for value in values]
    numbers = (scale, offset, modulus) if modulus else (
        () if (scale, offset) == (1, 0) else (scale, offset))
    return GroupKey(name, TIME_PART, column.name, tuple(dict.fromkeys(values)), "int", field,
                    numbers=numbers)


def _modulo(node: exp.Expression) -> tuple[exp.Expression, int]:
    """(the dividend, m) of ``… % m``, m a whole positive constant within PostgreSQL's
    integer (Ibis's day of the week from Monday: ``CAST(EXTRACT(dow FROM t) + 6 AS
    SMALLINT) % 7``); (``node``, 0) otherwise."""
    bare = node.unnest()
    if isinstance(bare, exp.Mod):
        modulus = literal_number(bare.expression)
        if modulus is not None and modulus == int(modulus) and 0 < modulus <= _INT4 \
                and "." not in bare.expression.sql():
            return bare.this, int(modulus)
    return node, 0


def _own_shape(node: exp.Expression) -> bool:
    """Whether ``node`` is a time term answered here, not by ``time_keys`` (which reads
    one column, cutting its range where the key changes)."""
    return _affine_part(_modulo(node)[0]) is not None or _shifted_trunc(node) is not None


def _shifted_trunc(node: exp.Expression) -> tuple[exp.Column, exp.Column, exp.Interval,
                                                   int] | None:
    """(t, n, the interval, its sign) of ``date_trunc(unit, t ± n * INTERVAL '…')`` (or
    ``INTERVAL '…' * n``): a time column shifted by an int column times a constant
    interval; None for other shapes."""
    if not isinstance(node, (exp.TimestampTrunc, exp.DateTrunc)) or node.args.get("zone"):
        return None
    shifted = node.this.unnest()
    if not isinstance(shifted, (exp.Add, exp.Sub)):
        return None
    moment, scaled = shifted.this.unnest(), shifted.expression.unnest()
    if isinstance(shifted, exp.Add) and isinstance(moment, exp.Mul):
        moment, scaled = scaled, moment
    if not (isinstance(moment, exp.Column) and isinstance(scaled, exp.Mul)):
        return None
    count, interval = scaled.this.unnest(), scaled.expression.unnest()
    if isinstance(count, exp.Interval):
        count, interval = interval, count
    if not (isinstance(count, exp.Column) and isinstance(interval, exp.Interval)):
        return None
    return moment, count, interval, -1 if isinstance(shifted, exp.Sub) else 1


_MAX_SHIFT = dt.timedelta(days=36_525)  # a century: every moment stays in the calendar


def _shifted_buckets(node: exp.Expression, table: Table, resolve, name: str,
                     where: exp.Expression | None) -> GroupKey:
    """``date_trunc(unit, t + n * INTERVAL 'c')`` (an analyst's day after a stay of n
    days): t is in its time range (the domain narrowed by the WHERE), n in its declared
    domain [L, U], so the moment is in [first + min(L·c, U·c), last + max(L·c, U·c)]:
    every bucket of that range is a key, from the rules and the literals alone. The
    backend truncates the clamped moment plus the clamped n times c (whole seconds),
    within a century of the domain, so it cannot fail."""
    moment, count, interval, sign = _shifted_trunc(node)
    unit = _unit(node.args.get("unit"))
    if unit not in TRUNC_UNITS:
        raise NotSupported(f"date_trunc takes one of {', '.join(TRUNC_UNITS)}; got {unit}")
    column = _time_column(moment, table, resolve, f"date_trunc('{unit}', …)")
    scale = numeric_column(count, table, resolve, "a time shift by a column")
    months, step = interval_parts(interval)
    step *= sign
    if scale.type != "int" or months or step != dt.timedelta(seconds=round(
            step.total_seconds())):
        raise NotSupported(f"{node.sql(dialect='postgres')}: a moment is shifted by an int "
                           "column times a constant INTERVAL of whole seconds, days or "
                           "weeks (no months)")
    low, high = sorted((math.ceil(scale.lower) * step, math.floor(scale.upper) * step))
    if max(abs(low), abs(high)) > _MAX_SHIFT:
        raise NotSupported(f"{node.sql(dialect='postgres')} shifts a moment by more than a "
                           f"century ({scale.name} in [{scale.lower:g}, {scale.upper:g}])")
    first, last = within_where(column, where, resolve)
    try:
        keys = _truncations(first + low, last + high, unit) if first <= last else ()
    except OverflowError:
        raise NotSupported(f"{node.sql(dialect='postgres')} shifts a moment out of the "
                           "calendar") from None
    return GroupKey(name, TIME_TRUNC, column.name, keys, "timestamp", unit,
                    numbers=(step.total_seconds(),), by=scale.name)


def _affine_part(node: exp.Expression) -> tuple[exp.Extract, int, int] | None:
    """(the extract, a, b) when ``node`` is a·extract(field FROM col) + b written with
    whole constants, ``+``, ``-``, ``*``, unary minus, brackets and casts to an integer
    type; None otherwise. Each constant is at most PostgreSQL's integer."""
    while isinstance(node, exp.Paren) or (isinstance(node, exp.Cast) and node.to.is_type(
            *exp.DataType.INTEGER_TYPES)):
        node = node.this
    if isinstance(node, exp.Extract):
        plain = isinstance(node.expression, exp.Column) and not node.args.get("zone")
        return (node, 1, 0) if plain else None
    if isinstance(node, exp.Neg):
        inner = _affine_part(node.this)
        return None if inner is None else (inner[0], -inner[1], -inner[2])
    if not isinstance(node, (exp.Add, exp.Sub, exp.Mul)):
        return None
    for inner, other, left in ((node.this, node.expression, True),
                               (node.expression, node.this, False)):
        constant = literal_number(other)
        if constant is None or constant != int(constant) or abs(constant) > _INT4 or \
                "." in other.sql():
            continue
        shape = _affine_part(inner)
        if shape is None:
            return None
        extract, scale, offset = shape
        k = int(constant)
        if isinstance(node, exp.Mul):
            scale, offset = k * scale, k * offset
        elif isinstance(node, exp.Add):
            offset += k
        elif left:
            offset -= k
        else:
            scale, offset = -scale, k - offset
        if max(abs(scale), abs(offset)) > _INT4:
            return None
        return extract, scale, offset
    return None


def _reads_time(node: exp.Expression, table: Table, resolve) -> bool:
    """Whether a time column is what ``node`` reads (``time_term`` refuses a second)."""
    return any(table.columns[resolve(column)].type in ("date", "timestamp")
               for column in node.find_all(exp.Column))


def _plain_column(name: str, table: Table, label: str) -> GroupKey:
    column = table.columns[name]
    if column.keys is None and isinstance(column, JoinedColumn) and not column.protected:
        # a public table's column: its keys are the public table's values, read by the
        # engine in the query's snapshot (proxy.engine.Engine.view); () until then
        return GroupKey(label, PUBLIC, name, (), column.type)
    if column.keys is None:  # keys from the data, if the rules allow (selection_refusal)
        return GroupKey(label, SELECTED, name, (), column.type)
    return GroupKey(label, COLUMN, name, column.keys, column.type)


def _public_coalesce(node: exp.Coalesce, table: Table, resolve, name: str
                     ) -> GroupKey | None:
    """``COALESCE(r.name, 'unknown')`` of a joined public table's text column: its keys
    the public table's values (read by the engine, as for ``r.name``) and the constant,
    the key of the rows whose value is NULL (a LEFT JOIN's unmatched rows, a NULL in the
    public table); the backend computes the COALESCE (``group_sql.group_value``). None
    for other shapes."""
    parts = [node.this, *node.expressions]
    if len(parts) != 2:
        return None
    column, fallback = (part.unnest() for part in parts)
    if not isinstance(column, exp.Column) or not (isinstance(fallback, exp.Literal)
                                                  and fallback.is_string):
        return None
    term = _plain_column(resolve(column), table, name)
    if term.kind != PUBLIC or term.type != "text":
        return None
    return replace(term, default=fallback.name)


def integer_domain_keys(term: GroupKey, table: Table, delta,
                        where: exp.Expression | None = None, resolve=None) -> GroupKey:
    """A plain ``int`` column of the queried table without declared keys, where the
    rules select no keys from the data (no ``delta``), grouped by every integer of its
    declared domain: the keys ``floor(col / 1) * 1`` already had (``_bin``), and as
    there a value beyond the domain is clamped into its first or last group. ``GROUP
    BY age`` was refused while that bin was answered. The privacy unit, its link and
    joined tables' columns keep ``selection_refusal``'s answer; so does a term with
    keys. The keys are those ``where`` lets in (``restricted``: ``WHERE age > 95``
    answers 25)."""
    column = table.columns.get(term.column) if term.kind == SELECTED else None
    if delta is not None or column is None or column.type != "int" \
            or isinstance(column, JoinedColumn) or term.column in unit_columns(table) \
            or column.lower is None or column.upper is None:
        return term
    low, high = math.ceil(column.lower), math.floor(column.upper)
    _refuse_huge(high - low + 1, "integer")
    keyed = GroupKey(term.name, TRUNC_BIN, column.name, tuple(range(low, high + 1)), "int",
                     numbers=(1, 1), pg=term.pg)
    return keyed if where is None else restricted(keyed, where, table, resolve)


def selection_refusal(term: GroupKey, table: Table, delta) -> NotSupported | None:
    """Why the keys of a ``SELECTED`` term cannot be selected from the data (None: they
    can): the rules declare no δ, the column holds floats (nearly every value its own
    key: bin it), or a table with a privacy unit declares no ``max_rows_per_unit`` (how
    many keys one unit may add to the count: docs/privacy.md §3.12; of two protected
    tables joined on the unit, the product of theirs, None when either has none). Rules and text only.
    Dates and timestamps are bucketed instead: a PostgreSQL 'infinity' read back as a
    key would fail the query, telling that one is in scope."""
    name, column = term.column, table.columns[term.column]
    if delta is None and name == table.privacy_unit:
        return NotSupported(f"GROUP BY {name} needs a public list of keys in the rules, and "
                            f"{name} is the privacy unit: a group per unit would answer for "
                            "one person at a time; ask over units instead: "
                            f"COUNT(DISTINCT {name}), or AVG or SUM of a per-unit count from "
                            f"a subquery grouped by {name}")
    if delta is None:
        hint = (f", or by a bucket such as date_trunc('month', {name})" if column.time_domain
                else f", or by bins such as floor({name} / 10) * 10"
                if column.lower is not None and column.upper is not None else "")
        return NotSupported(f"GROUP BY {name} needs a public list of keys in the rules; "
                            f"group by a column with declared keys{hint} (or the data owner "
                            "may set [defaults] delta, to select keys from the data)")
    if column.type not in SELECTABLE_TYPES:
        bucket = (f"date_trunc('day', {name}) over a declared domain"
                  if column.type in ("date", "timestamp") else f"floor({name} / 10) * 10")
        return NotSupported(f"GROUP BY {name}: keys are selected from the data for "
                            f"{', '.join(SELECTABLE_TYPES)} columns, not {column.type}; "
                            f"group by buckets such as {bucket}")
    if table.privacy_unit and table.max_rows_per_unit is None:
        return NotSupported(f"GROUP BY {name} without declared keys needs max_rows_per_unit "
                            "in the rules of every protected table it reads (how many keys "
                            f"one {table.privacy_unit} may add to the selection); ask the "
                            "data owner, or group by a column with declared keys")
    return None


def _unit(node: exp.Expression | None) -> str:
    if isinstance(node, (exp.Var, exp.Literal, exp.Column)):
        return node.name.lower()
    raise NotSupported("date_trunc and extract take a literal unit, e.g. 'month'")


def _time_column(node: exp.Expression, table: Table, resolve, what: str) -> Column:
    if not isinstance(node, exp.Column):
        raise NotSupported(f"{what} takes a plain date or timestamp column")
    column = table.columns[resolve(node)]
    if column.type not in ("date", "timestamp"):
        raise NotSupported(f"{what} needs a date or timestamp column; {column.name} is "
                           f"{column.type}", "42883")  # no such function in PostgreSQL
    if column.time_domain is None:
        raise NotSupported(f"{what} on {column.name} needs a declared domain "
                           "[first, last] in the rules (the public list of buckets); ask the "
                           "data owner")
    return column


_TICK = dt.timedelta(microseconds=1)


def narrow_window(table: Table, where: exp.Expression | None, resolve) -> bool:
    """Whether the WHERE keeps some time column with a declared domain to at most half of
    it (``within_where``: top-level AND terms comparing it with literals). The text and
    the rules alone, never the data: the same on every neighbour (docs/privacy.md §3.3,
    "Counts in a window")."""
    if where is None:
        return False
    for column in table.columns.values():
        if column.time_domain is not None:
            low, high = column.time_domain
            first, last = within_where(column, where, resolve)
            if 2 * (last - first) <= high - low:
                return True
    return False


def within_where(column: Column, where: exp.Expression | None, resolve
                  ) -> tuple[dt.datetime, dt.datetime]:
    """The declared [first, last] of a time column, narrowed by the conditions on it that
    every row in scope meets: top-level AND terms (in brackets or not) comparing it with
    a literal (``>=``, ``>``, ``<``, ``<=``, BETWEEN; a literal with a time zone read as UTC, as
    ``check_predicate`` rewrites it). Text and rules only, never the data. A bound beyond
    the domain is clamped into it, as the rows beyond it are: they are grouped in the
    first or last bucket. On a date column the bounds are whole days: the engines
    compare a date with a moment's date."""
    low, high = first, last = column.time_domain
    for subject, kind, literal in column_bounds(where):
        moment = parse_moment(literal.name, zoned=True) if isinstance(
            literal, exp.Literal) and literal.is_string and names(
            subject, column.name, resolve) else None
        if moment is None:
            continue
        if kind in (exp.GT, exp.GTE):
            first = max(first, moment)
        else:
            strict = kind is exp.LT and moment > dt.datetime.min
            last = min(last, moment - _TICK if strict else moment)
    if column.type == "date":
        first, last = truncate(first, "day"), truncate(last, "day")
    return min(first, high), max(last, low)


_FIXED = {"week": dt.timedelta(weeks=1), "day": dt.timedelta(days=1),
          "hour": dt.timedelta(hours=1), "minute": dt.timedelta(minutes=1),
          "second": dt.timedelta(seconds=1)}
_MONTHS = {"year": 12, "quarter": 3, "month": 1}
_TOO_MANY = 10_000_000  # never list more keys than this, whatever max_groups says


def _truncations(first: dt.datetime, last: dt.datetime, unit: str) -> tuple[dt.datetime, ...]:
    """Every bucket start from the first to the last moment of the domain."""
    start, end = truncate(first, unit), truncate(last, unit)
    if unit in _FIXED:
        count = (end - start) // _FIXED[unit] + 1
        _refuse_huge(count, unit, f"; or narrow the time range in WHERE (here "
                     f"{first.isoformat(' ')} to {last.isoformat(' ')})")
        return tuple(start + i * _FIXED[unit] for i in range(count))
    step = _MONTHS[unit]
    months = (end.year - start.year) * 12 + end.month - start.month
    _refuse_huge(months // step + 1, unit)
    return tuple(dt.datetime(start.year + (start.month - 1 + i) // 12,
                             (start.month - 1 + i) % 12 + 1, 1)
                 for i in range(0, months + 1, step))


def _refuse_huge(count: int, what: str, narrow: str = "") -> None:
    if count > _TOO_MANY:
        raise NotSupported(f"GROUP BY {what} buckets would answer {count:,} groups; use "
                           f"coarser buckets{narrow}")


def _width(node: exp.Expression) -> int:
    width = literal_number(node)
    if width is None or width <= 0 or width != int(width) or width > MAGNITUDE_CAP:
        raise NotSupported("a bin width must be a positive whole number up to "
                           f"{MAGNITUDE_CAP:.0e}, e.g. floor(age / 10) * 10")
    return int(width)


def _bin(node: exp.Expression, table: Table, resolve, name: str,
         where: exp.Expression | None = None) -> GroupKey | None:
    """``floor(x / w) [* w]`` and, on int columns, ``x / w [* w]``; the epoch bins
    ``floor(extract(epoch from t) / w) [* w]``; None for other shapes."""
    whole, multiplied = node, None
    if isinstance(node, exp.Mul):
        for inner, outer in ((node.this, node.expression), (node.expression, node.this)):
            if isinstance(inner, (exp.Floor, exp.Div, exp.IntDiv, exp.Paren)) and \
                    literal_number(outer) is not None:
                node, multiplied = inner, outer
                break
        else:
            return None
    while isinstance(node, exp.Paren):
        node = node.this
    floor = isinstance(node, exp.Floor)
    division = node.this if floor else node
    while isinstance(division, exp.Paren):
        division = division.this
    if not isinstance(division, (exp.Div, exp.IntDiv)) or literal_number(division.expression) is None:
        return None
    width = _width(division.expression)
    if multiplied is not None and _width(multiplied) != width:
        raise NotSupported("bin by floor(x / w) * w with the same w on both sides")
    scale = width if multiplied is not None else 1
    if isinstance(division.this, exp.Extract) and _unit(division.this.this) == "epoch":
        if not floor:
            raise NotSupported("bin an epoch with floor(extract(epoch FROM col) / w) * w")
        moment = division.this.expression
        if not isinstance(moment, exp.Column) and not division.this.args.get("zone"):
            ranged = epoch_bin_term(whole, moment, width, scale, table, resolve, name,
                                    lambda column: within_where(column, where, resolve))
            if ranged is not None:
                return ranged
            while not isinstance(moment, exp.Column) and moment.find(exp.Column):
                moment = moment.this  # the column on its own clock: its plain bin
        return _epoch_bin(moment, width, scale, table, resolve, name, where)
    what = f"floor({division.this.sql(dialect='postgres')} / {width})" if floor else \
        f"{division.this.sql(dialect='postgres')} / {width}"
    column = numeric_column(division.this, table, resolve, what)
    if not floor and column.type != "int" and not isinstance(division, exp.IntDiv):
        raise NotSupported(f"{what} divides a float column without rounding; bin it with "
                           f"floor({column.name} / {width}) * {width}")
    rounding = math.floor if floor else math.trunc
    low, high = rounding(column.lower / width), rounding(column.upper / width)
    _refuse_huge(high - low + 1, "bin")
    keys = tuple(k * scale for k in range(low, high + 1))
    return GroupKey(name, FLOOR_BIN if floor else TRUNC_BIN, column.name, keys, "int",
                    numbers=(width, scale))


_CAP = 2**53  # a cap's magnitude at most (exact in a double; every bin key is within it)


def _capped_bin(node: exp.Expression, table: Table, resolve, name: str,
                where: exp.Expression | None) -> GroupKey | None:
    """``LEAST(bin, c, …)`` and ``GREATEST(bin, c, …)``, nested either way, of a
    ``floor(x / w) [* w]`` (or ``x / w``) bin and whole constants (a histogram's last
    bucket "8 and above": ``LEAST(FLOOR(income / 25000), 8)``): the bin's keys, each
    clamped as PostgreSQL's LEAST and GREATEST clamp it, and the key a NULL value gets
    (PostgreSQL's LEAST and GREATEST skip a NULL: ``LEAST(NULL, 8)`` is 8, so NULL
    incomes, and NaN ones, which every statistic reads as NULL, are in the bucket 8).
    The backend computes the bin as for the plain bin, then clamps it
    (``proxy.pushdown.group_sql``). None for other shapes."""
    steps: list[tuple[Any, list[int]]] = []  # outermost first
    while isinstance(node, (exp.Least, exp.Greatest)):
        operands = [operand.unnest() for operand in (node.this, *node.expressions)]
        inner = [operand for operand in operands if exact_number(operand) is None]
        if len(inner) != 1:
            return None
        constants = [exact_number(operand) for operand in operands if operand is not inner[0]]
        if any(c != int(c) or abs(c) > _CAP for c in constants):
            raise NotSupported(f"GROUP BY {node.sql(dialect='postgres')}: a bin is capped by "
                               "whole numbers, e.g. LEAST(FLOOR(income / 25000), 8)")
        steps.append((min if isinstance(node, exp.Least) else max,
                      [int(c) for c in constants]))
        node = inner[0]
        while isinstance(node, exp.Paren):
            node = node.this
    if not steps:
        return None
    term = _bin(node, table, resolve, name, where)
    if term is None or term.kind not in (FLOOR_BIN, TRUNC_BIN):
        return None
    low, high, null = -math.inf, math.inf, None  # each key clamped to [low, high]
    for function, constants in reversed(steps):  # innermost first
        cap = function(constants)
        low, high = function(low, cap), function(high, cap)
        null = cap if null is None else function(null, cap)
    keys = {min(max(key, low), high) for key in term.keys} | {null}
    return replace(term, keys=tuple(sorted(keys)), numbers=term.numbers + (low, high, null))


EPOCH = dt.datetime(1970, 1, 1)


def epoch_seconds(moment: dt.datetime) -> int:
    """Whole seconds from 1970-01-01 00:00 to ``moment`` (rounded down), as
    ``floor(extract(epoch FROM moment))`` on a timestamp without time zone."""
    return (moment - EPOCH) // dt.timedelta(seconds=1)


def _epoch_bin(node: exp.Expression, width: int, scale: int, table: Table, resolve, name: str,
               where: exp.Expression | None) -> GroupKey:
    """Bins of ``width`` seconds of a time column, listed from the first to the last
    moment the domain and the WHERE clause's time range let in."""
    column = _time_column(node, table, resolve, f"floor(extract(epoch FROM …) / {width})")
    first, last = within_where(column, where, resolve)
    low, high = epoch_seconds(first) // width, epoch_seconds(last) // width
    _refuse_huge(high - low + 1, f"{width}-second")
    # a range of C's making: Grafana's 5-minute bins over two years are 210,000 keys
    keys = () if first > last else tuple(range(low * scale, (high + 1) * scale, scale)) \
        if scale > 0 else tuple(k * scale for k in range(low, high + 1))
    return GroupKey(name, EPOCH_BIN, column.name, keys, "int", numbers=(width, scale))


def _width_bucket(node: exp.WidthBucket, table: Table, resolve, name: str) -> GroupKey:
    column = numeric_column(node.this, table, resolve, "width_bucket")
    low, high = literal_number(node.args.get("min_value")), literal_number(node.args.get("max_value"))
    count = literal_number(node.args.get("num_buckets"))
    if low is None or high is None or count is None or not low < high:
        raise NotSupported("width_bucket takes literal bounds lo < hi and a count: "
                           "width_bucket(age, 0, 100, 10)")
    if max(abs(low), abs(high)) > MAGNITUDE_CAP:  # (v - lo) * n stays far from overflow
        raise NotSupported(f"width_bucket's bounds must be within ±{MAGNITUDE_CAP:.0e}")
    count = _width(node.args.get("num_buckets"))
    _refuse_huge(count, "width_bucket")
    keys = ([0] if column.lower < low else []) + list(range(1, count + 1)) + \
        ([count + 1] if column.upper >= high else [])
    return GroupKey(name, WIDTH_BUCKET, column.name, tuple(keys), "int",
                    numbers=(low, high, count))


def _case(node: exp.Case, table: Table, resolve, name: str, unmatched: bool = True
          ) -> GroupKey:
    """CASE with literal outputs: its keys are those literals (strings, or whole numbers);
    the conditions are checked as WHERE conditions are (one record at a time). A NULL
    output (``ELSE NULL``, ``THEN NULL``, or no ELSE) is a key too, as SQL groups NULLs:
    the rows no branch takes form the NULL group (the keys are then indices of the
    labels), unless ``unmatched`` is false (a derived key's CASE: they are rows of
    undeclared values, in no group). A CASE without ELSE lost its NULL group until
    2026-11-29: its other rows were in no group, a wrong answer PostgreSQL's differs from."""
    subject = node.this
    branches = []
    outputs = []
    default = node.args.get("default")
    for branch in node.args.get("ifs") or []:
        condition = branch.this
        if subject is not None:
            condition = exp.EQ(this=subject.copy(), expression=condition.copy())
        truth = _constant_truth(condition)
        if truth is _UNKNOWN and not condition.find(exp.Column):
            raise NotSupported(f"the CASE condition {condition.sql(dialect='postgres')} "
                               "reads no column, and the proxy decides only comparisons of "
                               "numbers, equalities of strings, IN lists and AND/OR/NOT of "
                               "them (as the backend would: a text order depends on its "
                               "collation); write the branch it takes")
        if truth is not _UNKNOWN:  # WHEN NULL, WHEN 1 = 0: never taken; WHEN TRUE: the
            if truth:  # rest never reached (else an empty group answered beside, and the
                default = branch.args.get("true")  # select list's CASE relabelled it)
                break
            continue
        branches.append((check_predicate(condition, table, resolve, "a CASE condition"),
                         _case_output(branch.args.get("true"))))
        outputs.append(branches[-1][1])
    default = _case_output(default) if default is not None else None
    outputs.append(default)
    kinds = {type(value) for value in outputs if value is not None} or {str}  # NULL: text
    if not branches:  # every row's key is the ELSE's (or the TRUE branch's): one group
        kind = "text" if str in kinds else "int"
        if default is None:
            return GroupKey(name, CASE, None, (0,), kind, branches=((exp.true(), 0),),
                            labels=(None,))
        return GroupKey(name, CASE, None, (default,), kind,
                        branches=((exp.true(), default),))
    if len(kinds) > 1:
        raise NotSupported("a CASE in GROUP BY returns literals of one kind: all quoted "
                           "strings, or all whole numbers")
    kind = "text" if str in kinds else "int"
    if not any(value is None for _, value in branches) and (
            default is not None or not unmatched):
        outputs = outputs if default is not None else outputs[:-1]
        return GroupKey(name, CASE, None, tuple(dict.fromkeys(outputs)), kind,
                        branches=tuple(branches), default=default)
    labels = tuple(dict.fromkeys(value for value in outputs if value is not None)) + (None,)
    index = {label: i for i, label in enumerate(labels)}
    return GroupKey(name, CASE, None, tuple(range(len(labels))), kind,
                    branches=tuple((condition, index[value]) for condition, value in branches),
                    default=index[default] if unmatched or default is not None else None,
                    labels=labels)


_UNKNOWN = object()  # a condition that reads a column (or is not folded here)


def never_true(condition: exp.Expression) -> bool:
    """Whether a condition of literals is FALSE or NULL whatever the row (a HAVING
    ``GROUPING(b) = 1`` of a set that groups by b, its mask written in)."""
    truth = _constant_truth(condition)
    return truth is not _UNKNOWN and not truth


def _constant_truth(node: exp.Expression) -> Any:
    """A condition of literals as SQL evaluates it (TRUE, FALSE, NULL, NOT, AND and OR of
    them, a comparison of two numbers, two strings' equality, an IN list of them), else
    ``_UNKNOWN`` (an AND or OR that a column decides too)."""
    while isinstance(node, exp.Paren):
        node = node.this
    if isinstance(node, exp.Boolean):
        return node.this
    if isinstance(node, exp.Null):
        return None
    if isinstance(node, exp.Not):
        inner = _constant_truth(node.this)
        return inner if inner is None or inner is _UNKNOWN else not inner
    if isinstance(node, (exp.And, exp.Or)):  # SQL's three-valued AND and OR
        sides = [_constant_truth(node.this), _constant_truth(node.expression)]
        decisive = isinstance(node, exp.Or)  # TRUE decides an OR, FALSE an AND
        if any(side is decisive for side in sides):
            return decisive
        if _UNKNOWN in sides:
            return _UNKNOWN
        return None if None in sides else not decisive
    if isinstance(node, exp.In) and not node.args.get("query"):  # an OR of equalities
        truth: Any = False
        for item in node.expressions:
            equal = _constant_truth(exp.EQ(this=node.this.copy(), expression=item.copy()))
            if equal is _UNKNOWN or equal is True:
                return equal
            truth = None if equal is None else truth
        return truth
    if type(node) in HOLDS:
        sides = [side.unnest() for side in (node.this, node.expression)]
        if any(isinstance(side, exp.Null) for side in sides):
            return None
        numbers = [exact_number(side) for side in sides]
        if None not in numbers:
            return HOLDS[type(node)](*numbers)
        if type(node) in (exp.EQ, exp.NEQ) and all(  # text equality reads no collation
                isinstance(side, exp.Literal) and side.is_string for side in sides):
            return HOLDS[type(node)](sides[0].name, sides[1].name)
    return _UNKNOWN


def _condition(node: exp.Expression, table: Table, resolve, name: str) -> GroupKey:
    """A condition (``EXTRACT(isodow FROM at) IN (6, 7)``, ``age > 30``): keys false and
    true, the condition checked as WHERE conditions are. A row where it is NULL belongs
    to no group, as a row a CASE without ELSE leaves unmatched, or a NULL column value."""
    condition = check_predicate(node, table, resolve, "a GROUP BY condition")
    return GroupKey(name, CASE, None, (False, True), "bool",
                    branches=((condition, True), (exp.not_(exp.paren(condition.copy())), False)))


def _constant_value(node: exp.Expression) -> str | int | None:
    """A constant's value, a quoted string or a whole number, through brackets and abs;
    None for other terms."""
    while isinstance(node, exp.Paren):
        node = node.this
    if isinstance(node, exp.Abs):
        value = _constant_value(node.this)
        return abs(value) if isinstance(value, int) else None
    if isinstance(node, exp.Null):
        return None
    try:
        return _case_output(node)
    except NotSupported:
        return None


def _case_output(node: exp.Expression | None) -> Any:
    if isinstance(node, exp.Null):
        return None
    if isinstance(node, exp.Literal) and node.is_string:
        return node.name
    value = literal_number(node)
    if value is not None and value == int(value) and not (
            isinstance(node, exp.Literal) and "." in node.name):
        return int(value)
    raise NotSupported("a CASE in GROUP BY must return literals (THEN 'label', THEN 3 "
                       "or NULL), so its keys are public")
