"""Constant arithmetic in WHERE and ON folded to one constant before analysis:
``l_quantity <= 1 + 10`` (TPC-H Q19), ``l_discount BETWEEN 0.06 - 0.01 AND 0.06 +
0.01``, ``o_orderdate < date '1994-01-01' + interval '1' year``, Looker's ``TIMESTAMP
'2024-06-01' + (7 || ' day')::INTERVAL`` (its text cast to an interval read first),
``NOW() - INTERVAL '700 days'`` (a plural unit), ``DATE '2024-01-01' + 5`` (whole days)
and Metabase's ``CAST((NOW() + INTERVAL '-30 day') AS date)`` (a folded moment cast);
and ``col IS [NOT] DISTINCT FROM constant`` and ``COALESCE(col, constant) op constant`` as
the comparisons they equal (``_null_safe``, ``_uncoalesced``).

Each *maximal* subtree made only of literals, ``+``, ``-``, ``*``, unary minus,
brackets, casts and intervals is given to sqlglot's ``simplify`` on its own, and
replaced by what it returns when that is one constant (a number, a string, or a date
or timestamp cast that ``merge_steps.fold_time_constants`` then reads as every other
time literal); otherwise it is left as written and the WHERE checks refuse it as
before. Division is not folded (PostgreSQL divides integers as integers, DuckDB
not). ``simplify`` is never run on the whole tree: it compares every two terms of a
chain, which made long WHEREs quadratic (issue 30); here it sees subtrees of at most
``MAX_NODES`` nodes, so the pass is linear in the statement. A folded number is an
exact decimal (``0.06 - 0.01`` is ``0.05``); one a double cannot hold is refused by
the WHERE checks (22003) as a written one is.

The folded constant is what PostgreSQL computes for the constant expression, so the
condition keeps the same rows (where PostgreSQL would fail on it, an integer sum
beyond 64 bits, the folded number is read as a numeric and nothing fails); it is a
per-record condition as before, and no sensitivity changes.
"""

from __future__ import annotations

import datetime as dt
import re
from decimal import Decimal

from sqlglot import exp
from sqlglot.optimizer.simplify import simplify

from proxy.analyze.comparisons import FLIPPED, HOLDS
from proxy.analyze.time_keys import TRUNC_UNITS, truncate
from proxy.errors import Refused
from proxy.zones import reading_zone

_PARTS = (exp.Literal, exp.Neg, exp.Paren, exp.Add, exp.Sub, exp.Mul, exp.Cast,
          exp.Interval, exp.Var, exp.DataType, exp.DataTypeParam)
_OPERATIONS = (exp.Add, exp.Sub, exp.Mul)
MAX_NODES = 64


def fold_constants(tree: exp.Expression) -> exp.Expression:
    """``tree`` (changed in place) with the constant arithmetic of its WHERE, FILTER
    and ON clauses folded."""
    clauses = [node for node in tree.find_all(exp.Where, exp.Join)]
    for clause in clauses:
        root = clause.args.get("on") if isinstance(clause, exp.Join) else clause.this
        if root is None:
            continue
        for cast in list(root.find_all(exp.Cast)):
            interval = _written_interval(cast)
            if interval is not None:
                cast.replace(interval)
        root = _now_read(clause, root)
        for node in list(root.find_all(exp.NullSafeEQ, exp.NullSafeNEQ, exp.Case,
                                       *_COMPARED)):
            plain = _null_safe(node) if isinstance(node, (exp.NullSafeEQ, exp.NullSafeNEQ)) \
                else _case_decided(node, root) if isinstance(node, exp.Case) \
                else _uncoalesced(node) or _case_decided(node, root)
            if plain is not None and node is root:
                clause.set("on" if isinstance(clause, exp.Join) else "this", plain)
                root = plain
            elif plain is not None:
                node.replace(plain)
        for interval in root.find_all(exp.Interval):
            _singular_unit(interval)
        root = _arithmetic_folded(clause, root)
        for node in list(root.find_all(exp.Cast, exp.Add, exp.Sub)):
            moved = _recast(node) if isinstance(node, exp.Cast) else _date_shifted(node)
            if moved is None:
                continue
            if node is root:
                clause.set("on" if isinstance(clause, exp.Join) else "this", moved)
                root = moved
            else:
                node.replace(moved)
        truncated_any = False
        for trunc in list(root.find_all(exp.TimestampTrunc, exp.DateTrunc)):
            truncated = _truncated(trunc)
            if truncated is not None:
                truncated_any = True
                trunc.replace(truncated)
        if truncated_any:  # a month's end: date_trunc('month', TIMESTAMP '…') + INTERVAL '1 month'
            _arithmetic_folded(clause, root)
    return tree


