"""The ground floor every stage shares: the plain, immutable values that describe one
private query (``QueryPlan`` and its parts), the aggregate kinds and the analyst's prior.

Everything downstream of analysis (pushdown, privacy, ledger) reads only these values,
never the analyst's SQL text, so what is computed is exactly what was checked. This
module imports no other stage (only the owner's rules and shared constants), so every
stage may import it.
"""

from __future__ import annotations

import datetime as dt
import functools
import json
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from decimal import Decimal
from enum import StrEnum
from fractions import Fraction
from typing import Any

from sqlglot import exp

from proxy.accounting import GAUSSIAN, LAPLACE, exponential_rho
from proxy.loss import Loss
from proxy.rules import Column, Table
from proxy.statistics import MAGNITUDE_CAP
from proxy.zones import from_wall, zone_named


class Kind(StrEnum):
    """What an aggregate computes. The values are the names the ledger, notes and cache
    keys have always used."""

    COUNT = "count"
    PERCENTILE = "percentile"
    MAX = "max"
    MIN = "min"
    SUM = "sum"
    AVG = "avg"
    VALUE = "value"  # one unit's value of a column: an individual query (seed 001)
    UNITS = "units"  # COUNT(DISTINCT privacy unit): how many units are in scope
    DISTINCT = "distinct"  # COUNT(DISTINCT col) of another column: its values in scope
    VAR_SAMP = "var_samp"
    VAR_POP = "var_pop"
    STDDEV_SAMP = "stddev_samp"
    STDDEV_POP = "stddev_pop"
    CORR = "corr"  # of two columns (Aggregate.other): proxy.privacy.correlation
    COVAR_POP = "covar_pop"
    COVAR_SAMP = "covar_samp"
    REGR_SLOPE = "regr_slope"
    REGR_INTERCEPT = "regr_intercept"
    REGR_R2 = "regr_r2"

    def __repr__(self) -> str:  # as the plain name: cache keys hash a plan's repr
        return repr(self.value)

    @property
    def row(self) -> KindRow:
        return KINDS[self]


# the kinds by their short names
COUNT, PERCENTILE, MAX, MIN, SUM, AVG = (Kind.COUNT, Kind.PERCENTILE, Kind.MAX, Kind.MIN,
                                         Kind.SUM, Kind.AVG)
VALUE, UNITS, DISTINCT = Kind.VALUE, Kind.UNITS, Kind.DISTINCT
VAR_SAMP, VAR_POP, STDDEV_SAMP, STDDEV_POP = (Kind.VAR_SAMP, Kind.VAR_POP, Kind.STDDEV_SAMP,
                                              Kind.STDDEV_POP)
SPREADS = (VAR_SAMP, VAR_POP, STDDEV_SAMP, STDDEV_POP)  # proxy.privacy.variance
CORR, COVAR_POP, COVAR_SAMP = Kind.CORR, Kind.COVAR_POP, Kind.COVAR_SAMP
REGR_SLOPE, REGR_INTERCEPT, REGR_R2 = Kind.REGR_SLOPE, Kind.REGR_INTERCEPT, Kind.REGR_R2


@dataclass(frozen=True)
class KindRow:
    """What the stages need to know of one aggregate kind: one row per kind in
    ``KINDS``, read by analysis (which columns it takes, which mechanisms may draw it),
    by privacy and by the session (its answers' type)."""

    output: str  # its answers' rule type: "int", "float" or "column" (the column's own)
    numeric: bool = False  # of a numeric column only, whose domain scales its noise
    ranked: bool = False  # an order statistic: drawn by the exponential mechanism, or
    # with the smooth sensitivity and a private bound (docs/privacy.md §5)
    refinable: bool = False  # answered by knowledge refinement of a prior (seed 001)
    paired: bool = False  # of two numeric columns, over the rows where neither is NULL


_SPREAD = KindRow("float", numeric=True)
_PAIRED = KindRow("float", numeric=True, paired=True)
KINDS = {
    Kind.COUNT: KindRow("int", refinable=True),
    Kind.UNITS: KindRow("int"),
    Kind.DISTINCT: KindRow("int"),
    Kind.SUM: KindRow("column", numeric=True, refinable=True),
    Kind.AVG: KindRow("float", numeric=True, refinable=True),
    Kind.PERCENTILE: KindRow("column", numeric=True, ranked=True, refinable=True),
    Kind.MAX: KindRow("column", numeric=True, ranked=True, refinable=True),
    Kind.MIN: KindRow("column", numeric=True, ranked=True, refinable=True),
    Kind.VALUE: KindRow("column", refinable=True),
    Kind.VAR_SAMP: _SPREAD, Kind.VAR_POP: _SPREAD,
    Kind.STDDEV_SAMP: _SPREAD, Kind.STDDEV_POP: _SPREAD,
    Kind.CORR: _PAIRED, Kind.COVAR_POP: _PAIRED, Kind.COVAR_SAMP: _PAIRED,
    Kind.REGR_SLOPE: _PAIRED, Kind.REGR_INTERCEPT: _PAIRED, Kind.REGR_R2: _PAIRED,
}


