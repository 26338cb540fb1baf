"""Grouped COUNTs made consistent with their subtotals (issue 32 item 6): a statement with
GROUP BY ROLLUP or GROUPING SETS releases each set's counts with its own noise, so the
groups of one set need not add up to the row of the coarser set they refine (a ROLLUP's
departments against its total). Every count here is a released value and every weight
a public function of its released 95 % bound, so making them consistent is
post-processing: no ε, no leak (docs/privacy.md §3.19).

The sets must form a tree: each set refines at most one coarser set of the statement by
exactly one more key (ROLLUP, or GROUPING SETS of nested keys; a CUBE, where a row has
two parents, is left as released), each set answers every key combination of its
keys (no partition selection, no HAVING), and every row has a key of that one more
term (``_every_row_keyed``: a CASE with an ELSE), so a coarse row's children are all of
its refinement's rows. Then, with each count's variance taken as its bound squared (the
same noise family throughout: the bound is a multiple of the scale), the weighted
least-squares estimate under the tree's sums is computed exactly in two passes (Hay,
Rastogi, Miklau and Suciu 2010, "Boosting the accuracy of differentially private
histograms through consistency"): bottom-up, each node's own count is combined with the
sum of its children's estimates by inverse variance; top-down, a parent's final value
minus its children's estimates is shared among them in proportion to their variances.
Counts are then made integers ≥ 0 that add up exactly: the root rounded (at least 0),
each parent's integer shared among its children by their estimates clipped at 0 (a
negative share moved to the others in proportion to their variances) and the largest
remainders."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from sqlglot import exp

from proxy.vocabulary import CASE, COUNT, GroupKey


@dataclass
class Node:
    """One released count: its value, its variance (bound squared), its children."""

    value: float
    variance: float
    children: list[Node] = field(default_factory=list)
    estimate: float = 0.0
    spread: float = 0.0  # the estimate's variance (bottom-up)
    final: int = 0


def make_consistent(roots: list[Node]) -> None:
    """Set ``final`` of every node of the trees: integers ≥ 0, each parent the sum of its
    children, the weighted least-squares estimate before rounding."""
    for root in roots:
        _up(root)
        root.final = max(0, round(root.estimate))
        _down(root)


def _up(node: Node) -> None:
    if not node.children:
        node.estimate, node.spread = node.value, node.variance
        return
    for child in node.children:
        _up(child)
    total = sum(child.estimate for child in node.children)
    spread = sum(child.spread for child in node.children)
    if node.variance == 0 or spread == 0:  # an exact side decides
        exact = node.variance == 0
        node.estimate = node.value if exact else total
        node.spread = 0.0
        return
    weight = 1 / node.variance + 1 / spread
    node.estimate = (node.value / node.variance + total / spread) / weight
    node.spread = 1 / weight


def _down(node: Node) -> None:
    """The parent's integer ``final`` shared among its children."""
    children = node.children
    if not children:
        return
    spread = sum(child.spread for child in children)
    gap = node.final - sum(child.estimate for child in children)
    shares = [child.estimate + (gap * child.spread / spread if spread else
                                gap / len(children)) for child in children]
    shares = _clipped(shares, [child.spread for child in children], node.final)
    floors = [math.floor(share) for share in shares]
    left = node.final - sum(floors)
    order = sorted(range(len(children)), key=lambda i: floors[i] - shares[i])
    for i in order[:left]:
        floors[i] += 1
    for child, value in zip(children, floors):
        child.final = value
        _down(child)


def _clipped(shares: list[float], spreads: list[float], total: int) -> list[float]:
    """``shares`` (adding up to ``total`` ≥ 0) with every negative one set to 0 and its
    deficit taken from the positive ones in proportion to their variances (equally
    where all are exact), repeated until none is negative."""
    shares = list(shares)
    while True:
        negative = [i for i, share in enumerate(shares) if share < 0]
        if not negative:
            return shares
        deficit = -sum(shares[i] for i in negative)
        for i in negative:
            shares[i] = 0.0
        rest = [i for i, share in enumerate(shares) if share > 0]
        if not rest:
            return [total / len(shares)] * len(shares)
        weights = [spreads[i] for i in rest]
        if sum(weights) == 0:
            weights = [1.0] * len(rest)
        scale = sum(weights)
        for i, weight in zip(rest, weights):
            shares[i] -= deficit * weight / scale