def _arithmetic_folded(clause: exp.Where | exp.Join, root: exp.Expression) -> exp.Expression:
    """The clause's condition ``root`` with its constant arithmetic folded (changed in
    place; a new root where the whole condition folded)."""
    for node in list(root.walk(prune=_foldable)):
        if not _foldable(node):
            continue
        folded = _folded(node)
        if folded is None:
            continue
        while isinstance(node.parent, exp.Paren):  # (1 + 10) is 11, compared as one
            node = node.parent
        if node is root:
            clause.set("on" if isinstance(clause, exp.Join) else "this", folded)
        else:
            node.replace(folded)
    return clause.args.get("on") if isinstance(clause, exp.Join) else clause.this


NOW = (exp.CurrentTimestamp, exp.Localtimestamp, exp.CurrentDate)
_CLOCK = re.compile(r"\b(CURRENT_TIMESTAMP|CURRENT_DATE|LOCALTIMESTAMP|NOW\s*\()", re.I)


def reads_clock(canonical: str) -> bool:
    """Whether a statement's canonical text may read the clock (``_now_read``): its plan
    holds the moment it was analysed at, so neither the text nor its canonical form
    alone says what it asks (a string that merely spells one is taken as reading it:
    only caching is lost)."""
    return _CLOCK.search(canonical) is not None


def _now_read(clause: exp.Expression, root: exp.Expression) -> exp.Expression:
    """NOW(), CURRENT_TIMESTAMP, LOCALTIMESTAMP and CURRENT_DATE (Metabase's relative
    date filters: ``visited_at >= DATE_TRUNC('day', NOW() + INTERVAL '-30 day')``) as the
    session zone's wall clock now, a timestamp (a date) constant, which the arithmetic
    below and ``merge_steps.fold_time_constants`` then read as any other: a time is
    public. CURRENT_DATE ± a whole number of days is that date. PostgreSQL compares a
    timestamp column with NOW(), a moment, in the session's zone: the same rows but for
    the hour a daylight-saving change repeats. The statement is then never kept by the
    shape cache (``shapes._template``): its plan holds this moment."""
    now = dt.datetime.now(reading_zone()).replace(tzinfo=None)
    for node in list(root.find_all(*NOW)):
        if isinstance(node, exp.CurrentDate):
            value: exp.Expression = exp.cast(exp.Literal.string(now.date().isoformat()),
                                             exp.DataType.Type.DATE)
            shifted = node.parent
            days = shifted.expression if isinstance(shifted, (exp.Add, exp.Sub)) \
                and shifted.this is node else None
            if isinstance(days, exp.Literal) and not days.is_string and days.name.isdigit():
                sign = -1 if isinstance(shifted, exp.Sub) else 1
                try:
                    day = now.date() + dt.timedelta(days=sign * int(days.name))
                except OverflowError:  # as PostgreSQL: 22008, before anything is spent
                    raise Refused("date out of range: CURRENT_DATE "
                                  f"{'-' if sign < 0 else '+'} {days.name}", "22008") from None
                value = exp.cast(exp.Literal.string(day.isoformat()), exp.DataType.Type.DATE)
                node = shifted
        else:
            value = exp.cast(exp.Literal.string(now.isoformat(" ")),
                             exp.DataType.Type.TIMESTAMP)
        if node is root:
            root = value
            clause.set("on" if isinstance(clause, exp.Join) else "this", value)
        else:
            node.replace(value)
    return root


def _truncated(node: exp.Expression) -> exp.Expression | None:
    """``DATE_TRUNC('unit', constant)`` as the truncated timestamp constant (PostgreSQL's
    date_trunc of a date is the midnight of the session's zone: the same wall clock);
    None for anything else."""
    unit, moment = node.args.get("unit"), _moment(node.this)
    if node.args.get("zone") is not None or not isinstance(unit, (exp.Var, exp.Literal)) \
            or unit.name.lower() not in TRUNC_UNITS or moment is None:
        return None
    return _literal_moment(exp.DataType.Type.TIMESTAMP, truncate(moment[1],
                                                                  unit.name.lower()))