@dataclass(frozen=True)
class Aggregate:
    """One aggregate of the SELECT list.

    ``column`` is None for COUNT(*); ``fraction`` is the percentile p as an exact
    fraction (MEDIAN: 1/2); ``continuous`` marks PERCENTILE_CONT, answered as the
    discrete percentile (said in the notice). A paired kind (CORR(y, x), REGR_SLOPE(y,
    x), ...) reads ``column`` as its first argument y and ``other`` as its second x.
    """

    kind: Kind
    column: str | None
    label: str
    fraction: Fraction | None = None
    continuous: bool = False
    other: str | None = None
    # (the call, the value it aggregates) as the analyst wrote them, where a rewrite made
    # this aggregate (REGR_AVGX(y, x) an AVG of x narrowed: aggregate_forms.WRITTEN): what
    # refusals name; no part of the plan's identity
    written: tuple[str, str] | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:  # a kind given by its name is the Kind of that name
        object.__setattr__(self, "kind", Kind(self.kind))


@dataclass(frozen=True)
class OutputColumn:
    """A result column: a GROUP BY key (``group`` index) or an aggregate (``aggregate``)."""

    name: str
    group: int | None = None
    aggregate: int | None = None


# How real answers' noise is scaled (Mechanism.scale)
GLOBAL = "global"  # the declared domain's global sensitivity (and s for counts)
LOCAL = "local"  # raw iDP: the data's own local sensitivity (the owner's opt-in)
SMOOTH = "smooth"  # DP: the smooth sensitivity of percentiles, MAX and MIN
EXPONENTIAL = "exponential"  # percentiles, MAX and MIN by the exponential mechanism
PIECEWISE = "piecewise"  # ... in its piecewise form (interpolated rank distance)
# the aggregates Mechanism.noise = GAUSSIAN draws with the discrete Gaussian
GAUSSIAN_KINDS = (Kind.COUNT, Kind.UNITS, Kind.DISTINCT, Kind.SUM, Kind.AVG)
_SENSITIVITY = {
    SMOOTH: "smooth (beta = epsilon/gamma) for percentiles, MAX and MIN; global otherwise",
    LOCAL: "local, rounded up to a power of two",
}


@dataclass(frozen=True)
class Mechanism:
    """How the answers of one plan are drawn, chosen at analysis from the session's
    settings and the rules: whose neighbours (``model``), how the noise is scaled and
    percentiles, MAX and MIN are drawn (``scale``), or the prior that knowledge
    refinement refines. It names itself for the ledger and the answer's metadata."""

    model: str = "idp"  # "idp" | "dp" | "refinement" (a prior is set: seed 001)
    scale: str = GLOBAL
    gamma: float | None = None  # of the smooth sensitivity (``scale`` SMOOTH)
    prior: PriorSpec | None = None
    individual: bool = False  # one unit's value (WHERE unit = k), not a statistic
    noise: str = LAPLACE  # or GAUSSIAN: COUNT, SUM and AVG under DP with zcdp (QueryPlan.gaussian)

    @property
    def exponential(self) -> bool:
        """Percentiles, MAX and MIN drawn by the exponential mechanism (either form)."""
        return self.scale in (EXPONENTIAL, PIECEWISE)

    @property
    def local(self) -> bool:
        return self.scale == LOCAL

    @property
    def label(self) -> str:
        """The model and the form of its draws, as the ledger records them."""
        if self.scale == SMOOTH:
            return f"{self.model} smooth gamma={self.gamma:g}"
        if self.exponential:  # named as the setting that chose it
            return f"{self.model} {'piecewise' if self.scale == PIECEWISE else 'instance'}" \
                + self._noise
        return self.model + self._noise

    @property
    def _noise(self) -> str:
        return " gaussian" if self.noise == GAUSSIAN else ""

    @property
    def sensitivity(self) -> str:
        """What the noise is calibrated to, as the answer's metadata says."""
        if self.exponential:
            interpolated = "interpolated " if self.scale == PIECEWISE else ""
            form = "piecewise" if self.scale == PIECEWISE else "instance"
            scaled = "" if self.scale == PIECEWISE else (
                "; MAX and MIN of a number column on log-spaced candidates: the scaled rank "
                "distance")
            return (f"{form} (exponential mechanism, utility minus the {interpolated}rank "
                    f"distance{scaled}) for percentiles, MAX and MIN; global otherwise")
        if self.model == "refinement":
            return "none (knowledge refinement does not depend on it)"
        return _SENSITIVITY.get(self.scale, "global")


