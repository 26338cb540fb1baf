"""Mechanisms ask, the engine reads (SPEC §4, issue 31 item 5): the exponential
mechanism, the smooth sensitivity and the private bound are generators that yield
requests (privacy/requests.py) and are sent the answers. Here they are answered in
Python from a list, with no backend: what they ask for, that they stop when answered,
and that the draws are the ones the mechanism made before it asked (the same seed, the
same answers: the same draws, pinned from that code)."""

from __future__ import annotations

import dataclasses
from fractions import Fraction

import pytest

from proxy.analyze import analyze, parse_statements
from proxy.engine import answered
from proxy.privacy import inverse_sensitivity
from proxy.privacy.inverse_sensitivity import (
    Grid,
    Scaled,
    candidate_grid,
    extreme_offset,
    instance_release,
    instance_releases,
    ranked_grid,
)
from proxy.privacy.private_bound import private_levels
from proxy.privacy.requests import CountRequest, RankRequest
from proxy.privacy.smooth_sensitivity import smooth_sensitivities
from proxy.rules import parse_rules
from proxy.settings import Settings
from proxy.statistics import ColumnStats, GroupStats, percentile_rank
from tests.privacy.laws import SeededSource
from tests.privacy.reference import answer, by_hand

RULES = parse_rules("""
[defaults]
noise_scale = "local"
report_scale = "private"

[analysts.zoe]
budget = 100

[tables.t]
privacy_unit = "id"
max_rows_per_unit = 1
[tables.t.columns]
score = { type = "float", domain = [0, 10] }
age = { type = "int", domain = [0, 10] }
kind = { type = "text", keys = ["a", "b"] }
""")
VALUES = sorted([0.0, 1.0, 2.0, 2.0, 2.0, 3.5, 5.0, 5.0, 7.0, 9.0, 10.0, 10.0, 4.0])
HALVES = Grid(Fraction(1, 2), 0, 20, 0.0, 10.0)


def _plan(sql: str, **settings):
    return analyze(parse_statements(sql)[0], RULES, Settings(**settings))


def _answered(asking, by_column: dict[str, list[float]]):
    """The result of ``asking`` and the requests it made, each answered from the sorted
    values of its column."""
    asked = []

    def read(request):
        asked.append(request)
        return answer(by_column[request.column], request)

    return answered(asking, read), asked


def test_a_draw_asks_for_its_window_and_returns_when_sent_it():
    """Three values, a window as wide as the data: one request, the ranks around the
    target of the column in the group, then the draw is done."""
    asking = instance_release(3, 2, 1, Fraction(1), candidate_grid(0, 10, 1.0, True),
                              SeededSource(5), column="age", key=("b",))
    assert next(asking) == RankRequest("age", 1, 3, group=("b",))
    with pytest.raises(StopIteration) as done:
        asking.send([2.0, 5.0, 7.0])
    assert done.value.value in range(11)


@pytest.mark.parametrize("piecewise,draws,counted", [
    (False, [8.25, 3.25, 9.25, 7.25, 4.25, 7.25, 5.75, 6.75],  # the cells' middles
     [6.5, 8.0, 8.0, 10.0, 1.5, 3.0, 9.0, 9.0, 7.0, 7.0, 2.5, 5.5, 7.0, 6.5]),
    (True, [8.0, 3.0, 9.0, 7.0, 4.0, 7.0, 2.5, 6.5],
     [6.5, 8.0, 8.0, 10.0, 1.5, 3.0, 9.0, 9.0, 7.0, 7.0, 2.5, 7.0, 6.5]),
], ids=["instance", "piecewise"])
def test_draws_with_tails_ask_for_counts_and_keep_their_seeded_values(
        monkeypatch, piecewise, draws, counted):
    """A window of one rank each side, kept however heavy the tails: the draws ask for
    that window and count around the tail candidates they draw; answered from the list,
    with the seed 2024 they are the draws (and the counts) of the mechanism as it was
    when it called the backend itself (pinned from that code; the step form answers
    the middle of the drawn candidate's cell since 2026-11-29)."""
    monkeypatch.setattr(inverse_sensitivity, "first_reach", lambda scale, grid: 1)
    monkeypatch.setattr(inverse_sensitivity, "_TAIL_SHARE", 1.0)
    rank = percentile_rank(len(VALUES), Fraction(1, 2))
    rng, got, asked = SeededSource(2024), [], []
    for _ in range(8):
        draw, reads = _answered(instance_release(len(VALUES), rank, 1, Fraction(1, 2), HALVES,
                                                 rng, piecewise, "score"), {"score": VALUES})
        got.append(draw)
        asked += reads
    assert got == draws
    assert [r.point for r in asked if isinstance(r, CountRequest)] == counted
    assert [(r.first, r.last) for r in asked if isinstance(r, RankRequest)] == [(6, 8)] * 8
    assert {(r.column, r.group) for r in asked} == {("score", ())}


