"""The validated, immutable description of one private query.

Everything downstream (pushdown, privacy, ledger) reads only this value, never the
analyst's SQL text, so what is computed is exactly what was checked.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction
from typing import Any

from sqlglot import exp

from proxy.analyze.group_keys import GroupKey
from proxy.analyze.joins import Join, multiplicity
from proxy.privacy.refinement import PriorSpec
from proxy.rules import Table

COUNT, PERCENTILE, MAX, MIN, SUM, AVG = "count", "percentile", "max", "min", "sum", "avg"
VALUE = "value"  # one unit's value of a column: an individual query (seed 001)
UNITS = "units"  # COUNT(DISTINCT privacy unit): how many units are in scope
VAR_SAMP, VAR_POP, STDDEV_SAMP, STDDEV_POP = "var_samp", "var_pop", "stddev_samp", "stddev_pop"
SPREADS = (VAR_SAMP, VAR_POP, STDDEV_SAMP, STDDEV_POP)  # proxy.privacy.variance


@dataclass(frozen=True)
class Aggregate:
    """One aggregate of the SELECT list.

    ``column`` is None for COUNT(*); ``fraction`` is the percentile p as an exact
    fraction (MEDIAN: 1/2); ``continuous`` marks PERCENTILE_CONT, answered as the
    discrete percentile (said in the notice).
    """

    kind: str
    column: str | None
    label: str
    fraction: Fraction | None = None
    continuous: bool = False


@dataclass(frozen=True)
class OutputColumn:
    """A result column: a GROUP BY key (``group`` index) or an aggregate (``aggregate``)."""

    name: str
    group: int | None = None
    aggregate: int | None = None


@dataclass(frozen=True)
class QueryPlan:
    """A private aggregate query over one protected table."""

    table: Table
    where: exp.Expression | None
    group_by: tuple[GroupKey, ...]  # terms with public key sets (proxy.analyze.group_keys)
    aggregates: tuple[Aggregate, ...]
    outputs: tuple[OutputColumn, ...]
    order_by: tuple[tuple[int, bool], ...]  # (output index, descending)
    limit: int | None
    model: str  # "idp" | "dp" | "refinement" (a prior is set: seed 001)
    epsilon: Decimal  # per aggregate
    prior: PriorSpec | None = None
    individual: bool = False  # one unit's value (WHERE unit = k), not a statistic
    smooth_gamma: float | None = None  # DP noise calibrated to the smooth sensitivity
    instance: bool = False  # percentiles, MAX and MIN by the exponential mechanism
    piecewise: bool = False  # ... in its piecewise form (interpolated rank distance)
    # iDP noise scaled to the data's own local sensitivity (raw iDP: the owner's opt-in,
    # [defaults] noise_scale = "local"); else every scale is the data's private choice
    local: bool = False
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

    @property
    def cost(self) -> Decimal:
        """Sequential composition over the aggregates of one SELECT (SPEC §3.2); a
        public aggregate costs nothing."""
        return self.epsilon * sum(not self.public(a) for a in self.aggregates)

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
                and not self.group_by and self.prior is None and not self.individual)

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
        """All declared key combinations: every group is answered, empty or not."""
        combos: list[tuple[Any, ...]] = [()]
        for term in self.group_by:
            combos = [c + (k,) for c in combos for k in term.keys]
        return combos

    @property
    def group_count(self) -> int:
        """How many groups are answered: ``len(group_keys())`` (1 without GROUP BY),
        from the key sets' sizes, without listing the combinations."""
        return math.prod(len(term.keys) for term in self.group_by)


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


@dataclass(frozen=True)
class PassthroughPlan:
    """A query touching only tables the rules mark public: run as written."""

    sql: str
