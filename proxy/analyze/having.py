"""HAVING, and select items computed from aggregates, as post-processing of one release.

``SELECT region, COUNT(*) FROM people GROUP BY region HAVING COUNT(*) > 10`` is the
outer query ``SELECT … FROM (SELECT region, COUNT(*) … GROUP BY region) WHERE count > 10``
written inside: it is answered as that outer query (``proxy.analyze.outer``), whose
post-processor (``proxy.postprocess``) runs it over the released rows. The same holds
for select items that compute on aggregates or are constants (``COUNT(*) * 2``,
``'avg' AS metric``, as Grafana sends, ``SUM(x) / NULLIF(COUNT(*), 0)``), window
functions over the groups (``COUNT(*) / SUM(COUNT(*)) OVER ()``, ``LAG(COUNT(*)) OVER
(ORDER BY month)``): a window of an aggregate query reads its result rows, the
released ones. And for select items computed from GROUP BY terms without being one
(Looker's ``TO_CHAR(DATE_TRUNC('month', at), 'YYYY-MM')`` under ``GROUP BY
DATE_TRUNC('month', at)``): the term is released as a key, the function computed on it.

Privacy: the filter reads only the noisy released values and the public group keys, so
it is post-processing and costs no ε (SPEC §5.3). It does not decide which groups are
released — every declared key is still computed and noised; HAVING only drops rows of
the answer afterwards. An aggregate that HAVING names but the select list does not
(``HAVING AVG(income) > 40000``) is released too — the filter must read a noisy value,
never the true one — so it is charged like a selected aggregate, then left out of the
result. The whole query is one release, charged once.

What HAVING may name: aggregates, GROUP BY terms (as written in GROUP BY, or a select
item computing one) and select aliases; a bare column that is neither is refused in one
line, as it would read rows. ORDER BY and LIMIT move to the outer query, so they apply
after the filter.
"""

from __future__ import annotations

from collections.abc import Callable

from sqlglot import exp
from sqlglot.optimizer.normalize_identifiers import normalize_identifiers

from proxy.analyze.aggregates import is_aggregate
from proxy.analyze.group_keys import default_name, dereferenced
from proxy.analyze.ordering import offset_of
from proxy.analyze.outer import over_release, over_scalars, windowed
from proxy.errors import NotSupported
from proxy.interrupts import checkpoint
from proxy.rules import Table
from proxy.vocabulary import CombinedPlan, QueryPlan

Analyse = Callable[[exp.Select], QueryPlan]
SOURCE = "_idp_released"  # the aggregate query, as the outer query reads it


def having_plan(select: exp.Select, table: Table, analyse: Analyse,
                canonical: Callable[[exp.Expression], str],
                scalars: list[tuple[str, QueryPlan]] = ()) -> QueryPlan | CombinedPlan | None:
    """The plan of an aggregate query over ``table`` with HAVING or computed select
    items: its aggregate query, with the rest as an outer query over the release. None
    when ``select`` has neither (an ordinary aggregate query). Else ``select``'s WHERE
    is moved into the aggregate query: the caller's own tree, read no further but for
    its select items. ``scalars``: the releases (canonical SQL, plan) of the scalar
    subqueries ``proxy.analyze.staged.scalar_releases`` took out of ``select``, read by
    the outer query where their placeholders stand (one row each, CROSS JOINed): then a
    ``CombinedPlan`` of the aggregate query and them."""
    # ``analyse`` is handed the aggregate query (``inner``, a copy made here) to keep
    items = [item.unalias() for item in select.expressions]
    having = select.args.get("having")
    if not any(_aggregate(n) for n in select.walk()):  # no aggregate: refused as usual
        return None
    groups = [_injective_inner(dereferenced(node, select, table)) for node in
              (select.args["group"].expressions if select.args.get("group") else [])]
    computed = [_computed(node) or _of_groups(node, groups) for node in items]
    if not (having or any(computed) or offset_of(select)):
        return None
    released = _Released(items, computed, groups, select, table)
    filtered = released.map(having.this, "HAVING") if having else None
    selected = [released.map(node, "SELECT") if computed[i] else None
                for i, node in enumerate(items)]

    # the WHERE moved, not copied, into the aggregate query (TPC-H Q17's second stage: 52
    # released terms): the caller hands ``select`` over and reads only its items after
    where = select.args.get("where")
    select.set("where", None)
    inner = select.copy()
    inner.set("where", where)
    for clause in ("having", "order", "limit", "offset"):
        inner.set(clause, None)
    inner.set("expressions", [exp.alias_(node.copy(), name, quoted=True)
                              for name, node in released.columns])
    if groups:
        inner.set("group", exp.Group(expressions=[g.copy() for g in groups]))
    written = canonical(inner) if scalars else None  # before analyse takes it
    plan = analyse(inner)
    if not isinstance(plan, QueryPlan):  # a window over the keys alone: a listing of keys
        raise NotSupported("a window function over GROUP BY keys alone is not supported; "
                           "ask it beside an aggregate (COUNT(*)), or list the keys "
                           "without it")

    names = [_name(item, plan, i) for i, item in enumerate(select.expressions)]
    outer = exp.select(*[exp.alias_(_column(f"_idp_{i}") if value is None else value, name,
                                    quoted=True)
                         for i, (value, name) in enumerate(zip(selected, names))]
                       ).from_(SOURCE)
    if filtered is not None:
        outer = outer.where(filtered)
    if select.args.get("order"):
        outer = outer.order_by(*[released.ordered(o, names)
                                 for o in select.args["order"].expressions])
    for clause in ("limit", "offset"):
        if select.args.get(clause):
            outer.set(clause, select.args[clause].copy())
    what = "HAVING" if having else "the select list" if any(computed) else "OFFSET"
    if scalars:
        return over_scalars(outer, scalars, (written, plan), what)
    return over_release(outer, SOURCE, plan, what)


