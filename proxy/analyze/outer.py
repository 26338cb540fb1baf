"""Outer queries over private aggregate queries: post-processing of their releases.

After the steps are merged (``proxy.analyze.merge_steps``) a CTE or subquery is left only where it
is not row-level. Four shapes of such queries only compute on the answers of aggregate
queries, so they are answered from releases, each charged as if sent alone
(post-processing costs no privacy):

- an outer SELECT over the aggregate query that filters (WHERE on released values, as a
  HAVING would), renames, computes on released values (arithmetic, CASE, NULLIF, SQRT …,
  window functions over its rows), orders and limits — run by ``proxy.postprocess`` over
  the released rows;
- a CROSS JOIN (or comma) of aggregate queries without GROUP BY, one row each, as dbt
  MetricFlow writes a ratio of two metrics::

      SELECT a.x / NULLIF(b.y, 0) FROM (SELECT SUM(cost) AS x FROM visits WHERE …) a
      CROSS JOIN (SELECT COUNT(*) AS y FROM visits) b

  each subquery a release of its own (a ``CombinedPlan``), the outer query run over
  their rows;
- aggregate queries joined once released (``JOIN … ON``, ``FULL OUTER JOIN``, steps that
  read only such queries), as MetricFlow combines metrics by their dimensions::

      SELECT COALESCE(a.m, b.m) AS m, MAX(a.x) / NULLIF(MAX(b.y), 0) AS ratio
      FROM (SELECT date_trunc('month', ts) AS m, SUM(v) AS x FROM t GROUP BY 1) a
      FULL OUTER JOIN (SELECT date_trunc('month', ts) AS m, COUNT(*) AS y FROM t
                       GROUP BY 1) b ON a.m = b.m
      GROUP BY COALESCE(a.m, b.m)

  each aggregate query a release of its own, the rest post-processing (its result held
  to 250,000 rows, ``proxy.postprocess``);
- the join of a grouped query with its own top-N subquery, as Superset sends for a
  chart's *series limit* (``models/helpers.py``, ``get_sqla_query``)::

      SELECT region AS region, count(*) AS count FROM people
      JOIN (SELECT region AS region__, count(*) AS mme_inner__ FROM people
            GROUP BY region ORDER BY mme_inner__ DESC LIMIT 5) AS series_limit
        ON region = region__
      GROUP BY region ORDER BY count DESC LIMIT 10000

  answered as the outer query alone, whose released groups are then kept for the N
  series ranking first by the released metric (summed over the other keys, e.g. the
  time buckets, for COUNT and SUM).

HAVING, select items computed from aggregates and windows over the groups are the first
shape written inside one query; ``proxy.analyze.having`` answers them through
``over_release``, and through ``over_scalars`` where a scalar subquery stands among
them (``COUNT(*) * 100.0 / (SELECT COUNT(*) FROM t)``): the second shape written inside,
its one-row release CROSS JOINed to the query's (a SELECT without FROM of such
subqueries too).

The sandbox: the outer query reads only the released tables, and may call only the
functions of ``_ROW_LEVEL`` and ``WINDOW_FUNCTIONS`` — none reads a file, the network,
a setting, the clock or randomness; anything else is refused before any debit.

An aggregate over a subquery grouped by the privacy unit (per-unit aggregates) is
``proxy.analyze.per_unit``'s, answered before this module is asked.

Everything else stays refused, each with a one-line reason naming the construct: an
aggregate over released aggregates, a subquery that limits or deduplicates rows, joins
with subqueries (a protected table joins public tables directly: ``proxy.analyze.joins``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from sqlglot import exp, parse_one

from proxy.analyze.group_keys import default_name
from proxy.analyze.joins import ALLOWED as JOIN_FORM
from proxy.analyze.merge_steps import step_name, steps
from proxy.analyze.per_unit import FORM as PER_UNIT_FORM
from proxy.analyze.staged import SCALAR, SCALAR_VALUE
from proxy.analyze.time_keys import to_char_format
from proxy.errors import NotSupported, RawRowAccess, Refused
from proxy.interrupts import checkpoint
from proxy.vocabulary import COUNT, PUBLIC, SELECTED, SUM, CombinedPlan, GroupKey, QueryPlan
from proxy.zones import reading_zone

Analyse = Callable[[exp.Select], QueryPlan]
SEVERAL_RELEASES = ("a query over a query answered in several releases (a scalar subquery "
                    "answered first, GROUPING SETS) is not supported; ask that query "
                    "alone, and compute over its answer in the same query")

# what an outer query may compute from released values, row by row: no function that
# reads anything but its arguments (files, settings, the clock, randomness)
_ROW_LEVEL = (
    exp.Select, exp.From, exp.Where, exp.Order, exp.Ordered, exp.Limit, exp.Offset,
    exp.Table, exp.TableAlias, exp.Identifier, exp.Column, exp.Alias, exp.Star,
    exp.Literal, exp.Null, exp.Boolean, exp.Paren, exp.Neg, exp.DataType,
    exp.DataTypeParam, exp.Distinct, exp.Add, exp.Sub, exp.Mul, exp.Div, exp.Mod, exp.And,
    exp.Or, exp.Not, exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE, exp.Is, exp.In,
    exp.Between, exp.Case, exp.If, exp.Cast, exp.Round, exp.Abs, exp.Coalesce, exp.Floor,
    exp.Ceil, exp.Greatest, exp.Least, exp.Tuple, exp.Var, exp.Nullif, exp.Sqrt, exp.Cbrt,
    exp.Pow, exp.Exp, exp.Ln, exp.Log, exp.Sign, exp.Trunc, exp.DPipe,
    exp.Lower, exp.Upper, exp.Trim, exp.Concat, exp.ConcatWs, exp.Substring, exp.Length,
    exp.TimeToStr,  # PostgreSQL's to_char, formatted by time_keys (proxy.postprocess)
    exp.UnixToTime,  # to_timestamp(epoch seconds): a timestamptz in both engines
    exp.Window, exp.WindowSpec,
    exp.Array,  # ARRAY[…] of released values (PostgreSQL's percentiles of an array)
)
# what a window may compute over the released rows (only as the function of an OVER)
WINDOW_FUNCTIONS = (
    exp.Sum, exp.Count, exp.Avg, exp.Min, exp.Max, exp.Lag, exp.Lead, exp.Ntile,
    exp.RowNumber, exp.Rank, exp.DenseRank, exp.PercentRank, exp.CumeDist, exp.FirstValue,
    exp.LastValue, exp.NthValue,
)
# what the query over a CROSS JOIN of one-row releases may aggregate (its one row), and
# over joined releases
_ONE_ROW = (exp.Max, exp.Min, exp.Sum, exp.Avg, exp.Count)
# what may combine joined releases: joins, its steps, grouping
_JOINING = (exp.Join, exp.With, exp.CTE, exp.Group, exp.Having, exp.NullSafeEQ)
ALLOWED = ("arithmetic, CASE, CAST, COALESCE, NULLIF, ROUND, TRUNC, ABS, SIGN, FLOOR, CEIL, "
           "LOWER, UPPER, TRIM, CONCAT, ||, SUBSTRING, LENGTH, TO_CHAR of a time, "
           "TO_TIMESTAMP of epoch seconds, "
           "SQRT, POWER, EXP, LN, LOG, ARRAY[…] and window functions (SUM, COUNT, AVG, MIN, MAX, LAG, "
           "LEAD, NTILE, ROW_NUMBER, RANK … OVER (…))")


def windowed(node: exp.Expression) -> bool:
    """Whether ``node`` is the function of a window (``SUM(…)`` in ``SUM(…) OVER (…)``),
    which reads the rows of the query's result, not of the table."""
    return isinstance(node.parent, exp.Window) and node.arg_key == "this"