def _written_interval(cast: exp.Cast) -> exp.Expression | None:
    """``CAST('7 day' AS INTERVAL)``, also of ``7 || ' day'`` (Looker's relative date
    filters), as the interval literal ``INTERVAL '7 day'``; None for other casts, and
    for text that is not a whole number of one unit (left as written, refused later)."""
    if not cast.to.is_type(exp.DataType.Type.INTERVAL):
        return None
    parts, text = [cast.this.unnest()], ""
    while parts:
        part = parts.pop(0)
        if isinstance(part, exp.DPipe):
            parts[:0] = [part.this.unnest(), part.expression.unnest()]
        elif isinstance(part, exp.Literal) and (part.is_string or part.name.isdigit()):
            text += part.name
        else:
            return None
    words = text.split()
    if len(words) != 2 or not words[0].isdigit() or len(words[0]) > 9 \
            or words[1].lower().rstrip("s") not in _UNITS:
        return None
    return exp.Interval(this=exp.Literal.string(words[0]), unit=exp.var(
        words[1].lower().rstrip("s").upper()))


_UNITS = ("year", "month", "week", "day", "hour", "minute", "second")


def _null_safe(node: exp.NullSafeEQ | exp.NullSafeNEQ) -> exp.Expression | None:
    """``col IS [NOT] DISTINCT FROM constant`` in the comparisons the checks read, with
    the same two-valued truth on every row (a NULL column is distinct from a value, not
    from NULL): ``IS DISTINCT FROM NULL`` is ``IS NOT NULL``, ``IS NOT DISTINCT FROM v``
    is ``(col = v AND col IS NOT NULL)`` and ``IS DISTINCT FROM v`` its negation
    ``(col <> v OR col IS NULL)``. None where neither side is a constant."""
    column, value = _signed(node.this.unnest()), _signed(node.expression.unnest())
    if isinstance(column, (exp.Literal, exp.Null)):
        column, value = value, column
    if not isinstance(value, (exp.Literal, exp.Null)) or isinstance(column, (exp.Literal,
                                                                             exp.Null)):
        return None
    equal = isinstance(node, exp.NullSafeEQ)
    value = _fresh(value)  # it decides the form (keys, narrowing): no slot to bind anew
    if isinstance(value, exp.Null):
        null = exp.Is(this=column.copy(), expression=exp.Null())
        return exp.paren(null if equal else exp.not_(null), copy=False)
    if equal:
        return exp.paren(exp.and_(exp.EQ(this=column.copy(), expression=value),
                                  exp.not_(exp.Is(this=column.copy(), expression=exp.Null()))),
                         copy=False)
    return exp.paren(exp.or_(exp.NEQ(this=column.copy(), expression=value),
                             exp.Is(this=column.copy(), expression=exp.Null())), copy=False)


_COMPARED = tuple(HOLDS)


def _uncoalesced(node: exp.Expression) -> exp.Expression | None:
    """``COALESCE(col, c) op v`` (c and v constants; Power BI's and analysts' NULL
    handling in a filter) as the comparison it equals on every row: ``col op v``, or
    ``(col op v OR col IS NULL)`` where ``c op v`` holds. Numbers compared exactly
    (``Decimal``), texts for equality only (their order is the backend's collation);
    None for other forms."""
    left, right, kind = _oriented(node, exp.Coalesce)
    if not isinstance(left, exp.Coalesce) or len(left.expressions) != 1 \
            or not isinstance(left.this.unnest(), exp.Column):
        return None
    fallback, right = _signed(left.expressions[0].unnest()), _signed(right)
    holds = _constants_hold(fallback, kind, right)
    if holds is None:
        return None
    column = left.this.unnest()
    # v decided the form: a fresh node, no slot the shape cache would bind anew
    # (``shapes``: COALESCE(age, 0) > -5 must not reuse > 30's form)
    compared = kind(this=column.copy(), expression=_fresh(right))
    if not holds:
        return exp.paren(compared, copy=False)
    return exp.paren(exp.or_(compared, exp.Is(this=column.copy(), expression=exp.Null())),
                     copy=False)


def _oriented(node: exp.Expression, operand: type) -> tuple[exp.Expression, exp.Expression,
                                                             type]:
    """(the side of the comparison ``node`` that is an ``operand``, the other side, the
    comparison read from it): ``3 < COALESCE(x, 0)`` as ``COALESCE(x, 0) > 3``."""
    left, right, kind = node.this.unnest(), node.expression.unnest(), type(node)
    if isinstance(right, operand) and not isinstance(left, operand):
        return right, left, FLIPPED[kind]
    return left, right, kind