def _every_row_keyed(term: GroupKey) -> bool:
    """Whether every row has a key of ``term``, so a parent's count is its children's
    sum: a CASE whose rows no branch takes have a key too (its ELSE, or the NULL group
    of an ELSE NULL), or one whose branch is always taken. A column's NULL or
    undeclared values, a condition's NULL, a time bucket's NULL moments are in no group:
    their rows are in the parent and in no child, and the sums would spread them over
    the children (a ROLLUP of a column holding NULLs counted them in its keys; the
    review of 2026-11-29)."""
    return term.kind == CASE and (term.default is not None or any(
        isinstance(condition, exp.Boolean) and condition.this
        for condition, _ in term.branches))


def consistent_rows(plans: list, rows: list[list[tuple]], bounds: list[dict[str, list]],
                    columns: list[str]) -> list[list[tuple]] | None:
    """The grouping sets' rows (``rows[i]`` of ``plans[i]``, the statement's columns,
    ``bounds[i]`` their released 95 % bounds by column) with every COUNT column made
    consistent along the sets' tree; None where the sets do not form one (above)."""

    finest = plans[0]
    # no partition selection; the finest set's rows are its aggregates themselves (no
    # HAVING, no expression over them), the others' outer query only the select list
    # that answers the columns outside the set as NULL
    if finest.post is not None or any(
            plan.delta is not None or (plan.post is not None and getattr(
                plan.post, "what", None) != "the select list") for plan in plans):
        return None
    position = {finest.group_by[out.group]: j for j, out in enumerate(finest.outputs)
                if out.group is not None}
    terms = [tuple(plan.group_by) for plan in plans]
    if any(not set(t) <= set(position) for t in terms) or len(
            {frozenset(t) for t in terms}) != len(terms):
        return None  # a set twice (ROLLUP(a, a)) would be two partitions of its parent
    counted = [j for j, out in enumerate(finest.outputs) if out.aggregate is not None
               and finest.aggregates[out.aggregate].kind == COUNT]
    parents = []
    for i, own in enumerate(terms):
        above = [p for p, other in enumerate(terms)
                 if set(other) < set(own) and len(own) - len(other) == 1]
        if len(above) > 1:
            return None  # a CUBE: rows with two parents
        if above and not all(_every_row_keyed(t) for t in set(own) - set(terms[above[0]])):
            return None  # a parent's rows that no child holds (NULL, undeclared keys)
        parents.append(above[0] if above else None)
    if not counted:
        return None
    out = [[list(row) for row in set_rows] for set_rows in rows]
    for j in counted:
        name = columns[j]
        nodes: list[dict[tuple, Node]] = []
        for i, set_rows in enumerate(rows):
            found = {}
            for r, row in enumerate(set_rows):
                bound = bounds[i].get(name, [None] * len(set_rows))[r]
                if row[j] is None or bound is None:
                    return None
                key = tuple(row[position[t]] for t in terms[i])
                found[key] = Node(float(row[j]), float(bound) ** 2)
            nodes.append(found)
        roots = []
        for i, found in enumerate(nodes):
            parent = parents[i]
            for key, node in found.items():
                if parent is None:
                    roots.append(node)
                    continue
                up = tuple(key[terms[i].index(t)] for t in terms[parent])
                if up not in nodes[parent]:
                    return None
                nodes[parent][up].children.append(node)
        make_consistent(roots)
        for i, set_rows in enumerate(rows):
            for r, row in enumerate(set_rows):
                out[i][r][j] = nodes[i][tuple(row[position[t]] for t in terms[i])].final
    return [[tuple(row) for row in set_rows] for set_rows in out]
