"""Sensitivities, samplers and mechanisms: pure functions of statistics, ε and a sampler."""

from __future__ import annotations

from proxy.errors import BadSetting, NotSupported
from proxy.privacy.contribution_bounds import clippable
from proxy.privacy.inverse_sensitivity import candidate_grid
from proxy.privacy.refined_answers import answer_prior
from proxy.privacy.sensitivity import SensitivityError
from proxy.privacy.top_choice import refuse_top_choice
from proxy.vocabulary import QueryPlan, TopChoice


def refuse_unanswerable(plan: QueryPlan) -> None:
    """Refuse, before any debit, a plan its mechanism cannot answer: a prior that cannot
    describe the answer (22023), or percentiles, MAX and MIN for the exponential
    mechanism over a domain without a candidate (docs/privacy.md §5.3). Its per-unit
    source is checked too."""
    if plan.per_unit is not None:
        refuse_unanswerable(plan.per_unit.source)
    paired = [agg for agg in plan.aggregates if agg.kind.row.paired]
    if paired and not clippable(plan):
        raise NotSupported(f"{paired[0].kind.upper()} is answered from clipped sums over the "
                           "rows of one table or a join (docs/privacy.md §3.17): not with a "
                           "prior, over per-unit subqueries, nor over a table without a "
                           "privacy unit joined to several rows per key; ask it of the "
                           "table's rows directly")
    if isinstance(plan.post, TopChoice):  # the largest group, chosen privately
        refuse_top_choice(plan)
    if plan.mechanism.prior is not None:
        try:
            answer_prior(plan)  # also computes (and caches) its error bound, before the debit
        except ValueError as exc:
            raise BadSetting(f"idp.prior: {exc}") from None
    if not plan.mechanism.exponential:
        return
    for agg in plan.aggregates:
        if agg.kind.row.ranked:
            column = plan.table.columns[agg.column]
            try:
                candidate_grid(column.lower, column.upper, column.resolution,
                               column.type == "int")
            except SensitivityError:
                points = "integer" if column.type == "int" else (
                    f"multiple of its resolution {column.resolution:g}"
                    if column.resolution else "candidate")
                raise NotSupported(f"{agg.label.upper()}({agg.column}): its domain here, "
                                   f"[{column.lower:g}, {column.upper:g}] (declared, narrowed "
                                   "by the WHERE's bounds on it), holds no "
                                   f"{points}, so the exponential mechanism has no "
                                   "candidate; widen the range, or use idp.sensitivity = "
                                   "'global'") from None