@dataclass(frozen=True)
class OuterQuery:
    """The outer SELECT (PostgreSQL SQL) over the released rows, which it reads as the
    table ``released`` under the subquery's alias, the first of ``aliases`` (the further
    one-row releases of a CROSS JOIN as ``released_1`` …); ``what`` names it in the
    answer's notes (the outer query, HAVING); ``zone``: the session's TimeZone, which
    its timestamptz values are compared, cast and shown in."""

    sql: str
    aliases: tuple[str, ...]
    what: str = "the outer query"
    zone: str = "UTC"


@dataclass(frozen=True)
class SeriesLimit:
    """Keep the groups of the ``limit`` series that rank first (``descending``) by the
    released ``aggregate``; a series is the combination of the group terms ``terms``
    (indices into the plan's group_by), its value the sum over the other terms."""

    terms: tuple[int, ...]
    aggregate: int
    limit: int
    descending: bool
    # (term, its key that is NULL) of each term the join compares with =: the NULL
    # series ranks in the subquery but joins nothing, so its groups are dropped
    unmatched: tuple[tuple[int, Any], ...] = ()


@dataclass(frozen=True)
class RankedSeries:
    """A series limit ranked by a metric whose series total no release holds (AVG,
    MEDIAN … over time buckets): the top-N subquery is a release of its own (charged as
    if sent alone, its ORDER BY and LIMIT applied to its noisy values), and the rows of
    the query's release are kept whose ``columns`` (output indexes) equal the key
    columns ``ranked`` of one of its rows, as the inner join compares them (= : a NULL
    matches nothing)."""

    columns: tuple[int, ...]
    ranked: tuple[int, ...]
    limit: int | None = None  # the query's own, applied to the rows kept


