"""Grouped COUNTs consistent with their subtotals (privacy/consistency.py; issue 32 item
6): post-processing of released counts by weighted least squares over the grouping
sets' tree, then integers ≥ 0 that add up."""

from __future__ import annotations

import numpy as np
import pytest

from proxy.privacy.consistency import Node, make_consistent
from proxy.session import Session
from tests.analyze.grouped_people import RULES, people
from tests.factories import engine_fixture, open_engine
from tests.probes import run

engine = engine_fixture(RULES, {"people": people()})


def _tree(rng):
    """A root with three children of two leaves each: true counts (leaves 50–150, each
    parent the sum of its children) released with noise of a variance drawn at random."""
    def node(depth):
        children = [node(depth + 1) for _ in range(3 if depth == 0 else 2)] if depth < 2 else []
        true = sum(c.spread for c in children) if children else float(rng.uniform(50, 150))
        variance = float(rng.uniform(1, 50))
        made = Node(true + float(rng.normal(0, np.sqrt(variance))), variance, children)
        made.spread = true  # the true count, kept here until make_consistent overwrites it
        return made
    return node(0)


def _nodes(root):
    return [root] + [n for child in root.children for n in _nodes(child)]


@pytest.mark.parametrize("seed", range(5))
def test_the_estimate_is_weighted_least_squares_made_integer(seed):
    """Against a direct solve (numpy's least squares over the leaves, each node the sum
    of its leaves, weighted by 1/variance): every node within 1 of it (the root rounded,
    each share floored or raised by the largest remainders), all ≥ 0, and every parent
    the sum of its children."""
    root = _tree(np.random.default_rng(seed))
    nodes = _nodes(root)
    leaves = [n for n in nodes if not n.children]

    def under(n):
        return [n] if not n.children else [x for c in n.children for x in under(c)]
    design = np.array([[1.0 if leaf in under(n) else 0.0 for leaf in leaves] for n in nodes])
    weights = np.array([1 / np.sqrt(n.variance) for n in nodes])
    values = np.array([n.value for n in nodes])
    solved, *_ = np.linalg.lstsq(design * weights[:, None], values * weights, rcond=None)
    fitted = design @ solved
    make_consistent([root])
    for n, expected in zip(nodes, fitted):
        assert abs(n.final - expected) <= 1, (n.final, expected)
        assert n.final >= 0 and isinstance(n.final, int)
        if n.children:
            assert n.final == sum(c.final for c in n.children)


def test_negative_shares_are_moved_to_the_others_and_exact_counts_kept():
    """An exact total of 3 (variance 0: a public COUNT) over noisy counts −4, 6, 1: the
    groups add up to 3, none below 0."""
    root = Node(3.0, 0.0, [Node(-4.0, 4.0), Node(6.0, 4.0), Node(1.0, 4.0)])
    make_consistent([root])
    finals = [c.final for c in root.children]
    assert root.final == 3 and sum(finals) == 3 and min(finals) >= 0, finals


# terms that give every row a key (a CASE with an ELSE): a parent is its children's sum
REGION = "CASE WHEN region IN ('north', 'east') THEN 'ne' ELSE 'sw' END"
SEX = "CASE WHEN sex = 'f' THEN 'f' ELSE 'other' END"


def test_a_rollups_subtotals_are_the_sums_of_their_groups(engine):
    """ROLLUP of two CASE terms with an ELSE at ε 0.5 with a WHERE (so no count is
    public): each region's row is the sum of its two sexes, the total the sum of the
    regions; the note says so. A CUBE (a row with two parents) is answered as
    released, without the note."""
    session = Session.open(engine, "zoe")
    answer, = run(session, f"SELECT {REGION} AS r, {SEX} AS s, COUNT(*) FROM people "
                           "WHERE age > 30 GROUP BY ROLLUP(1, 2)")
    rows = answer.rows
    total = [r[2] for r in rows if r[0] is None]
    regions = {r[0]: r[2] for r in rows if r[0] is not None and r[1] is None}
    pairs = [r for r in rows if r[0] is not None and r[1] is not None]
    assert len(total) == 1 and len(regions) == 2 and len(pairs) == 4
    assert total[0] == sum(regions.values())
    for region, count in regions.items():
        assert count == sum(r[2] for r in pairs if r[0] == region)
    assert any("made consistent" in note for note in answer.privacy["notes"])
    cube, = run(session, f"SELECT {REGION} AS r, {SEX} AS s, COUNT(*) FROM people "
                         "WHERE age > 31 GROUP BY CUBE(1, 2)")  # new releases, not replays
    assert not any("made consistent" in note for note in cube.privacy["notes"])


@pytest.mark.parametrize("term,grouping", [
    ("region", "ROLLUP(1)"), ("region", "ROLLUP(1, 1)"),
    (REGION, "GROUPING SETS ((1), (1), ())")])
def test_counts_are_left_as_released_where_a_parent_is_not_its_childrens_sum(
        duckdb_url, term, grouping):
    """A column's NULL (or undeclared) values are in the total and in no region's row,
    so the total is not the regions' sum: made "consistent", the 60 people without a
    region were spread over the regions (each about 15 too many; the review of
    2026-11-29). A set asked twice is not a second partition of its parent (the
    regions came back halved). At ε 1000 each count is the true one within a few."""
    data = people()
    data.columns["region"][:60] = [None] * 60
    rules = (RULES.replace("epsilon_per_query = 0.5", "epsilon_per_query = 1000\n"
                           "max_epsilon_per_query = 1000")
             .replace("budget_per_analyst = 1000", "budget_per_analyst = 100000"))
    with open_engine(duckdb_url, rules, {"people": data}) as made:
        answer, = run(Session.open(made, "zoe"),
                      f"SELECT {term} AS r, COUNT(*) FROM people GROUP BY {grouping}")
    assert not any("made consistent" in note for note in answer.privacy["notes"])
    truth: dict = {}
    for region in data.columns["region"]:
        key = region if term == "region" else "ne" if region in ("north", "east") else "sw"
        truth[key] = truth.get(key, 0) + 1
    for r, count in answer.rows:
        wanted = 300 if r is None else truth[r]
        assert abs(count - wanted) <= 3, (r, count, wanted)