def _case_decided(node: exp.Expression, root: exp.Expression) -> exp.Expression | None:
    """A searched CASE that decides a row of the WHERE (Tableau's groups and calculated
    filters: ``(CASE WHEN region = 'north' THEN 'N' ELSE 'other' END) = 'N'``, or
    ``CASE WHEN c THEN age > 50 ELSE age > 30 END``) as the conditions it equals: the
    branch i whose value holds, ``c_i IS TRUE`` and every earlier ``c_j IS NOT TRUE``,
    ORed. The values compared are constants, computed here (numbers exactly, texts for
    equality only). Only where nothing above it but AND, OR and brackets up to the
    WHERE: there a NULL (a value NULL, no ELSE) keeps the rows FALSE keeps, none; under
    NOT they differ. None for any other form."""
    if isinstance(node, exp.Case):
        case, value = node, None
    else:
        case, value, kind = _oriented(node, exp.Case)
        value = _signed(value)
        if not isinstance(case, exp.Case) or not isinstance(value, exp.Literal):
            return None
    if case.args.get("this") is not None or not _decides_the_row(node, root):
        return None
    branches = [(branch.this, branch.args["true"]) for branch in case.args.get("ifs") or []]
    branches.append((None, case.args.get("default") or exp.Null()))
    terms, earlier = [], []
    for condition, result in branches:
        holds = _holds(result.unnest(), value, kind if value is not None else None)
        if holds is None:
            return None
        if holds is not False:
            reached = [*earlier, *([] if condition is None else [
                exp.Is(this=exp.paren(condition.copy()), expression=exp.true())])]
            extra = [exp.paren(result.copy())] if holds is True and value is None else []
            terms.append(exp.and_(*reached, *extra) if reached or extra else exp.true())
        if condition is not None:
            earlier.append(exp.not_(exp.paren(exp.Is(this=exp.paren(condition.copy()),
                                                     expression=exp.true()))))
    return exp.paren(exp.or_(*terms) if terms else exp.false(), copy=False)


def _decides_the_row(node: exp.Expression, root: exp.Expression) -> bool:
    """Whether ``node`` stands under AND, OR and brackets alone up to the condition's
    root (where NULL and FALSE keep the same rows)."""
    while node is not root:
        node = node.parent
        if node is None or not isinstance(node, (exp.And, exp.Or, exp.Paren)):
            return False
    return True


def _holds(result: exp.Expression, value: exp.Literal | None, kind) -> bool | None:
    """Whether a CASE branch's ``result`` compared with ``value`` by ``kind`` holds:
    True, False (NULL: False, ``_case_decided``), or None when not computed here. With
    no ``value`` the branch is a condition: True where it must be read (it stays),
    False where it is the constant FALSE or NULL."""
    if value is None:
        if isinstance(result, (exp.Null,)) or (isinstance(result, exp.Boolean)
                                               and not result.this):
            return False
        if isinstance(result, exp.Literal):
            return None  # a number or text where a condition must stand: refused as written
        return True
    result = _signed(result)
    return False if isinstance(result, exp.Null) else _constants_hold(result, kind, value)


def _constants_hold(left: exp.Expression, kind, right: exp.Expression) -> bool | None:
    """Whether ``left kind right`` holds for two constant literals: numbers exactly
    (``Decimal``), texts for equality only (their order is the backend's collation);
    None where it is not computed here."""
    if not isinstance(left, exp.Literal) or not isinstance(right, exp.Literal) \
            or left.is_string != right.is_string \
            or (right.is_string and kind not in (exp.EQ, exp.NEQ)):
        return None
    try:
        a, b = ((left.name, right.name) if right.is_string
                else (Decimal(left.name), Decimal(right.name)))
    except ArithmeticError:
        return None
    return HOLDS[kind](a, b)


def _signed(node: exp.Expression) -> exp.Expression:
    """A negative number literal (``-1``, read as a minus before 1) as one literal."""
    if isinstance(node, exp.Neg) and isinstance(node.this, exp.Literal) \
            and not node.this.is_string and not node.this.name.startswith("-"):
        return exp.Literal.number(f"-{node.this.name}")
    return node