@functools.lru_cache(maxsize=256)
def _aggregate_loss(epsilon: Decimal) -> Loss:
    return Loss.of(epsilon)


@dataclass(frozen=True)
class QueryPlan:
    """A private aggregate query over one protected table."""

    table: Table
    where: exp.Expression | None
    group_by: tuple[GroupKey, ...]  # terms with public key sets (proxy.analyze.group_keys)
    aggregates: tuple[Aggregate, ...]
    outputs: tuple[OutputColumn, ...]
    order_by: tuple[tuple[int, bool, bool], ...]  # (output index, descending, NULLs first)
    limit: int | None
    epsilon: Decimal  # per aggregate
    mechanism: Mechanism = Mechanism()
    post: Any = None  # an outer query over the released rows (proxy.analyze.outer), or None
    # public tables joined many-to-one, a second protected table on the privacy unit
    # (proxy.analyze.joins); of a plan over units, the joins of its per-unit query
    joins: tuple[Join, ...] = ()
    # an aggregate over per-unit aggregates (proxy.analyze.per_unit): ``table`` is then
    # the relation of one row per unit that ``per_unit`` describes
    per_unit: PerUnit | None = None
    # δ of an (ε, δ) query: its GROUP BY terms without declared keys are keyed by a
    # partition selection (proxy.privacy.partition_selection), which spends half of
    # ``cost``; None: an ε-query
    delta: Decimal | None = None
    # EXISTS over protected tables of the unit, each a boolean column of the scope
    semi_joins: tuple[SemiJoin, ...] = ()
    # GROUP BY terms over columns of public tables inner-joined to one another, keyed
    # together: (their indices in group_by, the combinations of their keys the public
    # tables' joined rows hold) (proxy.engine.Engine._with_public_keys)
    joint: tuple[tuple[tuple[int, ...], tuple[tuple[Any, ...], ...]], ...] = ()
    # the session's TimeZone its times were read in (proxy.zones): two sessions' same
    # text may ask different buckets and ranges, so it is part of the answer cache's key
    time_zone: str = "UTC"
    # the WHERE keeps a time column with a declared domain to at most half of it (text and
    # rules alone, ``group_keys.narrow_window``): a COUNT's units then own few rows in
    # scope, and a grouped COUNT is clipped across groups (docs/privacy.md §3.3)
    window: bool = False

    @property
    def aggregate_loss(self) -> Loss:
        """What each protected aggregate spends: ``epsilon`` (read per group: one Loss)."""
        return _aggregate_loss(self.epsilon)

    def drawn_by_exponential(self, aggregate: Aggregate) -> bool:
        """Whether the aggregate is one draw of the exponential mechanism per group (a
        percentile, MAX or MIN under 'instance' or 'piecewise', not refined from a
        prior): ε-bounded-range, so ε²/8-zCDP (proxy/accounting.py)."""
        return (aggregate.kind.row.ranked and self.mechanism.exponential
                and self.mechanism.model in ("idp", "dp") and not self.mechanism.individual)

    def gaussian(self, aggregate: Aggregate) -> bool:
        """Whether the aggregate's noise is the discrete Gaussian: COUNT, COUNT(DISTINCT
        unit), SUM and AVG of a plan whose mechanism chose it (DP under zcdp only:
        analysis). Its ρ is that of its ε share, ε²/2, and sets σ = Δ/ε."""
        return (self.mechanism.noise == GAUSSIAN and aggregate.kind in GAUSSIAN_KINDS
                and not self.public(aggregate))

    @property
    def loss(self) -> Loss:
        """What the query costs: sequential composition over the aggregates of one
        SELECT (SPEC §3.2), a public aggregate costing nothing, and the δ of its
        partition selection. Its ρ: each aggregate's, ε²/2 (ε-DP), or ε²/8 for a draw of
        the exponential mechanism; under GROUP BY a unit touches m groups at ε/m each,
        whose m·(ε/m)²/8 is below ε²/8, so the aggregate's ε is charged whole."""
        loss = Loss.of(0, self.delta or 0)
        for aggregate in self.aggregates:
            if not self.public(aggregate):
                epsilon = self.aggregate_loss.epsilon
                loss += Loss.of(epsilon, 0, exponential_rho(epsilon)
                                if self.drawn_by_exponential(aggregate) else None)
        return loss

    def public(self, aggregate: Aggregate) -> bool:
        """COUNT(*) of the whole table: every neighbour (modify one record, or all of
        one unit's) has the same number of rows, so it is not protected (SPEC §5.1). An
        inner join with a public table keeps only the rows that match: not public; nor
        is the row count of two protected tables joined (a unit's rows removed from one
        of them changes it, docs/privacy.md §3.10), nor the number of units a per-unit
        query answers for (§3.11: charged like COUNT(DISTINCT unit), §3.7), nor that of a
        LEFT join on a key with several rows per value (a row becomes 1 to m rows, by
        its own values, §3.9)."""
        return (aggregate.kind == COUNT and aggregate.column is None and self.where is None
                and self.per_unit is None
                and all(join.left and not join.protected and join.multiplicity == 1
                        for join in self.joins)
                and not self.group_by and self.mechanism.prior is None
                and not self.mechanism.individual)

    @property
    def multiplicity(self) -> int:
        """The most joined rows one row of the protected table(s) becomes: the product of
        the public joins' declared ``max_rows_per_key`` (1 for unique keys and without
        joins), which multiplies the shift (docs/privacy.md §3.9). 1 for a plan over
        units: a unit is one record of that relation however many rows it joined."""
        return 1 if self.per_unit is not None else multiplicity(self.joins)

    @property
    def contribution_bound(self) -> int | None:
        """Under DP, the most rows in scope one unit keeps (the clip of §1): the
        table's ``max_rows_per_unit`` (of two protected tables, the product of theirs)
        times ``multiplicity``; None without a declared bound."""
        bound = self.table.max_rows_per_unit
        return None if bound is None else bound * self.multiplicity

    def group_keys(self) -> list[tuple[Any, ...]]:
        """All declared key combinations: every group is answered, empty or not (terms
        keyed ``joint``ly: in the combinations their public rows hold)."""
        blocks = self._key_blocks()
        combos: list[tuple[Any, ...]] = [()]
        for _, keys in blocks:
            combos = [c + k for c in combos for k in keys]
        place = {index: at for at, index in enumerate(i for indices, _ in blocks
                                                      for i in indices)}
        if all(place[index] == index for index in place):
            return combos
        return [tuple(combo[place[index]] for index in range(len(place))) for combo in combos]

    def _key_blocks(self) -> list[tuple[tuple[int, ...], tuple[tuple[Any, ...], ...]]]:
        """The key sets whose product is the groups: the joint ones, then each other
        term's keys, with the term indices they give keys for."""
        return [*self.joint] + [((index,), tuple((key,) for key in term.keys))
                                for index, term in self._apart()]

    def _apart(self) -> list[tuple[int, Any]]:
        """(index, term) of each GROUP BY term not keyed jointly with others."""
        together = {index for indices, _ in self.joint for index in indices}
        return [(index, term) for index, term in enumerate(self.group_by)
                if index not in together]

    @property
    def groups_fixed(self) -> bool:
        """Every GROUP BY term of the one table reads only its unit attributes (rules
        ``unit_attribute``): a neighbour keeps every unit's rows in their group, so one
        unit's change touches one group and the groups compose in parallel
        (docs/privacy.md §3.5)."""
        if not self.group_by or self.joins or self.per_unit is not None:
            return False
        columns = self.table.columns
        for term in self.group_by:
            read = {term.column} | {column.name for condition, _ in term.branches
                                    for column in condition.find_all(exp.Column)}
            read |= {term.by} if term.by else set()
            if not all(name in columns and getattr(columns[name], "unit_attribute", False)
                       for name in read):
                return False
        return True

    @property
    def group_count(self) -> int:
        """How many groups are answered: ``len(group_keys())`` (1 without GROUP BY),
        from the key sets' sizes (``_key_blocks``'), without listing the combinations
        or the keys: it is asked per group and aggregate, and building each term's keys
        again made answering 10,000 groups (TPC-H Q21's suppliers) quadratic, 40 s."""
        return math.prod([len(keys) for _, keys in self.joint]
                         + [len(term.keys) for _, term in self._apart()])