def outer_plan(select: exp.Select, analyse: Analyse, canonical: Callable[[exp.Expression], str]
               ) -> QueryPlan | CombinedPlan | None:
    """The plan of an outer query over one aggregate query, with its post-processing, or
    over a CROSS JOIN of one-row aggregate queries; None when ``select`` has no CTE left
    (an ordinary query); refused otherwise."""
    ctes = steps(select)
    if not ctes and not any(isinstance(n.parent, (exp.From, exp.Join))
                            for n in select.find_all(exp.Subquery)):
        return None
    posts = _post_steps(ctes)
    _refuse_inner_steps({name: body for name, body in ctes.items() if name not in posts})
    joins = select.args.get("joins") or []
    first = step_name(select.args["from_"].this, ctes) if select.args.get("from_") else None
    if posts or (joins and first is not None and ctes[first].find(exp.AggFunc)
                 and not all(_crossed(join) for join in joins)):
        return _joined_releases(select, ctes, posts, analyse, canonical)
    if joins and all(_crossed(join) for join in joins):
        return _cross_joined(select, ctes, joins, analyse, canonical)
    if len(joins) == 1 and step_name(joins[0].this, ctes) is not None:
        return _series_limited(select, ctes, joins[0], analyse, canonical)
    if joins:
        raise _joined_subquery()
    source = step_name(select.args["from_"].this, ctes) if select.args.get("from_") else None
    if source is None:
        raise NotSupported("subqueries over protected tables are supported in FROM only, as "
                           "row-level steps or one aggregate query; query one table")
    body = _with_ctes(ctes[source], ctes, source)
    checkpoint()
    _refuse_aggregates(select)
    if not body.find(exp.AggFunc):
        raise RawRowAccess("this query would return rows of a protected table; ask for "
                           "aggregates instead")
    plan = analyse(body)
    if (isinstance(plan, QueryPlan) and isinstance(plan.post, OuterQuery)
            and plan.post.what != CROSS_JOINED) or isinstance(plan, CombinedPlan) \
            and isinstance(plan.post, OuterQuery):  # several scopes' releases joined
        return replace(plan, post=_stacked(select, source, plan))
    return over_release(select, source, _one_release(analyse, body, plan))


_STEP = "_idp_step"  # the inner outer query's rows, as the stacked outer query reads them


def _stacked(select: exp.Select, source: str, plan: QueryPlan | CombinedPlan) -> OuterQuery:
    """An outer query over an aggregate query that is post-processed itself (a window
    over its groups, HAVING: the top row per group, ``WHERE rn = 1`` over ``ROW_NUMBER()
    OVER (PARTITION BY a ORDER BY COUNT(*) DESC) AS rn``): both run over the released
    rows, the inner one as a step (``WITH``) the outer reads — post-processing of
    post-processing, checked as any outer query is."""
    outer = _outer_query(select, [source], [plan] if isinstance(plan, QueryPlan) else [],
                         "the outer query")
    tree = parse_one(outer.sql, read="postgres")
    alias = outer.aliases[0]
    for table in tree.find_all(exp.Table):
        if table.name == release_table(0):
            table.replace(exp.to_table(_STEP).as_(alias))
    inner = parse_one(plan.post.sql, read="postgres")
    tree = tree.with_(_STEP, as_=inner)
    return OuterQuery(tree.sql(dialect="postgres"), plan.post.aliases, "the outer query",
                      plan.post.zone)