def _aggregate(node: exp.Expression) -> bool:
    return is_aggregate(node) or isinstance(node, exp.Filter)


def _computed(node: exp.Expression) -> bool:
    """A select item computed from released values: an expression over aggregates
    (``COUNT(*) * 2``), or a constant. A plain aggregate, a group key and a raw column
    (refused later) are not."""
    if _aggregate(node):
        return False
    return any(_aggregate(n) for n in node.walk()) or not any(
        isinstance(n, (exp.Column, exp.Star)) for n in node.walk())


def _injective_inner(group: exp.Expression) -> exp.Expression:
    """A GROUP BY term through a one-to-one function, as the term itself: the same
    groups, the function then computed on the released keys (Grafana's
    ``to_timestamp(floor(extract(epoch FROM t) / 3600) * 3600)``: epoch seconds to a
    moment)."""
    bare = group.unnest()
    if isinstance(bare, exp.UnixToTime) and not bare.args.get("scale") \
            and not bare.args.get("zone") and not bare.args.get("format"):
        return bare.this
    return group


def _of_groups(node: exp.Expression, groups: list[exp.Expression]) -> bool:
    """Whether ``node`` is computed from GROUP BY terms without being one
    (``TO_CHAR(DATE_TRUNC('month', at), 'YYYY-MM')`` under ``GROUP BY DATE_TRUNC('month',
    at)``, Looker's months): every column it reads lies inside such a term, so it is a
    function of the released keys."""
    wanted = [_comparable(group.unnest()) for group in groups]
    if not wanted or _comparable(node.unnest()) in wanted or any(
            _aggregate(part) for part in node.walk()):  # MEDIAN(k): an aggregate's own
        return False
    inside = {id(column) for part in node.walk() if _comparable(part.unnest()) in wanted
              for column in part.find_all(exp.Column)}
    columns = list(node.find_all(exp.Column))
    return bool(columns) and all(id(column) in inside for column in columns)


def _comparable(node: exp.Expression) -> exp.Expression:
    """``node`` as PostgreSQL reads it: unquoted names in lower case, no table names."""
    copy = normalize_identifiers(node.copy(), dialect="postgres")
    for column in list(copy.find_all(exp.Column)):
        column.replace(exp.column(column.args["this"]))
    return copy


def _column(name: str) -> exp.Column:
    return exp.column(name, table=SOURCE, quoted=True)