@dataclass(frozen=True)
class PerUnit:
    """The relation an aggregate over per-unit aggregates reads (docs/privacy.md §3.11):
    the rows of ``source`` (its protected table, joins and WHERE; its aggregates are
    the per-unit ones) grouped by the privacy unit, one row per unit: the unit as the
    column ``unit`` and each of ``source.aggregates`` as the column of the same index
    in ``names`` (``proxy.pushdown.scope.per_unit_rows``); the plan's table declares
    those columns, each count with the domain [0, max_rows_per_unit] it is clamped to
    where it is aggregated."""

    source: QueryPlan
    unit: str
    names: tuple[str, ...]
    # grouped by the unit and keys too (docs/privacy.md §3.11): (column of the source's
    # table, its name in the relation) of each key; the relation has a row per unit and
    # key combination, and its table is user-level, of privacy unit ``unit``
    keys: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class GroupingSetsPlan:
    """GROUP BY GROUPING SETS, ROLLUP or CUBE: one plan per grouping set, each with its
    canonical SQL (a release of its own), their rows answered in order, then sorted by
    ``order`` ((output position, descending) pairs) and cut at ``limit``."""

    parts: tuple[tuple[str, QueryPlan], ...]
    order: tuple[tuple[int, bool, bool], ...] = ()
    limit: int | None = None