def _refuse_aggregates(select: exp.Select) -> None:
    """An aggregate over released rows (other than a window's) is refused: the
    aggregate of the table itself is one release, and more accurate."""
    outside = select.copy()
    checkpoint()
    outside.set("with_", None)
    if any(not windowed(node) for node in outside.find_all(exp.AggFunc)) \
            or outside.args.get("group") or outside.args.get("having"):
        raise NotSupported("an aggregate over the answers of an aggregate query is not "
                           "supported; ask the aggregate of the table itself (one release), "
                           "or over units from a subquery grouped by the privacy unit (and columns "
                           "with declared keys): "
                           f"{PER_UNIT_FORM}")


CROSS_JOINED = "the query over the CROSS JOIN"
JOINED = "the query over the joined subqueries"
UNIONED = "the UNION of the releases"
MAX_UNION = 64


def union_plan(union: exp.Union, analyse: Analyse, canonical: Callable[[exp.Expression], str]
               ) -> CombinedPlan:
    """``A UNION [ALL] B …`` of aggregate queries: each branch a release of its own, as
    if sent alone (its constant items, ``'people' AS t``, written in the union instead:
    they read no row), the union of the released rows, its ORDER BY and LIMIT,
    post-processing."""
    leaves = _union_leaves(union)
    if len(leaves) > MAX_UNION:  # each a release: one statement of thousands of them
        raise Refused(f"a UNION of {len(leaves):,} queries is more than the {MAX_UNION} "
                      "releases one statement may hold; send fewer", "54000")
    widths = {len(leaf.expressions) for leaf in leaves}
    if len(widths) != 1:
        raise Refused("each UNION query must have the same number of columns", "42601")
    post = union.copy()
    for bracket in [node for node in post.find_all(exp.Subquery)
                    if not node.alias and isinstance(node.parent, exp.SetOperation)]:
        bracket.replace(bracket.this)  # (SELECT …) UNION ALL (SELECT …): the queries
    sources, parts = [], []
    for index, leaf in enumerate(_union_leaves(post)):
        items = [item.unalias() for item in leaf.expressions]
        constant = [not any(isinstance(n, (exp.Column, exp.Star, exp.AggFunc))
                            for n in item.walk()) for item in items]
        body = leaf.copy()
        body.set("expressions", [item.copy() for item, fixed in zip(leaf.expressions, constant)
                                 if not fixed])
        _renumbered(body, constant)
        if not body.expressions:
            raise NotSupported("each UNION query must compute an aggregate")
        plan = analyse(body)
        if not isinstance(plan, QueryPlan) or plan.post is not None:
            raise NotSupported("each UNION query must be one aggregate query whose select "
                               "items are aggregates, GROUP BY keys or constants")
        name = f"_idp_u{index}"
        outputs = iter(output.name for output in plan.outputs)
        leaf.set("expressions", [
            item.copy() if fixed else exp.alias_(exp.column(next(outputs), table=name,
                                                            quoted=True),
                                                 item.alias or default_name(item.unalias()),
                                                 quoted=True)
            for item, fixed in zip(leaf.expressions, constant)])
        for clause in ("where", "group", "having", "joins", "with_", "order", "limit"):
            leaf.set(clause, None)
        leaf.set("from_", exp.From(this=exp.to_table(name)))
        sources.append(name)
        parts.append((canonical(body), plan))
    return CombinedPlan(tuple(parts), _outer_query(post, sources, [p for _, p in parts],
                                                   UNIONED))


def _renumbered(body: exp.Select, constant: list[bool]) -> None:
    """A branch's GROUP BY positions (``GROUP BY 2``) renumbered for its items without
    the constant ones taken out; a position naming a constant dropped (grouping by a
    constant changes no group)."""
    group = body.args.get("group")
    if group is None:
        return
    kept = []
    for term in group.expressions:
        if isinstance(term, exp.Literal) and term.is_int \
                and 1 <= (position := int(term.name)) <= len(constant):
            if constant[position - 1]:
                continue
            term = exp.Literal.number(position - sum(constant[:position - 1]))
        kept.append(term)
    group.set("expressions", kept)
    if not kept:
        body.set("group", None)


def _union_leaves(union: exp.Union) -> list[exp.Select]:
    """The queries a UNION combines, in order, each in brackets or not (not the queries
    inside them: an EXISTS's, a subquery's)."""
    if not isinstance(union, exp.Union):
        raise NotSupported("INTERSECT and EXCEPT are not supported; UNION [ALL] of "
                           "aggregate queries is")
    leaves = []
    for side in (union.this, union.expression):
        while isinstance(side, exp.Subquery) and not side.alias:
            side = side.this
        if isinstance(side, exp.SetOperation):
            leaves += _union_leaves(side)
        elif isinstance(side, exp.Select):
            leaves.append(side)
        else:
            raise NotSupported("each UNION query must be one aggregate query")
    return leaves