def _fresh(value: exp.Expression) -> exp.Expression:
    """A copy of a literal (or NULL) without the position the shape cache reads its
    slots by: a value that decided the form is no slot (``proxy.analyze.shapes``)."""
    if isinstance(value, exp.Literal):
        return exp.Literal(this=value.this, is_string=value.is_string)
    return exp.Null()


def _singular_unit(interval: exp.Interval) -> None:
    """``INTERVAL '700 days'`` (read as 700 and the unit DAYS) with the unit DAY, the
    form sqlglot's ``simplify`` computes with: ``NOW() - INTERVAL '700 days'`` was
    refused where ``NOW() - INTERVAL '700' DAY`` was folded."""
    unit = interval.args.get("unit")
    if isinstance(unit, exp.Var) and unit.name.lower().endswith("s") \
            and unit.name.lower()[:-1] in _UNITS:
        interval.set("unit", exp.var(unit.name[:-1].upper()))


_MOMENTS = (exp.DataType.Type.DATE, exp.DataType.Type.TIMESTAMP)


def _moment(node: exp.Expression) -> tuple[exp.DataType.Type, dt.datetime] | None:
    """The type and value of a date or timestamp constant (a cast of a literal)."""
    node = node.unnest()
    if not isinstance(node, exp.Cast) or not isinstance(node.this, exp.Literal) \
            or not node.this.is_string:
        return None
    kind = next((t for t in _MOMENTS if node.to.is_type(t)), None)
    try:
        return (kind, dt.datetime.fromisoformat(node.this.name)) if kind else None
    except ValueError:
        return None


def _literal_moment(kind: exp.DataType.Type, value: dt.datetime) -> exp.Expression:
    text = value.date().isoformat() if kind == exp.DataType.Type.DATE \
        else value.isoformat(" ")
    return exp.cast(exp.Literal.string(text), kind)


def _recast(cast: exp.Cast) -> exp.Expression | None:
    """A date or timestamp constant cast to DATE or TIMESTAMP as that constant:
    Metabase's ``CAST((NOW() + INTERVAL '-30 day') AS date)`` is the date of the folded
    moment (PostgreSQL's cast of a timestamp to a date drops its time of day; of a date
    to a timestamp gives its midnight)."""
    kind = next((t for t in _MOMENTS if cast.to.is_type(t)), None)
    inner = _moment(cast.this)
    if kind is None or inner is None or cast.this.unnest() is cast:
        return None
    return _literal_moment(kind, inner[1])


def _date_shifted(node: exp.Add | exp.Sub) -> exp.Expression | None:
    """``DATE '2024-01-01' + 5`` (or − 5) as the date 5 days later (earlier), as
    PostgreSQL's date plus an integer."""
    moment = _moment(node.this)
    days = node.expression.unnest()
    if moment is None or moment[0] != exp.DataType.Type.DATE \
            or not isinstance(days, exp.Literal) or days.is_string \
            or not days.name.isdigit() or len(days.name) > 7:
        return None
    step = dt.timedelta(days=int(days.name))
    try:
        value = moment[1] + step if isinstance(node, exp.Add) else moment[1] - step
    except OverflowError:
        return None
    return _literal_moment(exp.DataType.Type.DATE, value)


def _foldable(node: exp.Expression) -> bool:
    """An arithmetic operation of constants only, of at most MAX_NODES nodes."""
    if not isinstance(node, _OPERATIONS):
        return False
    for count, part in enumerate(node.walk(), 1):
        if count > MAX_NODES or not isinstance(part, _PARTS):
            return False
    return True


def _folded(node: exp.Expression) -> exp.Expression | None:
    try:
        result = simplify(node.copy(), dialect="postgres")
    except Exception:  # sqlglot could not compute it: left as written, refused later
        return None
    constant = result.this if isinstance(result, exp.Neg) else result
    if isinstance(constant, exp.Literal):
        return result
    if isinstance(result, exp.Cast) and isinstance(result.this, exp.Literal) \
            and result.this.is_string:
        if result.to.is_type(exp.DataType.Type.DATE) and node.find(exp.Interval):
            # PostgreSQL's date plus an interval is a timestamp: sqlglot's DATE cast of
            # '2023-01-01 01:00:00' would drop the hour (d < DATE '…' + INTERVAL '1 hour')
            return exp.cast(result.this, exp.DataType.Type.TIMESTAMP)
        return result
    return None