@dataclass(frozen=True)
class CombinedPlan:
    """Several one-row releases read together (a CROSS JOIN of aggregate queries without
    GROUP BY): each part with its canonical SQL, a release of its own, and ``post``
    (``proxy.analyze.outer.OuterQuery``) computing the answer from their rows."""

    parts: tuple[tuple[str, QueryPlan], ...]
    post: Any


@dataclass(frozen=True)
class StagedPlan:
    """A statement whose scalar subqueries over protected tables are releases of their
    own, answered first (``stages``: canonical SQL and plan of each, in the order they
    stand in the WHERE); ``statement`` is then answered with their values in their
    places; ``held`` is its plan with 0 there (what is refused before any debit, and
    its answer's columns); ``keyed``: per stage, the outer public columns a correlated
    subquery is grouped by (its released rows are then a value per key; empty: one
    value; no stage keyed: ``()``). Or a statement over a step and a public table
    keeping the step's largest group (TPC-H Q15): one stage whose plan's ``post`` is a
    ``TopChoice``, its released row then read in the step's place, by a statement over
    public tables only (``held``: a ``PassthroughPlan``)."""

    stages: tuple[tuple[str, QueryPlan], ...]
    statement: Any
    held: QueryPlan | PassthroughPlan  # a step released by a TopChoice: over public tables
    keyed: tuple[tuple[Any, ...], ...] = ()


@dataclass(frozen=True)
class TopChoice:
    """A grouped SUM of which only the group of the largest (``smallest``: least) value
    is released: the group chosen by the exponential mechanism, then its value with
    noise (``proxy.privacy.top_choice``). The release stands for the step ``step`` of a
    ``StagedPlan``'s statement, its group key and value as the step's columns
    ``columns`` (TPC-H Q15's ``revenue``: supplier_no, total_revenue)."""

    step: str
    columns: tuple[str, str]
    smallest: bool = False


@dataclass(frozen=True)
class PassthroughPlan:
    """A query touching only tables the rules mark public: run as written (its tree,
    rendered in the backend's dialect when sent: ``text``)."""

    sql: exp.Expression
    # the answer's notice where it has one (a list of declared keys: analyze.key_listing)
    note: str | None = None
    # its renderings by dialect (``text``): a plan the shape cache keeps is sent again
    rendered: dict[str, str] = field(default_factory=dict, init=False, compare=False,
                                    repr=False)

    def text(self, dialect: str) -> str:
        """The tree rendered in ``dialect``, once per plan (the tree is not changed
        after analysis: the cache's plan is every session's)."""
        text = self.rendered.get(dialect)
        if text is None:
            text = self.rendered[dialect] = self.sql.sql(dialect=dialect)
        return text