def _post_steps(ctes: dict[str, exp.Expression]) -> list[str]:
    """The steps that read only aggregate steps or other such steps: post-processing,
    as dbt MetricFlow's step that joins its metrics' subqueries. A step that reads a
    table or a row-level step (no aggregate), or holds a UNION, is not one. (The steps
    come in the order they are written, each after those it reads.)"""
    posts: list[str] = []
    for name, body in ctes.items():
        read = [step_name(table, ctes) for table in body.find_all(exp.Table)] \
            if isinstance(body, exp.Select) else [None]
        if read and None not in read and all(
                step in posts or ctes[step].find(exp.AggFunc) for step in read):
            posts.append(name)
    return posts


def _joined_releases(select: exp.Select, ctes: dict[str, exp.Expression], posts: list[str],
                     analyse: Analyse, canonical: Callable[[exp.Expression], str]
                     ) -> CombinedPlan:
    """Aggregate queries joined once released, as dbt MetricFlow combines the metrics of
    a ratio by their dimensions (``FULL OUTER JOIN`` of grouped subqueries on the keys,
    ``MAX(…)`` per key, the ratio above): each aggregate query a release of its own
    (charged as if sent alone); the joins, aggregates and expressions over them are
    post-processing."""
    names = [name for name in ctes if name not in posts and ctes[name].find(exp.AggFunc)]
    parts = []
    for name in names:
        body = _with_ctes(ctes[name], ctes, name)
        plan = analyse(body)
        if not isinstance(plan, QueryPlan) or isinstance(plan.post, SeriesLimit):
            raise NotSupported("each joined subquery must be one aggregate query over a "
                               "protected table (no top-N join or GROUPING SETS inside)")
        parts.append((canonical(body), plan))
    if not parts:
        raise RawRowAccess("this query would return rows of a protected table; ask for "
                           "aggregates instead")
    post = _outer_query(select, names, [plan for _, plan in parts], JOINED, posts)
    return CombinedPlan(tuple(parts), post)
_CROSS_FORM = ("SELECT a.x / NULLIF(b.y, 0) FROM (SELECT SUM(v) AS x FROM t WHERE …) a "
               "CROSS JOIN (SELECT COUNT(*) AS y FROM t) b")


def _crossed(join: exp.Join) -> bool:
    """A CROSS JOIN, or a comma in FROM."""
    if join.args.get("on") or join.args.get("using") or join.args.get("side"):
        return False
    return (join.args.get("kind") or "CROSS").upper() == "CROSS"


def _cross_joined(select: exp.Select, ctes: dict[str, exp.Expression], joins: list[exp.Join],
                  analyse: Analyse, canonical: Callable[[exp.Expression], str]
                  ) -> CombinedPlan:
    """Aggregate queries without GROUP BY side by side, as dbt MetricFlow writes a ratio
    of two metrics (``CAST(MAX(a.x) AS DOUBLE PRECISION) / CAST(NULLIF(MAX(b.y), 0) AS
    DOUBLE PRECISION)``: MAX, MIN, SUM, AVG of the one row are its value): each one row,
    a release of its own (charged as if sent alone); the outer query computes on their
    values (post-processing)."""
    names = [step_name(source, ctes) for source in
             (select.args["from_"].this, *(join.this for join in joins))]
    if None in names:  # a table beside a subquery
        raise _joined_subquery()
    parts = []
    for name in names:
        body = _with_ctes(ctes[name], ctes, name)
        if not body.find(exp.AggFunc):
            raise RawRowAccess("this query would return rows of a protected table; ask for "
                               "aggregates instead")
        plan = analyse(body)
        if not isinstance(plan, QueryPlan):
            raise NotSupported(SEVERAL_RELEASES)
        if plan.group_by:
            raise NotSupported("a CROSS JOIN of aggregate subqueries is answered when none "
                               "has GROUP BY (one row each); ask for grouped values in one "
                               f"query, and ratios of totals as {_CROSS_FORM}")
        parts.append((canonical(body), plan))
    if select.args.get("group") or select.args.get("having"):
        raise NotSupported("GROUP BY and HAVING over the one row of a CROSS JOIN of "
                           "aggregate subqueries are not supported; compute on its values")
    post = _outer_query(select, names, [plan for _, plan in parts], CROSS_JOINED)
    return CombinedPlan(tuple(parts), post)