def test_the_releases_of_a_group_ask_about_that_group_and_draw_as_one_at_a_time():
    """Every percentile, MAX and MIN of a plan in the group ('b',): each request names
    the group and the aggregate's column, and the releases are the draws made one
    aggregate after another from the same random source."""
    plan = _plan("SELECT kind, MEDIAN(score), MAX(age), COUNT(*), MIN(score) FROM t "
                 "GROUP BY kind", model="dp", sensitivity="instance", epsilon=1)
    ages = sorted(float(v) for v in [3, 1, 4, 1, 5, 9, 2, 6])
    by_column = {"score": VALUES, "age": ages}
    group = GroupStats(columns={c: ColumnStats(n=len(v)) for c, v in by_column.items()})
    released, asked = _answered(instance_releases(plan, group, 1, SeededSource(3), ("b",)),
                                by_column)
    assert set(released) == {0, 1, 3}  # the aggregates' indexes: COUNT(*) is not drawn
    assert {(r.column, r.group) for r in asked} == {("score", ("b",)), ("age", ("b",))}
    epsilon = Fraction(1, 2)  # ε over the two groups a record can touch
    score = RULES.tables["t"].columns["score"]
    medians, scores = ranked_grid(score, True), ranked_grid(score, False)
    rng = SeededSource(3)
    years = candidate_grid(0, 10, 1.0, True)
    # MAX of ages (every integer a candidate) aims K ranks below the top, at most a tenth
    # of n; MIN of scores (log-spaced candidates) by the scaled distance, t = 1 + that
    assert scores.log_spaced and not years.log_spaced
    top = len(ages) - min(extreme_offset(epsilon, 1, years), len(ages) // 10)
    bottom = 1 + min(extreme_offset(epsilon, 1, scores), len(VALUES) // 10)
    one_by_one = [
        by_hand(instance_release(len(values), rank, 1, epsilon, grid, rng, scaled=scaled),
                values)
        for values, rank, grid, scaled in (
            (VALUES, percentile_rank(len(VALUES), Fraction(1, 2)), medians, None),
            (ages, top, years, None), (VALUES, bottom, scores, Scaled(8, False)))]
    assert [released[0], released[1], released[3]] == one_by_one


def test_the_smooth_sensitivity_and_the_private_bound_ask_only_for_ranks():
    """No GROUP BY: each asks for runs of ranks of its aggregates' columns (MAX from the
    top), in the whole scope, and is answered from the list."""
    group = GroupStats(columns={"score": ColumnStats(n=len(VALUES))})
    for asking in (
            smooth_sensitivities(_plan("SELECT MEDIAN(score), MAX(score), MIN(score) FROM t",
                                       model="dp", sensitivity="smooth", epsilon=1, gamma=3),
                                 group, 1),
            private_levels(_plan("SELECT MEDIAN(score), MAX(score), MIN(score) FROM t"),
                           group, 1, 0.01, SeededSource(1))):
        found, asked = _answered(asking, {"score": VALUES})
        assert set(found) == {0, 1, 2} and all(value >= 0 for value in found.values())
        assert all(isinstance(r, RankRequest) and (r.column, r.group) == ("score", ())
                   and 1 <= r.first <= r.last <= len(VALUES) for r in asked)
        assert {r.from_top for r in asked} == {False, True}


def test_a_request_is_a_value():
    """Frozen and hashable: a request can be compared, logged and answered from memory."""
    request = RankRequest("score", 1, 3, group=("b",))
    with pytest.raises(dataclasses.FrozenInstanceError):
        request.first = 2
    assert {request: 1}[RankRequest("score", 1, 3, False, ("b",))] == 1
    assert hash(CountRequest("score", 2.5)) == hash(CountRequest("score", 2.5, ()))