# What a GROUP BY term computes (proxy.analyze.group_keys builds them, proxy.pushdown.
# group_sql renders them)
COLUMN, TIME_TRUNC, TIME_PART, EPOCH_BIN = "column", "time_trunc", "time_part", "epoch_bin"
FLOOR_BIN, TRUNC_BIN, WIDTH_BUCKET, CASE = "floor_bin", "trunc_bin", "width_bucket", "case"
RANGES, MODULO = "ranges", "modulo"  # keys by ranges of one column (proxy.analyze.time_keys,
# proxy.analyze.number_keys): the backend gives a label's index; x % w of an int column
PUBLIC = "public"  # a public table's column, keyed by its values there (proxy.analyze.joins)
SELECTED = "selected"  # a protected column keyed by a partition selection over its values


@dataclass(frozen=True)
class GroupKey:
    """One GROUP BY term: what the backend computes per row (``kind`` over ``column``
    with ``unit``/``numbers``/``branches``) and the public list of its ``keys``, of the
    rule type ``type``. ``name`` is the result column's default name."""

    name: str
    kind: str
    column: str | None
    keys: tuple[Any, ...]
    type: str
    unit: str | None = None
    numbers: tuple[float, ...] = ()  # bins: (w,) or (w, 1) when multiplied back; width_bucket: (lo, hi, n)
    branches: tuple[tuple[exp.Expression, Any], ...] = ()  # CASE: (condition, key)
    default: Any = None
    # keys that are indices of ``labels``, the values shown (a NULL group, a timestamptz
    # or a text of several ranges); RANGES: ``bounds[i]`` starts the column's range i,
    # whose label index is ``ranges[i]``
    labels: tuple[Any, ...] | None = None
    bounds: tuple[Any, ...] = ()
    ranges: tuple[int, ...] = ()
    # TIME_TRUNC of ``column + by * numbers[0] seconds``: the int column that scales it
    by: str | None = None
    # TIME_TRUNC of a date column: PostgreSQL's date_trunc(text, timestamptz), a moment
    # at a wall clock of the session's zone, this; the backend truncates the wall clock
    zone: str | None = None
    # TIME_PART of the column read on another clock: (from, seconds) of each piece of
    # the shift added to the clamped moment before the field is extracted, in order
    # (the first's ``from`` unused: the pieces before it, too)
    shifts: tuple[tuple[dt.datetime, int], ...] = ()
    # the term's PostgreSQL type as PostgreSQL types its expression (proxy.result_types:
    # ``width_bucket`` integer, ``extract`` numeric); None: its column's, else ``type``'s.
    # Of the statement's text alone, so no part of a plan's repr (answer cache keys)
    pg: str | None = field(default=None, repr=False, compare=False)

    def same_term(self, other: GroupKey) -> bool:
        """The same computation (its keys follow from it and the query's WHERE)."""
        plain = {"name": "", "keys": (), "labels": None, "bounds": (), "ranges": ()}
        return replace(self, **plain) == replace(other, **plain)

    def shown(self, key: Any) -> Any:
        """The value a key is answered as."""
        if self.zone is not None and key is not None:
            return from_wall(zone_named(self.zone), key).replace(tzinfo=dt.UTC)
        return key if self.labels is None else self.labels[key]


@dataclass(frozen=True)
class Join:
    """One table joined to the plan's protected table. A public table: ``pairs`` of
    (protected column, public column) are equated, ``key`` (the public columns of one
    or several of them) is declared unique (``multiplicity`` 1: many-to-one) or with at most ``multiplicity`` rows per
    value, so a protected row meets at most that many public rows; ``left``: protected
    rows without a match stay, with NULL public columns. ``protected``: a second
    protected table joined on the privacy unit (the pair (unit, unit), ``key`` its
    unit column; along a link, the link's pair too); ``left``: the earlier rows without
    one stay, with NULL columns of this one."""

    table: Table
    alias: str
    pairs: tuple[tuple[str, str], ...]
    key: tuple[str, ...]
    left: bool
    protected: bool = False
    multiplicity: int = 1
    # a protected table joined along a declared link (docs/privacy.md §3.13), its pairs
    # (units, then the link): "referenced", the earlier row names this table's row (one
    # at most); "referencing", this row names the earlier one, the protected source
    # ``determines`` (0: the plan's own table, k: its k-th protected join); "": on the unit
    link: str = ""
    determines: int | None = None
    # a LEFT-joined protected table: the condition on its own columns its rows are read
    # with (the ON's other conditions; None: all its rows)
    read: Any = None

    def column_name(self, column: str) -> str:
        """The public column's name among the plan's columns (``r.name``): a dot never
        occurs in a declared column's name."""
        return f"{self.alias}.{column}"


# An EXISTS's row and the scope's row, as the SQL of a ``SemiJoin``'s condition names them
SEMI_INNER, SEMI_OUTER = "_idp_y", "_idp_x"


