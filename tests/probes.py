"""What the in-process tests ask an engine: a statement's answers, a query's statistics
and the backend statements that computed them, and a refusal that must cost nothing."""

from __future__ import annotations

import pytest

from proxy.analyze import analyze, parse_statements
from proxy.engine import Engine
from proxy.errors import Refused
from proxy.session import Session
from proxy.settings import Settings


def run(session, sql: str) -> list:
    """Every answer of ``sql`` (its statements') in ``session``."""
    return list(session.execute(sql))


def recorded_statistics(engine: Engine, sql: str, model: str = "idp"):
    """The shift, the groups' statistics and keys of ``sql`` through the engine, and
    each backend statement it ran with the number of rows it returned."""
    plan = analyze(parse_statements(sql)[0], engine.rules, Settings(model=model))
    statements: list[tuple[str, int]] = []
    with engine.view(plan) as view:
        execute = view.tx.execute

        def recording(text, params=()):
            rows = execute(text, params)
            statements.append((text, len(rows)))
            return rows

        view.tx.execute = recording
        shift, groups, _ = engine.statistics(plan, view)
        keys = view.plan.group_keys() if plan.group_by else [()]
    return shift, groups, keys, statements


def counted_rows(group) -> int:
    """The rows in a group's scope as a COUNT(*) over a chain or a join reads them: its
    ladder's clipped sum at the top rung (each unit's rows in scope, at most the top,
    c: none clipped there). Such a COUNT is released from its ladder alone; no pass of
    row counts runs beside it (``ladders_alone``)."""
    (ladder,) = [ladder for contribution, ladder in group.ladders.items()
                 if contribution.power == 0 and not contribution.column]
    return round(ladder.clipped[-1])


def refused_for_free(engine: Engine, sql: str, sqlstate: str, fragment: str) -> None:
    """``sql`` is refused with ``sqlstate`` in one line holding ``fragment``, and the
    ledger (entries and budgets) is unchanged."""
    before = engine.ledger.entries(), engine.ledger.budgets()
    with pytest.raises(Refused) as refused:
        list(Session.open(engine, "alice").execute(sql))
    assert (engine.ledger.entries(), engine.ledger.budgets()) == before
    message = str(refused.value)
    assert refused.value.sqlstate == sqlstate and fragment in message, message
    assert "\n" not in message