class _Released:
    """The columns of the aggregate query: the select items that are not computed
    (``_idp_<position>``), then each aggregate or group term only HAVING names
    (``_idp_h<n>``); and the translation of HAVING, ORDER BY and computed items into
    expressions over those columns."""

    def __init__(self, items, computed, groups, select: exp.Select, table: Table) -> None:
        self.columns: list[tuple[str, exp.Expression]] = [
            (f"_idp_{i}", node) for i, node in enumerate(items) if not computed[i]]
        self.groups = groups
        self.table = table
        self.aliases = {item.alias.lower(): f"_idp_{i}"
                        for i, item in enumerate(select.expressions)
                        if isinstance(item, exp.Alias) and not computed[i]}
        self._named: dict[str, str] = {}  # each column's comparable text: its first name
        self._indexed = 0  # the columns read into it so far

    def _find(self, node: exp.Expression) -> str | None:
        """The released column ``node`` is, by its comparable text: each column's read
        once (compared anew with every column, a select item of 1,000 aggregates took
        two minutes, uncancellable: the review of 2026-11-29)."""
        for name, seen in self.columns[self._indexed:]:
            self._named.setdefault(_comparable(seen).sql(dialect="postgres"), name)
        self._indexed = len(self.columns)
        return self._named.get(_comparable(node).sql(dialect="postgres"))

    def map(self, node: exp.Expression, clause: str, add: bool = True) -> exp.Expression:
        """``node`` over the released columns; with ``add``, an aggregate or group term
        not selected becomes a column of its own (released, charged, not shown)."""

        def released(sub: exp.Expression) -> exp.Expression:
            checkpoint()
            # SUM(…) OVER (…): over the released rows, its arguments too; before the
            # released columns, which would take COUNT(*) of COUNT(*) OVER () for the
            # selected COUNT(*) (``_idp_1 OVER ()``: an internal error, redteam)
            if windowed(sub):
                return sub
            name = self._find(sub)
            if name is not None:
                return _column(name)
            if isinstance(sub, (exp.Subquery, exp.Select, exp.Exists)):
                raise NotSupported(f"subqueries in {clause} are not supported; compare "
                                   "aggregates with constants")
            grouped = not _computed(sub) and any(  # so the aggregate query has none
                _comparable(g.unnest()) == _comparable(sub) for g in self.groups)
            if add and (_aggregate(sub) or grouped):
                name = f"_idp_h{len(self.columns)}"
                self.columns.append((name, sub.copy()))
                return _column(name)
            alias = self.aliases.get(sub.name.lower()) if isinstance(sub, exp.Column) \
                and not sub.table and sub.name.lower() not in self.table.columns else None
            if alias is not None:  # an input column of that name wins, as in PostgreSQL
                return _column(alias)
            if not add and (_aggregate(sub) or isinstance(sub, exp.Column)):
                raise NotSupported(f"ORDER BY {sub.sql(dialect='postgres')} is not a result "
                                   "column; order by a result column's name, alias or "
                                   "position")
            if isinstance(sub, exp.Column):
                raise NotSupported(f"{clause} {sub.sql(dialect='postgres')} is neither an "
                                   "aggregate nor a GROUP BY key; filter rows with WHERE")
            return sub

        return node.copy().transform(released, copy=False)

    def ordered(self, ordered: exp.Ordered, names: list[str]) -> exp.Ordered:
        """An ORDER BY term of the outer query: a position or a result column's name as
        written (the outer query has the same result columns), else an expression over
        the released columns (nothing new is released to order by)."""
        target = ordered.this
        if (isinstance(target, exp.Literal) and not target.is_string) or (
                isinstance(target, exp.Column) and not target.table
                and target.name.lower() in {name.lower() for name in names}):
            return ordered.copy()
        copy = ordered.copy()
        copy.set("this", self.map(target, "ORDER BY", add=False))
        return copy


def _name(item: exp.Expression, plan: QueryPlan, position: int) -> str:
    """PostgreSQL's name of a result column: its alias; else the aggregate's or group
    term's own name, as the plan gives it; else that of the expression."""
    if isinstance(item, exp.Alias):
        return item.alias
    output = next((o for o in plan.outputs if o.name == f"_idp_{position}"), None)
    if output is not None and output.aggregate is not None:
        # SUM(CASE WHEN c THEN 1 ELSE 0 END) is answered as a COUNT (expressions'
        # _counts_rows) and keeps SUM's name: named count, a ROLLUP's grand total
        # (written with NULL AS the key) had no column of its groups' name and failed
        # after the debit (KeyError, XX000; the review of 2026-11-30)
        return "sum" if isinstance(item, exp.Sum) else plan.aggregates[output.aggregate].label
    return default_name(item)