@dataclass(frozen=True)
class SemiJoin:
    """An EXISTS of the plan's WHERE over a protected table of the plan's unit
    (``proxy.analyze.semi_joins``): the scope's boolean column ``name``, true when a row
    of ``table`` of the same unit meets ``condition`` (its columns read as ``_idp_y.col``,
    the scope's as ``_idp_x.col``; None: any row of that unit)."""

    table: Table
    name: str
    condition: Any = None


@dataclass(frozen=True)
class JoinedColumn(Column):
    """A joined table's column as a column of the joined plan's table; ``join`` is the
    alias of its table, ``source`` its name there; ``protected``: of the second
    protected table (aggregated like the first's; grouped by declared keys only)."""

    join: str = ""
    source: str = ""
    protected: bool = False


def multiplicity(joins: tuple[Join, ...]) -> int:
    """The most joined rows one row of the protected table(s) becomes through the public
    joins: the product of their multiplicities (1 for unique keys). Each public join
    maps a row to at most its m rows, whatever the other joins did (docs/privacy.md
    §3.9)."""
    return math.prod(join.multiplicity for join in joins if not join.protected)


def unit_sources(table: Table, joins: tuple[Join, ...]) -> tuple[tuple[Table, bool], ...]:
    """The protected tables whose rows per unit multiply into a unit's joined rows, each
    with whether it is LEFT joined (docs/privacy.md §3.10, §3.13): the plan's own table
    and its protected joins, less those a link makes one row at most per earlier row
    (a table joined as the "referenced" side, or one a "referencing" join
    ``determines``). Every joined row holds records of one unit, and it is determined
    by its rows of these tables, so a unit owns at most the product of its rows in them
    (LEFT: at least one each)."""
    protected = [join for join in joins if join.protected]
    absorbed = {number for number, join in enumerate(protected, 1) if join.link == "referenced"}
    absorbed |= {join.determines for join in protected if join.link == "referencing"}
    sources = [(table, False), *((join.table, join.left) for join in protected)]
    return tuple(source for number, source in enumerate(sources) if number not in absorbed)


@dataclass(frozen=True)
class Moment:
    """What MAX or MIN of a date or timestamp column ranks: the whole days or seconds
    from ``origin`` (the end of ``window`` the answer is near) to the moment of
    ``column`` clamped to ``window`` — its declared domain as the WHERE narrows it,
    which the shape cache reads again (``shapes._Template.bind``); answered as a
    ``kind`` ("date" or "timestamp")."""

    origin: dt.datetime
    kind: str
    column: str
    window: tuple[dt.datetime, dt.datetime]
    # GROUP BY date_trunc(bucket, column): the number is counted from each row's bucket
    # start less ``anchor`` (MAX: the bucket's longest width, so it is ≤ 0 and dense at
    # the bucket's end; MIN: 0), not from ``origin``
    bucket: str | None = None
    anchor: int = 0


@dataclass(frozen=True)
class DerivedColumn(Column):
    """An aggregate's expression as a column of the plan's table. ``name`` is the
    expression's SQL; ``expression`` its tree over resolved column names, rendered for
    the backend by ``render``."""

    expression: Any = None
    moment: Moment | None = None  # of MAX or MIN of a date or timestamp column
    # the expression's PostgreSQL type as PostgreSQL types the aggregate's argument as
    # written (``age::bigint`` bigint; ``expression`` is the proxy's own computation);
    # of the statement's text alone, so no part of a plan's repr (answer cache keys)
    pg: str | None = field(default=None, repr=False, compare=False)

    def shown(self, value: Any, start: dt.datetime | None = None) -> Any:
        """A released value as the answer gives it: of a moment column, the moment
        (whole days or seconds from the origin, or from ``start``, its group's bucket,
        moved by the anchor); any other, unchanged."""
        if self.moment is None or value is None:
            return value
        origin = self.moment.origin
        if self.moment.bucket is not None:
            value, origin = float(value) + self.moment.anchor, start
        if self.moment.kind == "date":
            return origin.date() + dt.timedelta(days=round(float(value)))
        return origin + dt.timedelta(seconds=round(float(value)))

    def render(self, value_of: Callable[[str], exp.Expression]) -> exp.Expression:
        """The expression as backend SQL: every column read as a value is replaced by
        ``value_of(name)`` (its normalised value); columns inside CASE conditions stay
        raw, as WHERE reads them, and so do time columns an extract reads (``read_raw``)."""
        tree = self.expression.copy()
        if isinstance(tree, exp.Column):  # replacing the root would leave it raw
            return value_of(tree.name)
        for column in list(tree.find_all(exp.Column)):
            if not read_raw(column):
                column.replace(value_of(column.name))
        return tree