def _joined_subquery() -> NotSupported:
    return NotSupported("a join with a subquery over a protected table is not supported; "
                        f"join the tables themselves: {JOIN_FORM} (or inner-join the "
                        "subquery of the query's own top N groups: JOIN (SELECT k, COUNT(*) "
                        "AS n FROM t GROUP BY k ORDER BY n DESC LIMIT 5) s ON k = s.k)")


def over_release(select: exp.Select, source: str, plan: QueryPlan,
                 what: str = "the outer query") -> QueryPlan:
    """``plan`` with ``select`` (reading its answers as the table ``source``) run over
    its released rows."""
    return replace(plan, post=_outer_query(select, [source], [plan], what))


def over_scalars(select: exp.Select, scalars: list[tuple[str, QueryPlan]],
                 query: tuple[str, QueryPlan] | None = None, what: str = "the select list"
                 ) -> CombinedPlan:
    """``select`` (its own tree, changed here) over the releases of its scalar
    subqueries (canonical SQL, plan; ``proxy.analyze.staged.scalar_releases``), each
    place read as its release's one column, CROSS JOINed after the aggregate query's
    release ``query``, which it reads as ``proxy.analyze.having.SOURCE`` (none: a SELECT
    without FROM, ``SELECT (SELECT COUNT(*) FROM a), (SELECT AVG(x) FROM b)``)."""
    names = [f"{SCALAR}{index}" for index in range(len(scalars))]
    for place in list(select.find_all(exp.Placeholder)):
        place.replace(exp.column(SCALAR_VALUE, table=place.name, quoted=True))
    first = [] if query is None else [select.args["from_"].this.name]
    if query is None:
        select.set("from_", exp.From(this=exp.to_table(names[0])))
    for name in names[query is None:]:  # the first is the FROM's without a query
        select = select.join(name, join_type="CROSS", copy=False)
    parts = ([] if query is None else [query]) + scalars
    return CombinedPlan(tuple(parts), _outer_query(select, first + names,
                                                   [plan for _, plan in parts], what))


def _one_release(analyse: Analyse, body: exp.Select, plan: QueryPlan | None = None
                 ) -> QueryPlan:
    """The plan of an aggregate query whose answers are post-processed (``plan``: its
    analysis, made already); one that is itself post-processed (HAVING, a series limit)
    is refused: write it as one query."""
    plan = analyse(body) if plan is None else plan
    if not isinstance(plan, QueryPlan):  # a release staged before it, grouping sets…
        raise NotSupported(SEVERAL_RELEASES)
    if plan.post is not None:
        raise NotSupported("a query over a query with HAVING, computed results or a series "
                           "limit is not supported; filter and compute in one query")
    return plan


def _refuse_inner_steps(ctes: dict[str, exp.Expression]) -> None:
    """A subquery left unmerged that is not an aggregate query picks or shapes rows by
    the data: refused, naming what does it."""
    for body in ctes.values():
        if not isinstance(body, exp.Select):
            raise NotSupported("UNION/INTERSECT/EXCEPT in a subquery are not supported")
        if body.find(exp.AggFunc):
            continue
        for clause, what in (("limit", "LIMIT"), ("offset", "OFFSET"),
                             ("distinct", "SELECT DISTINCT")):
            if body.args.get(clause):
                raise NotSupported(f"a subquery with {what} picks rows by the data; filter "
                                   "with WHERE in one query over the table")
        if body.find(exp.Window):
            raise NotSupported("window functions over protected tables are not supported")
        if body.args.get("joins"):
            raise NotSupported("a join inside a subquery that is not merged is not "
                               f"supported; join in the query itself: {JOIN_FORM}")


def _with_ctes(body: exp.Expression, ctes: dict[str, exp.Expression], own: str) -> exp.Select:
    """``body`` as a statement of its own, with the CTEs it may read (row-level steps
    that several parts of the query share, e.g. Superset's ``virtual_table``)."""
    statement = body.copy()
    for name, other in ctes.items():
        if name != own and any(t.name == name for t in statement.find_all(exp.Table)):
            statement = statement.with_(name, as_=other.copy())
    return statement


