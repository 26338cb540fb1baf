"""95 % error bounds of post-processed columns (docs/privacy.md §4.2): an outer query's
select item that computes on released values gets a bound by interval arithmetic over
their released intervals [v − B, v + B], where a rule is sound at 95 %; anywhere else,
none.

The rules (each an extension of the expression to intervals, written as SQL that runs
beside the outer query in its engine):

- a released value: [v − B, v + B], its own bound (a key, a literal: exact);
- a *linear form* — sums, differences, multiples by exact values, ``SUM``/``AVG (…) OVER``,
  ``LAG``/``LEAD``/``FIRST_VALUE`` of one value, ``SUM``/``AVG``/``MAX``/``MIN`` of one
  row per key — gets Σ|cᵢ|·Bᵢ. One term needs nothing but its own bound. Two or more
  need independent noise that is symmetric and log-concave (discrete Laplace, discrete
  Gaussian, on a grid or not, as ``ADDITIVE`` names; clamped into a range holding the
  truth): then P(|Σ cᵢeᵢ| > Σ|cᵢ|Bᵢ) ≤ 5 % (Gaussian: exactly, as √Σσᵢ² ≤ Σσᵢ;
  Laplace: Proschan's peakedness theorem; checked numerically for the discrete laws
  with the bounds the mechanisms compute, tests/test_postprocessing_bounds.py). Any
  other released value (an AVG, a VARIANCE, a drawn clipping bound …) enters a linear
  form only alone;
- a function of one linear form — SQRT, ROUND, TRUNC, FLOOR, CEIL, SIGN, ABS, CAST, a
  GREATEST/LEAST with exact values, a multiple — maps its interval (monotone ends, or
  ABS's), so it holds whenever the form's does: with 95 %;
- CASE, COALESCE and NULLIF pick per row among intervals by exact conditions.

A step over releases (``WITH s AS (…)``, Lightdash's table calculations) is read through:
its columns' intervals are computed in it, their ends columns of its own.

What falls outside gets no bound: a product or ratio of two noisy values (their 95 %
intervals hold together only with 90 %: a union bound), a window or aggregate over rows
that a noisy value filters, groups or orders (LAG over rows ordered by a count) or that
noise chose (a partition selection, a LIMIT), RANK or NTILE of noisy values. All of it
reads released values and their released bounds only: post-processing, no ε, nothing
about the data beyond them.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from sqlglot import exp

from proxy.analyze.outer import windowed
from proxy.privacy.noisy_answers import PUBLIC_COUNT

# the noise of these mechanisms is added, independent, symmetric and log-concave (or
# none: an exact release, a table's public row count)
ADDITIVE = frozenset({
    "discrete Laplace", "Laplace (sampled on the column's grid)", "discrete Gaussian",
    "discrete Gaussian (sampled on the column's grid)", "exact (sensitivity 0; exact_release)",
    PUBLIC_COUNT,
})
_NUMERIC = {exp.DataType.Type.DOUBLE, exp.DataType.Type.FLOAT, exp.DataType.Type.DECIMAL,
            *exp.DataType.INTEGER_TYPES}
# what the ends may cost: they are rendered and run beside the statement (DuckDB binds
# thousands of extra columns slowly: 1,600 computed items took 56 s, against 3 s alone)
MAX_NODES = 4_000  # of one select item's two ends
TOTAL_NODES = 20_000  # of a statement's
MAX_ITEMS = 64  # select items with a derived bound in one statement
_MONOTONE = (exp.Round, exp.Floor, exp.Ceil, exp.Sign, exp.Trunc)
_ONE_VALUE = (exp.Lag, exp.Lead, exp.FirstValue, exp.LastValue, exp.NthValue)
_PLACES = (exp.RowNumber, exp.Rank, exp.DenseRank, exp.PercentRank, exp.CumeDist, exp.Ntile)


@dataclass(frozen=True)
class Interval:
    """An expression's enclosure [lo, hi] as SQL; ``terms`` released values in it (2:
    two or more), ``additive`` whether each has ADDITIVE noise, ``linear`` whether it
    is a linear form of them (else a function of one)."""

    lo: exp.Expression
    hi: exp.Expression
    terms: int = 0
    additive: bool = True
    linear: bool = True

    @property
    def exact(self) -> bool:
        return self.terms == 0

    @property
    def sound(self) -> bool:
        return self.terms <= 1 or self.additive


@dataclass(frozen=True)
class ReleasedTable:
    """A released table (or a step over released tables) as a query reads it: its
    alias, its columns, for each noisy column of a release the column holding its
    bounds and whether its noise is additive, for each computed column of a step the
    columns holding its interval's ends (and the interval's kind), which of a step's
    columns are noisy without a bound, and whether its rows are those of the public
    keys (not chosen by noise: a partition selection, a LIMIT over noisy values, a
    step's filter on one)."""

    alias: str
    columns: tuple[str, ...]
    bounds: dict[str, str]  # noisy column -> the column of its bounds
    additive: frozenset[str]
    rows_public: bool = True
    ends: dict[str, tuple[str, str, Interval]] = field(default_factory=dict)
    unbounded: frozenset[str] = frozenset()

    def noisy(self, name: str) -> bool:
        return name in self.bounds or name in self.ends or name in self.unbounded


@dataclass
class Budget:
    """What the ends of one statement may still cost (``MAX_ITEMS``, ``TOTAL_NODES``)."""

    items: int = 0
    nodes: int = 0


class Bounds:
    """The intervals of one outer query's select items (``interval``)."""

    def __init__(self, tree: exp.Select, releases: list[ReleasedTable],
                 budget: Budget | None = None):
        self.releases = releases
        self.budget = budget or Budget()
        self.tree = tree
        self.grouped = bool(tree.args.get("group"))
        # rows chosen, kept, joined or grouped by a noisy value: what reads across rows
        # (a window, an aggregate) may not read the truth's rows
        self.rows_noisy = not all(r.rows_public for r in releases) or any(
            not self._exact_refs(tree.args.get(clause))
            for clause in ("where", "having", "qualify")) or any(
            not self._exact_refs(join.args.get("on")) for join in tree.args.get("joins") or []
        ) or any(not self._exact_refs(_grouped_by(tree, term))
                 for term in (tree.args["group"].expressions if self.grouped else []))
        self.named_windows = bool(tree.args.get("windows"))
        self._inside = 0  # aggregates the node being read is inside of

    def interval(self, node: exp.Expression, exact: bool = False) -> Interval | None:
        """``node``'s interval (with ``exact``, also an exact one: a key), or None where
        no sound rule applies (or the statement's ``MAX_ITEMS`` or ``TOTAL_NODES`` are
        spent)."""
        budget = self.budget
        if budget.items >= MAX_ITEMS or budget.nodes > TOTAL_NODES:
            return None
        found = self._interval(node)
        if found is None or not found.sound or (found.exact and not exact):
            return None
        if found.exact:
            return found
        budget.nodes += _size(found)
        budget.items += 1
        return found if budget.nodes <= TOTAL_NODES else None

    # -- columns ---------------------------------------------------------------------

    def _owner(self, column: exp.Column) -> ReleasedTable | None:
        owners = [r for r in self.releases if column.table == r.alias
                  or (not column.table and column.name in r.columns)]
        return owners[0] if len(owners) == 1 and column.name in owners[0].columns else None

    def _exact_refs(self, node: exp.Expression | None) -> bool:
        """Whether ``node`` reads keys only (no noisy column, none it cannot place)."""
        if node is None:
            return True
        for column in node.find_all(exp.Column):
            owner = self._owner(column)
            if owner is None or owner.noisy(column.name):
                return False
        return True

    # -- the rules -------------------------------------------------------------------

    def _interval(self, node: exp.Expression) -> Interval | None:
        """The rule's interval, none where its ends grow past ``MAX_NODES`` (each
        product's ends hold both of its factor's: nested ones double them)."""
        found = self._rule(node)
        return None if found is not None and not found.exact and _size(found) > MAX_NODES \
            else found

    def _rule(self, node: exp.Expression) -> Interval | None:
        if isinstance(node, (exp.Paren, exp.Alias)):
            return self._interval(node.this)
        if isinstance(node, exp.Window):
            return self._window(node)
        if isinstance(node, exp.AggFunc):
            return self._aggregate(node)
        if self._exact_refs(node) and not node.find(exp.Window, exp.AggFunc):
            return Interval(node.copy(), node.copy())
        if isinstance(node, exp.Column):
            owner = self._owner(node)
            if owner is None or self.grouped and not self._inside:  # a noisy GROUP BY key
                return None
            if node.name in owner.ends:  # a step's computed column: its ends, beside it
                lo, hi, kind = owner.ends[node.name]
                return replace(kind, lo=exp.column(lo, table=owner.alias, quoted=True),
                               hi=exp.column(hi, table=owner.alias, quoted=True))
            if node.name not in owner.bounds:
                return None
            bound = exp.column(owner.bounds[node.name], table=owner.alias, quoted=True)
            return Interval(exp.Sub(this=node.copy(), expression=bound),
                            exp.Add(this=node.copy(), expression=bound.copy()),
                            1, node.name in owner.additive)
        if isinstance(node, exp.Neg):
            a = self._interval(node.this)
            return a and replace(a, lo=exp.Neg(this=_p(a.hi)), hi=exp.Neg(this=_p(a.lo)))
        if isinstance(node, (exp.Add, exp.Sub)):
            return self._sum(node)
        if isinstance(node, (exp.Mul, exp.Div)):
            return self._scaled(node)
        if isinstance(node, exp.Cast):
            return self._cast(node)
        if isinstance(node, (*_MONOTONE, exp.Sqrt, exp.Cbrt)):
            return self._monotone(node)
        if isinstance(node, exp.Abs):
            a = self._of_one(node.this)
            if a is None:
                return None
            lo = exp.Case(ifs=[exp.If(this=exp.GTE(this=_p(a.lo), expression=_zero()),
                                      true=a.lo.copy()),
                               exp.If(this=exp.LTE(this=_p(a.hi), expression=_zero()),
                                      true=exp.Neg(this=_p(a.hi)))], default=_zero())
            hi = exp.Greatest(this=exp.Abs(this=a.lo.copy()),
                              expressions=[exp.Abs(this=a.hi.copy())])
            return replace(a, lo=lo, hi=hi, linear=False)
        if isinstance(node, (exp.Greatest, exp.Least)):
            return self._extreme(node)
        if isinstance(node, (exp.Coalesce, exp.Case, exp.Nullif)):
            return self._picked(node)
        return None

    def _sum(self, node: exp.Add | exp.Sub) -> Interval | None:
        a, b = self._interval(node.this), self._interval(node.expression)
        if a is None or b is None:
            return None
        if not (a.linear and b.linear) and not (a.exact or b.exact):
            return None  # two functions of noisy values: no linear form
        if isinstance(node, exp.Add):
            lo, hi = exp.Add(this=_p(a.lo), expression=_p(b.lo)), \
                exp.Add(this=_p(a.hi), expression=_p(b.hi))
        else:
            lo, hi = exp.Sub(this=_p(a.lo), expression=_p(b.hi)), \
                exp.Sub(this=_p(a.hi), expression=_p(b.lo))
        return Interval(lo, hi, min(2, a.terms + b.terms), a.additive and b.additive,
                        a.linear and b.linear)

    def _scaled(self, node: exp.Mul | exp.Div) -> Interval | None:
        """A multiple (or a quotient by an exact value): the ends' products, ordered."""
        a, b = self._interval(node.this), self._interval(node.expression)
        if a is None or b is None:
            return None
        if isinstance(node, exp.Div) or not a.exact:
            if not b.exact:
                return None  # a product or ratio of noisy values
            noisy, factor = a, b.lo
        else:
            noisy, factor = b, a.lo
        kind = type(node)
        ends = [kind(this=_p(end), expression=_p(factor.copy())) if noisy is a
                else kind(this=_p(factor.copy()), expression=_p(end))
                for end in (noisy.lo, noisy.hi)]
        sign = _sign(factor)
        if sign is None:  # the factor's sign known only when the query runs
            lo = exp.Least(this=ends[0], expressions=[ends[1].copy()])
            hi = exp.Greatest(this=ends[0].copy(), expressions=[ends[1]])
        else:
            lo, hi = ends if sign >= 0 else ends[::-1]
        if isinstance(node, exp.Div) and node.args.get("typed") and not noisy.exact and all(
                side.type is not None and side.type.this in exp.DataType.INTEGER_TYPES
                for side in (node.this, node.expression)):
            # PostgreSQL's integer division truncates: between the real quotient's
            # FLOOR and CEIL
            return replace(noisy, lo=exp.Floor(this=lo), hi=exp.Ceil(this=hi), linear=False)
        return replace(noisy, lo=lo, hi=hi)

    def _of_one(self, node: exp.Expression) -> Interval | None:
        """The interval of the argument of a function of one linear form."""
        a = self._interval(node)
        return a if a is not None and a.sound and not a.exact else None

    def _monotone(self, node: exp.Expression) -> Interval | None:
        """A nondecreasing function of one argument (the others exact) maps its ends;
        SQRT of an end below 0 (the truth is not: its SQRT exists) is SQRT(0)."""
        a = self._of_one(node.this)
        rest = [value for key, value in node.args.items() if key != "this" and value is not None]
        if a is None or not all(isinstance(v, exp.Expression) and self._exact_refs(v)
                                and not v.find(exp.Window, exp.AggFunc) for v in rest):
            return None
        ends = []
        for end in (a.lo, a.hi):
            if isinstance(node, exp.Sqrt):
                end = exp.Greatest(this=_p(end), expressions=[_zero()])
            copied = node.copy()
            copied.set("this", _p(end))
            ends.append(copied)
        return replace(a, lo=ends[0], hi=ends[1], linear=False)

    def _cast(self, node: exp.Cast) -> Interval | None:
        """A cast to a number: to an integer (or a NUMERIC of s decimals) its ends'
        FLOOR and CEIL (at the s-th decimal: the cast rounds the truth too, and a double
        end cannot overflow the type), else unchanged."""
        to = node.args["to"]
        if to.this not in _NUMERIC:
            return None
        a = self._interval(node.this)
        if a is None or a.exact:
            return a
        params = to.expressions if to.this == exp.DataType.Type.DECIMAL else []
        if to.this not in exp.DataType.INTEGER_TYPES and not params:
            return a
        if not a.sound:
            return None
        scale = params[1].this if len(params) > 1 else exp.Literal.number(0)
        if not (isinstance(scale, exp.Literal) and scale.name.isdigit()):
            return None
        unit = exp.Pow(this=exp.Literal.number(10), expression=scale.copy())
        ends = [exp.Div(this=rounded(this=exp.Mul(this=_p(end), expression=unit.copy())),
                        expression=unit.copy())
                for rounded, end in ((exp.Floor, a.lo), (exp.Ceil, a.hi))]
        return replace(a, lo=ends[0], hi=ends[1], linear=False)

    def _extreme(self, node: exp.Greatest | exp.Least) -> Interval | None:
        """GREATEST/LEAST of one noisy value and exact ones: monotone in it."""
        parts = [self._interval(arg) for arg in (node.this, *node.expressions)]
        noisy = [p for p in parts if p is not None and not p.exact]
        if None in parts or len(noisy) != 1 or not noisy[0].sound:
            return None
        ends = [type(node)(this=_p(getattr(parts[0], end)),
                           expressions=[_p(getattr(p, end)) for p in parts[1:]])
                for end in ("lo", "hi")]
        return replace(noisy[0], lo=ends[0], hi=ends[1], linear=False)

    def _picked(self, node: exp.Expression) -> Interval | None:
        """CASE with exact conditions, COALESCE, NULLIF: per row the interval of the
        branch taken (NULLIF's NULL has no number to bound)."""
        if isinstance(node, exp.Nullif):
            return self._interval(node.this)
        if isinstance(node, exp.Coalesce):
            branches = [(exp.Not(this=exp.Is(this=_p(arg.copy()), expression=exp.Null())), arg)
                        for arg in (node.this, *node.expressions)]
            default = None
        else:
            if node.this is not None or not all(self._exact_refs(case.this)
                                                 for case in node.args["ifs"]):
                return None
            branches = [(case.this, case.args["true"]) for case in node.args["ifs"]]
            default = node.args.get("default")
        parts = [self._interval(value) for _, value in branches] + (
            [self._interval(default)] if default is not None else [])
        if None in parts:
            return None
        ends = [exp.Case(ifs=[exp.If(this=condition.copy(), true=getattr(part, end))
                              for (condition, _), part in zip(branches, parts)],
                         default=getattr(parts[-1], end) if default is not None else None)
                for end in ("lo", "hi")]
        return Interval(ends[0], ends[1], max(p.terms for p in parts),
                        all(p.additive for p in parts), all(p.linear for p in parts))

    # -- across rows -----------------------------------------------------------------

    def _window(self, node: exp.Window) -> Interval | None:
        """A window whose rows and order are the keys' (PARTITION BY, ORDER BY exact,
        no noisy filter): places (ROW_NUMBER …) exact; LAG, LEAD, FIRST_VALUE … of one
        value keep its interval; SUM and AVG of the frame add the bounds."""
        function = node.this
        spec = [node.args.get("partition_by") or [], node.args.get("order")]
        if self.rows_noisy or self.named_windows or node.args.get("alias") or not all(
                self._exact_refs(part) for part in [*spec[0], spec[1]]):
            return None
        if isinstance(function, (exp.Count, *_PLACES)) and self._exact_refs(function):
            return Interval(node.copy(), node.copy())
        if isinstance(function, _ONE_VALUE):
            a = self._interval(function.this)
            rest = [v for k, v in function.args.items() if k != "this" and v is not None]
            if a is None or not all(self._exact_refs(v) for v in rest
                                    if isinstance(v, exp.Expression)):
                return None
            return replace(a, lo=_windowed(node, function, a.lo),
                           hi=_windowed(node, function, a.hi))
        if isinstance(function, (exp.Sum, exp.Avg)):
            a = self._interval(function.this)
            if a is None or not a.linear:
                return None
            return replace(a, lo=_windowed(node, function, a.lo),
                           hi=_windowed(node, function, a.hi), terms=max(a.terms, 2 * a.terms))
        return None

    def _aggregate(self, node: exp.AggFunc) -> Interval | None:
        """MAX, MIN, SUM, AVG of the rows of a group of the query over joined or
        cross-joined releases (MetricFlow's ``MAX(subq.x)`` per key): of one row, its
        value's interval; SUM and AVG of several, the linear form's."""
        if windowed(node) or self.rows_noisy or not isinstance(
                node, (exp.Max, exp.Min, exp.Sum, exp.Avg, exp.Count)):
            return None
        if isinstance(node, exp.Count):
            return Interval(node.copy(), node.copy()) if self._exact_refs(node) else None
        self._inside += 1
        try:
            a = self._interval(node.this)
        finally:
            self._inside -= 1
        if a is None or a.exact:
            return a and Interval(node.copy(), node.copy())
        one_row = exp.LTE(this=exp.Count(this=node.this.copy()), expression=exp.Literal.number(1))
        ends = []
        for end in (a.lo, a.hi):
            aggregate = type(node)(this=end)
            many = aggregate.copy() if isinstance(node, (exp.Sum, exp.Avg)) and a.linear \
                and a.additive else exp.Null()
            ends.append(exp.Case(ifs=[exp.If(this=one_row.copy(), true=aggregate)], default=many))
        several = isinstance(node, (exp.Sum, exp.Avg)) and a.linear and a.additive
        return replace(a, lo=ends[0], hi=ends[1], terms=max(a.terms, 2) if several else a.terms)


def _grouped_by(tree: exp.Select, term: exp.Expression) -> exp.Expression:
    """A GROUP BY term, its select item where it is a position (``GROUP BY 1``)."""
    if isinstance(term, exp.Literal) and not term.is_string and term.name.isdigit() \
            and 1 <= int(term.name) <= len(tree.expressions):
        return tree.expressions[int(term.name) - 1].unalias()
    return term


def _sign(node: exp.Expression) -> int | None:
    """The sign of a constant number (in brackets, a cast, negated), else None."""
    sign = 1
    while isinstance(node, (exp.Paren, exp.Cast, exp.Neg)):
        sign = -sign if isinstance(node, exp.Neg) else sign
        node = node.this
    if isinstance(node, exp.Literal) and not node.is_string:
        return sign if float(node.name) >= 0 else -sign
    return None


def _size(interval: Interval) -> int:
    return sum(1 for _ in interval.lo.walk()) + sum(1 for _ in interval.hi.walk())


def _windowed(window: exp.Window, function: exp.Expression, argument: exp.Expression
              ) -> exp.Window:
    """``window`` with its function's argument replaced by ``argument``."""
    copied = window.copy()
    inner = function.copy()
    inner.set("this", argument)
    copied.set("this", inner)
    return copied


def _p(node: exp.Expression) -> exp.Expression:
    return node if isinstance(node, (exp.Column, exp.Literal, exp.Paren, exp.Func)) \
        else exp.Paren(this=node)


def _zero() -> exp.Literal:
    return exp.Literal.number(0)