def read_raw(node: exp.Expression) -> bool:
    """Inside a CASE condition (read raw, as WHERE reads it) or an extract (the field of
    a time column, whose SQL clamps the moment itself: ``proxy.guards.time_field``)."""
    while node.parent is not None:
        if (isinstance(node.parent, exp.If) and node.arg_key == "this") or isinstance(
                node.parent, exp.Extract):
            return True
        node = node.parent
    return False


MAX_ATOMS = 1000  # the most values a prior table may list


@dataclass(frozen=True)
class PriorSpec:
    """A prior as an analyst writes it (``SET idp.prior = '...'``), before the column's
    domain and type give it its range: ``uniform(a, b)``, ``normal(mu, sigma)`` or a
    JSON table ``{"0": 0.99, "1": 0.01}``."""

    kind: str  # "uniform" | "normal" | "table"
    parameters: tuple = ()
    text: str = field(default="", compare=False, repr=False)  # as the analyst wrote it


_CALL = re.compile(r"^\s*(uniform|normal)\s*\(\s*([^,()]+?)\s*,\s*([^,()]+?)\s*\)\s*$",
                   re.IGNORECASE)


def parse_prior(text: str) -> PriorSpec:
    """Read a prior; a ValueError says what was wrong and what is allowed."""
    allowed = ("use uniform(a, b), normal(mu, sigma) or a table such as "
               "'{\"0\": 0.99, \"1\": 0.01}'")
    if text.strip().startswith("{"):
        try:
            table = json.loads(text)
        except (ValueError, RecursionError):  # incl. integers beyond Python's digit limit
            raise ValueError(f"the prior table is not valid JSON; {allowed}") from None
        if not table or not all(isinstance(p, (int, float)) and not isinstance(p, bool)
                                for p in table.values()):
            raise ValueError(f"a prior table maps values to probabilities; {allowed}")
        pairs = prior_atoms(list(table.items()), nominal=True)
        return PriorSpec("table", pairs, text.strip())
    match = _CALL.match(text)
    if match is None:
        raise ValueError(f"unknown prior {text!r}; {allowed}")
    try:
        first, second = float(match.group(2)), float(match.group(3))
    except ValueError:
        raise ValueError(f"the parameters of {text!r} must be numbers; {allowed}") from None
    if not (abs(first) <= MAGNITUDE_CAP and abs(second) <= MAGNITUDE_CAP):  # NaN fails too
        raise ValueError(f"the parameters of {text!r} must be finite, within "
                         f"±{MAGNITUDE_CAP:g}")
    kind = match.group(1).lower()
    if kind == "uniform" and not first < second:
        raise ValueError(f"uniform(a, b) needs a < b, got {text!r}")
    if kind == "normal" and not second > 0:
        raise ValueError(f"normal(mu, sigma) needs sigma > 0, got {text!r}")
    return PriorSpec(kind, (first, second), text.strip())


def prior_atoms(table: Sequence[tuple[Any, Any]], nominal: bool = False
                ) -> tuple[tuple[Any, float], ...]:
    """A discrete prior's atoms from (value, probability) pairs: at most MAX_ATOMS of them
    (the error bound's cost grows with their number), probabilities in (0, 1] (NaN and
    ±inf fail the comparison) summing to 1 within 1e-9; equal values merged, sorted by
    value unless nominal, and scaled to sum to 1 as closely as floats allow."""
    if len(table) > MAX_ATOMS:
        raise ValueError(f"a prior table lists at most {MAX_ATOMS} values, got {len(table)}; "
                         "merge neighbouring values, or use uniform(a, b) or normal(mu, sigma)")
    if not all(0 < p <= 1 for _, p in table):
        raise ValueError("a prior table's probabilities must be finite, positive and sum to 1")
    merged: dict[Any, float] = {}
    for value, probability in table:
        merged[value] = merged.get(value, 0.0) + float(probability)
    total = math.fsum(merged.values())
    if abs(total - 1) > 1e-9:
        raise ValueError("a discrete prior needs positive probabilities that sum to 1")
    atoms = [(value, probability / total) for value, probability in merged.items()]
    return tuple(atoms if nominal else sorted(atoms, key=lambda pair: pair[0]))