def _outer_query(select: exp.Select, sources: list[str], plans: list[QueryPlan],
                 what: str, posts: list[str] = ()) -> OuterQuery:
    """``select`` over the released rows of ``plans``, each read where ``select`` reads
    the step of the same index in ``sources``; of its steps, only ``posts`` (those that
    read released steps only) are kept."""
    outer = select.copy()
    kept = [cte for cte in (outer.args.get("with_") or exp.With()).expressions
            if cte.alias_or_name in posts]
    outer.set("with_", exp.With(expressions=kept) if kept else None)
    for node in outer.walk():
        checkpoint()
        if what == CROSS_JOINED and (isinstance(node, exp.Join) or (
                isinstance(node, _ONE_ROW) and not node.find_ancestor(exp.Window))):
            continue  # MetricFlow's MAX(subq.x): the value of the one row
        if what == UNIONED and isinstance(node, exp.Union):
            continue
        if isinstance(node, exp.Join) and len(sources) > 1 and _crossed(node):
            continue  # releases side by side, each of one row but the first
        if what == JOINED and (isinstance(node, _JOINING) or (
                isinstance(node, _ONE_ROW) and not node.find_ancestor(exp.Window))):
            continue
        if isinstance(node, (exp.Div, exp.Mod, exp.IntDiv)) and _zero(node.expression):
            raise Refused("division by zero", "22012")  # as PostgreSQL, before any debit
        if isinstance(node, exp.TimeToStr):
            to_char_format(node)  # a format the post-processor cannot write: before any debit
        if not (isinstance(node, _ROW_LEVEL) or (isinstance(node, WINDOW_FUNCTIONS)
                                                  and windowed(node))):
            raise NotSupported(f"{_construct(node)} is not supported on released values; "
                               f"{what} may filter, rename, order, limit and compute with "
                               f"{ALLOWED}")
    for plan in plans:
        names = [output.name for output in plan.outputs]
        if len(set(names)) != len(names):
            raise NotSupported("name the subquery's results uniquely (AS …) so the outer "
                               "query can refer to them")
    aliases = list(sources)
    for table in list(outer.find_all(exp.Table)):
        if table.name in sources:
            index = sources.index(table.name)
            aliases[index] = table.alias_or_name
            table.replace(exp.to_table(release_table(index)).as_(aliases[index]))
    checkpoint()
    return OuterQuery(outer.sql(dialect="postgres", copy=False), tuple(aliases), what,
                      reading_zone().key)


def _zero(node: exp.Expression) -> bool:
    """Whether ``node`` is the constant 0 (in brackets or a cast)."""
    while isinstance(node, (exp.Paren, exp.Cast)):
        node = node.this
    return isinstance(node, exp.Literal) and not node.is_string and float(node.name) == 0


def _construct(node: exp.Expression) -> str:
    """The SQL name of a node a refusal names: a function's as written, else its kind."""
    if isinstance(node, exp.Anonymous):
        return node.name.upper()
    if isinstance(node, exp.Func):
        return node.sql_name()
    return node.key.upper()


def release_table(index: int) -> str:
    """The name the post-processing engine gives the ``index``-th release it reads."""
    return "released" if index == 0 else f"released_{index}"


