"""Answers by knowledge refinement (seed 001): the analyst's prior over the answer's
range, the exact answer the backend computed, one sample of the refined law.

No sensitivity enters: every output's probability stays within [e^{−ε/2}, e^{ε/2}] times
the prior's whatever the data, so the loss between any two true answers is at most ε —
any two data sets for a statistical query (seed 001 Prop. 1), any two values of the unit
for an individual one (and ε/2 against its absence). The reported 95% bound is the worst
over every possible true answer, so it says nothing about the data.
"""

from __future__ import annotations

import math
from numbers import Number
from typing import Any

from proxy.privacy.noisy_answers import Released
from proxy.privacy.refinement import error_bound, factors, prior_over, refine, unrefined
from proxy.privacy.sampler import RandomSource
from proxy.statistics import BOTTOM, PCT, TOP, GroupStats, RankRef
from proxy.vocabulary import AVG, COUNT, MAX, MIN, PERCENTILE, SUM, QueryPlan

_CASTS = {"int": int, "float": float, "text": str,
          "bool": lambda key: key.strip().lower() in ("true", "t", "1", "yes")}


def answer_prior(plan: QueryPlan) -> Any:
    """The prior of the plan's one answer over that answer's range (a normal is
    truncated to the declared domain); ValueError when the prior cannot describe it.
    Called when the session checks the plan (proxy.privacy.refuse_unanswerable), so its
    error bound is computed (and cached) before the debit: the release only samples."""
    agg = plan.aggregates[0]
    if not agg.kind.row.refinable:
        raise ValueError(f"a prior describes COUNT, SUM, AVG, percentiles, MAX, MIN or one "
                         f"unit's value; for "
                         f"{agg.label.upper()} RESET idp.prior")
    column = plan.table.columns.get(agg.column) if agg.column else None
    low, high = (None, None) if column is None else (column.lower, column.upper)
    kind = column.type if column is not None else "int"
    if agg.kind == COUNT:
        low, high, kind = 0, None, "int"
    elif agg.kind == SUM:
        low, high = None, None
    elif agg.kind == AVG:
        kind = "float"
    if kind == "date":
        raise ValueError(f"a prior over the dates of {agg.column} is not supported; "
                         "ask about a numeric or text column")
    nominal = kind in ("text", "bool")
    if nominal and plan.mechanism.prior.kind != "table":
        raise ValueError(f"{agg.column} is {kind}: give a prior table such as "
                         "'{\"yes\": 0.3, \"no\": 0.7}'")
    prior = prior_over(plan.mechanism.prior, low, high, nominal, _CASTS[kind])
    error_bound(prior, *factors(plan.epsilon))  # its one costly step, before the debit
    return prior


def exact_answer(plan: QueryPlan, group: GroupStats) -> Any:
    """The true answer of the plan's one aggregate from the backend's statistics; an
    empty scope answers as the iDP release does (domain midpoint, or the bound)."""
    agg = plan.aggregates[0]
    if agg.kind == COUNT:
        return group.rows if agg.column is None else group.column(agg.column).n
    stats = group.column(agg.column)
    column = plan.table.columns[agg.column]
    middle = None if column.lower is None or column.upper is None else (
        (column.lower + column.upper) / 2)
    if agg.kind == SUM:
        return stats.total
    if agg.kind == AVG:
        return stats.total / stats.n if stats.n else middle
    ref, fallback = {PERCENTILE: (RankRef(PCT, 0, agg.fraction), middle),
                     MAX: (RankRef(TOP, 0), column.lower),
                     MIN: (RankRef(BOTTOM, 0), column.upper)}[agg.kind]
    value = stats.values.get(ref)
    return fallback if value is None else value


def release_refined(plan: QueryPlan, true: Any, rng: RandomSource) -> Released:
    """One sample of the prior refined around ``true`` (None: the unit is not in the
    data or its value is NULL, so the prior itself is sampled; so is a NaN, which has no
    place to centre a ball and is within e^{ε/2} of every refined law)."""
    prior = answer_prior(plan)
    alpha_u, alpha_d = factors(plan.epsilon)
    missing = true is None or (isinstance(true, Number) and math.isnan(true))
    law = unrefined(prior) if missing else refine(prior, true, alpha_u, alpha_d)
    value = law.sample(rng)
    agg = plan.aggregates[0]
    column = plan.table.columns.get(agg.column) if agg.column else None
    if agg.kind == COUNT or (agg.kind != AVG and column is not None and column.type == "int"):
        value = round(value)
    bound = error_bound(prior, alpha_u, alpha_d)
    # priors are checked before the debit so that nothing here can be non-finite
    assert (isinstance(value, (str, bool)) or math.isfinite(value)) and (
        bound is None or math.isfinite(bound)), "refinement produced a non-finite number"
    return Released(value, bound, f"knowledge refinement of the prior {plan.mechanism.prior.text}", _NOTE)


_NOTE = ("answered by knowledge refinement (docs/privacy.md §5.1): one sample of the prior "
         "reweighted towards the true answer; the 95% bound holds whatever the true answer is")