def _series_limited(select: exp.Select, ctes, join: exp.Join, analyse: Analyse,
                    canonical: Callable[[exp.Expression], str]) -> QueryPlan | CombinedPlan:
    name = step_name(join.this, ctes)
    alias = join.this.alias_or_name
    body = _with_ctes(ctes[name], ctes, name)
    if join.args.get("side") or join.args.get("kind") not in (None, "INNER", ""):
        what = (join.args.get("side") or join.args.get("kind") or "").upper()
        raise NotSupported(f"a {what} JOIN with a subquery over a protected table is not "
                           "supported; subqueries join as a CROSS JOIN of aggregate queries "
                           "without GROUP BY, or as an inner join with the subquery of the "
                           "query's own top N groups")
    if not (isinstance(body, exp.Select) and body.args.get("limit") and body.args.get("group")
            and body.args.get("order")):
        raise _joined_subquery()
    main = select.copy()
    main.set("joins", None)
    main.set("with_", None)
    main = _with_ctes(main, ctes, name)
    pairs = _join_pairs(join.args.get("on"), alias)
    main_plan, body_plan = _one_release(analyse, main), _one_release(analyse, body)
    if (main_plan.where is None) != (body_plan.where is None) or (
            main_plan.where is not None and main_plan.where.sql() != body_plan.where.sql()):
        raise NotSupported("the top-N subquery must filter as the outer query does")
    if len(body_plan.order_by) != 1 or body_plan.limit is None:
        raise NotSupported("the top-N subquery orders by one metric and has a LIMIT")
    index, descending, _ = body_plan.order_by[0]
    ranked = body_plan.outputs[index].aggregate
    if ranked is None:
        raise NotSupported("the top-N subquery must rank by a metric")
    metric = body_plan.aggregates[ranked]
    if metric not in main_plan.aggregates:
        raise NotSupported("the top-N subquery ranks by a metric the query does not ask for; "
                           "rank by one of the query's aggregates")
    terms, unmatched, columns, ranked_columns = [], [], [], []
    for main_side, body_column, null_safe in pairs:
        body_output = [o for o in body_plan.outputs if o.name == body_column]
        main_output = [o for o, item in zip(main_plan.outputs, main.expressions)
                       if item.unalias() == main_side or item == main_side]
        if len(body_output) != 1 or body_output[0].group is None or len(main_output) != 1 \
                or main_output[0].group is None:
            raise NotSupported("the top-N join must pair each group column with the "
                               "subquery's column of the same group")
        term = main_plan.group_by[main_output[0].group]
        if not term.same_term(body_plan.group_by[body_output[0].group]):
            raise NotSupported("the top-N join pairs two different group columns")
        if null_safe and _may_be_null(term):
            raise NotSupported(f"the top-N join ON … IS NOT DISTINCT FROM … over "
                               f"{term.name}, which can be NULL, is not supported: write "
                               "the join with = (or group by a column with declared keys)")
        terms.append(main_output[0].group)
        columns.append(main_plan.outputs.index(main_output[0]))
        ranked_columns.append(body_plan.outputs.index(body_output[0]))
        if not null_safe:
            unmatched.append((main_output[0].group, None if term.labels is None or None
                              not in term.labels else term.labels.index(None)))
    if len(terms) != len(body_plan.group_by):
        raise NotSupported("the top-N join must pair every group column of the "
                           "subquery")
    if len(set(terms)) < len(main_plan.group_by) and metric.kind not in (COUNT, SUM):
        # a series' AVG (MEDIAN …) over all its buckets is in no release: the ranking
        # subquery is answered (and charged) as a release of its own; the query's LIMIT
        # applies after the join, so its release is asked without it
        unlimited = main.copy()
        unlimited.set("limit", None)
        return CombinedPlan(
            ((canonical(unlimited), _one_release(analyse, unlimited)),
             (canonical(body), body_plan)),
            RankedSeries(tuple(columns), tuple(ranked_columns), main_plan.limit))
    limit = SeriesLimit(tuple(terms), main_plan.aggregates.index(metric), body_plan.limit,
                        descending, tuple(unmatched))
    return replace(main_plan, post=limit)


def _may_be_null(term: GroupKey) -> bool:
    """Whether a group of ``term`` can have the key NULL: one of its public keys is (a
    CASE … ELSE NULL), or its keys are read from data later (a public table's column,
    a partition selection), which may hold NULL."""
    if term.kind in (PUBLIC, SELECTED):
        return True
    return any(key is None for key in (term.labels if term.labels is not None
                                       else term.keys))


def _join_pairs(on: exp.Expression | None, alias: str
                ) -> list[tuple[exp.Expression, str, bool]]:
    """(outer expression, subquery column, whether NULL-safe) of each equality of the ON
    condition: ``=``, or Tableau's ``IS NOT DISTINCT FROM``, which is the same join
    where the group cannot be NULL (``_series_limited`` checks that)."""
    if on is None:
        raise NotSupported("a join needs an ON condition")
    on = on.unnest()
    pairs = []
    for condition in on.flatten() if isinstance(on, exp.And) else [on]:
        condition = condition.unnest()
        if not isinstance(condition, (exp.EQ, exp.NullSafeEQ)):
            raise NotSupported("the top-N join takes equalities (=, IS NOT DISTINCT FROM) of group columns")
        sides = [condition.this, condition.expression]
        inner = [s for s in sides if isinstance(s, exp.Column) and s.table == alias]
        if len(inner) != 1:
            raise NotSupported("the top-N join takes equalities (=, IS NOT DISTINCT FROM) of group columns")
        other = sides[1] if sides[0] is inner[0] else sides[0]
        pairs.append((other, inner[0].name, isinstance(condition, exp.NullSafeEQ)))
    return pairs
