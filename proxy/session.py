"""One analyst's session: a message of SQL in, answers with privacy metadata out.

Flow (SPEC §4): analyze every statement first (a refused statement refuses the whole
message, nothing spent) → for each private query, in one snapshot of the backend (the
engine's view, the data version read once): look the answer up in the answer cache (a
read); else debit the ledger (its own transaction, committed), have the engine compute
and release it, cache it (one more transaction), and format the answer with the privacy
metadata clients see.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field, replace
from decimal import Decimal
from fractions import Fraction
from typing import Any, Protocol

from sqlglot import exp
from sqlglot.tokens import Token

from proxy.analyze import (
    analyze,
    check_size,
    parse_tokens,
    refuse_beyond_backend,
    statement_tokens,
)
from proxy.analyze.canonical import canonical_sql
from proxy.analyze.constants import reads_clock
from proxy.analyze.explain import explain_rest, explained
from proxy.analyze.ordering import sorted_rows
from proxy.analyze.outer import UNIONED, OuterQuery, RankedSeries, SeriesLimit
from proxy.analyze.shapes import ShapeCache, shape_of
from proxy.analyze.staged import fill_released, put_back, released_as_lists, with_values
from proxy.analyze.time_keys import next_start
from proxy.backends.base import Backend
from proxy.errors import (
    BackendFailed,
    BackendUnavailable,
    NotSupported,
    SyntaxProblem,
)
from proxy.interrupts import checkpoint
from proxy.ledger import NOT_COMPUTED, UNREACHABLE, Charge, Ledger
from proxy.loss import Loss
from proxy.pgtypes import RULE_TYPES
from proxy.postbounds import ADDITIVE
from proxy.postprocess import NotComputed, run_outer, series_limited
from proxy.privacy import refuse_unanswerable
from proxy.privacy.consistency import consistent_rows
from proxy.privacy.noisy_answers import Released
from proxy.privacy.partition_selection import SELECTION_SHARE, selection_of
from proxy.result_types import (
    INT_RANGES,
    aggregate_type,
    argument_type,
    fitted,
    key_type,
    statement_types,
)
from proxy.rules import Rules, key_text
from proxy.setting_scopes import LOCAL_OUTSIDE, ScopeEvent, SettingScopes
from proxy.settings import (
    DEFAULT_GAMMA,
    SessionCommand,
    Settings,
    apply_command,
    default_noise,
    default_sensitivity,
    epsilon_hint,
    session_command,
)
from proxy.timing import padded
from proxy.vocabulary import (
    COUNT,
    MAX,
    MIN,
    PUBLIC,
    SELECTED,
    SUM,
    TIME_TRUNC,
    UNITS,
    CombinedPlan,
    GroupingSetsPlan,
    Moment,
    PassthroughPlan,
    QueryPlan,
    StagedPlan,
    TopChoice,
)

log = logging.getLogger("idp_proxy.session")


@dataclass(frozen=True)
class Explained:
    """EXPLAIN of a statement: its checked step, shown, never run."""

    step: tuple[str | None, Any]


# the idp.* settings SHOW ALL lists, each with what it does (docs/clients.md)
IDP_SETTINGS = {
    "idp.budget": "the ε left of your budget (read only)",
    "idp.epsilon": "ε spent by each query (SET idp.epsilon = 0.05)",
    "idp.model": "privacy model: 'idp' (individual DP) or 'dp'",
    "idp.sensitivity": "DP's noise scale: 'global', 'smooth', 'instance' or 'piecewise'",
    "idp.gamma": "the smooth sensitivity's γ (with idp.sensitivity = 'smooth')",
    "idp.intervals": "on: each aggregate gets its 95 % error bounds as two more columns",
    "idp.prior": "the prior of an individual query, e.g. 'uniform(0, 200000)'",
    "idp.noise": "DP's noise of COUNT, SUM and AVG: 'laplace' or 'gaussian' (zcdp only)",
}


@dataclass
class Answer:
    """One statement's result: rows for the client, and the privacy metadata."""

    command: str
    columns: list[str] = field(default_factory=list)
    rows: list[tuple] = field(default_factory=list)
    privacy: dict[str, Any] | None = None
    notice: str | None = None
    kinds: list[str] = field(default_factory=list)  # per column, as Session.describe says


class Answering(Protocol):
    """What a session asks of the engine that made it (proxy.engine.Engine)."""

    rules: Rules
    backend: Backend
    ledger: Ledger
    shapes: ShapeCache

    def view(self, plan: QueryPlan) -> AbstractContextManager[Any]: ...
    def cached(self, analyst: str, plan: QueryPlan, charge: Charge,
               view: Any) -> dict[str, Any] | None: ...
    def replay(self, analyst: str, plan: QueryPlan,
               charge: Charge) -> dict[str, Any] | None: ...
    def answer(self, plan: QueryPlan, view: Any = None
               ) -> tuple[list[tuple], list[list[Released]], str | None]: ...
    def remember(self, analyst: str, plan: QueryPlan, charge: Charge, version: str | None,
                 answer: dict[str, Any], view: Any = None) -> dict[str, Any]: ...


class _Joint:
    """The releases of one staged statement paid for as one charge: one ledger row of
    their ε (and δ, ρ) together, its label each part's mechanism in order ("…; then
    …"), its hash the statement's (docs/privacy.md §3.16, docs/budget.md). It is debited
    when the first part is computed, for that part and every part after it, so a budget
    short of them all refuses before anything is computed. A part answered from the
    answer cache before that costs nothing and is not in it; the parts charged and then
    not computed (answered from the cache, with no group, or never reached: a refusal,
    a cancel or an outage before their statistics) are given back in one refund row,
    ``refunded: not computed`` (an outage's: ``refunded: backend unreachable``). A part
    whose statistics were read stays spent: its release is what the statement's later
    steps, answer or refusal, are a function of. A statement answered wholly from the
    cache gets one ``served from cache`` row. Stands in for the ledger's ``debit``,
    ``served_from_cache`` and ``refund`` in ``Session._compute``, which answers the
    parts one after another in ``parts``' order."""

    def __init__(self, ledger: Ledger, analyst: str, sql: str, parts: list[QueryPlan]) -> None:
        self.ledger, self.analyst, self.sql, self.parts = ledger, analyst, sql, parts
        self.step = 0  # the part answered next
        self.charge: Charge | None = None
        self.left: Decimal | None = None  # what remains, as the debit read it
        self.why = NOT_COMPUTED
        self.back = Loss.of(0)  # charged, not computed
        self.repeated = False  # some part answered from the answer cache

    def _of(self, parts: list[QueryPlan], loss: Loss) -> Charge:
        return Charge(self.analyst, self.sql, parts[0].mechanism.model,
                      "; then ".join(_mechanism(p) for p in parts), loss,
                      "; ".join(dict.fromkeys(_neighbour(p) for p in parts)))

    def debit(self, _charge: Charge) -> Decimal:
        """The part about to be computed: the one debit, if not made yet, for it and the
        later parts that have groups to answer (one whose WHERE admits none of its keys
        costs nothing, wherever it stands: ``no_groups``). A part priced at nothing is
        never computed: refused (a staged statement's last step is analysed again with
        the released values, ``staged._held`` makes its keys a superset of theirs)."""
        if self.charge is None:
            parts = self.parts[self.step:]
            charge = self._of(parts, sum((p.loss for p in parts[1:] if not no_groups(p)),
                                         parts[0].loss))
            self.left = self.ledger.debit(charge)  # BudgetExhausted: nothing charged
            self.charge = charge
        elif no_groups(self.parts[self.step]):  # priced at nothing, now to be computed:
            raise NotSupported(  # never computed unpaid (a staged statement's keys)
                "the statement's last step answers groups its first debit did not pay "
                "for; ask its subquery on its own first")
        self.step += 1
        return self.left

    def served_from_cache(self, _charge: Charge, _tx: Any = None) -> Decimal:
        """The part about to be computed is a repeat: nothing to pay."""
        self.repeated = True
        self.free()
        return self.left if self.left is not None else self.ledger.remaining(self.analyst)

    def free(self) -> None:
        """The part about to be computed costs nothing: given back if charged (a part
        with no group never was)."""
        part = self.parts[self.step]
        if self.charge is not None and not no_groups(part):
            self.back += part.loss
        self.step += 1

    def refund(self, _charge: Charge) -> None:
        """The part being computed met an outage before its statistics were read: it and
        the parts after it are given back (``settle``)."""
        self.step -= 1
        self.why = UNREACHABLE

    def settle(self, answered: bool) -> Decimal:
        """At the statement's end: what was charged and not computed given back, a
        statement answered wholly from the cache recorded; what remains."""
        if self.charge is None:
            if answered and self.repeated:  # every priced part from the cache (the others
                # had no group: a statement of no group at all reads and records nothing)
                return self.ledger.served_from_cache(self._of(self.parts, Loss.of(0)))
            return self.ledger.remaining(self.analyst) if answered else Decimal(0)
        for part in self.parts[self.step:]:
            if not no_groups(part):
                self.back += part.loss
        self.step = len(self.parts)
        if self.back.epsilon or self.back.delta:  # ρ back: what leaves the kept part's
            kept = self.charge.loss.rho - self.back.rho  # ρ as a debit of it rounds it
            back = Loss(self.back.epsilon, self.back.delta, Fraction(
                self.charge.loss.spent_rho) - Fraction(Loss.of(0, 0, kept).spent_rho))
            self.ledger.refund(replace(self.charge, loss=back), self.why)
            self.back = Loss.of(0)
            return self.ledger.remaining(self.analyst)
        return self.left


class Session:
    """One analyst's connection: settings live here, budget lives in the ledger."""

    def __init__(self, engine: Answering, analyst: str) -> None:
        self.engine = engine
        self.analyst = analyst
        self.settings = Settings()
        self._scopes: SettingScopes[Settings] = SettingScopes()
        # one private query's text -> (the settings it was checked under, its step):
        # the same text under the same settings is the same step (``known``)
        self._checked: dict[str, tuple[Settings, tuple[str | None, Any]]] = {}
        self._last_charge: tuple[QueryPlan, str, Charge] | None = None

    @classmethod
    def open(cls, engine: Answering, analyst: str) -> Session:
        """The session of an analyst who connects: their budget row exists from now on."""
        engine.ledger.ensure_analyst(analyst)
        return cls(engine, analyst)

    def execute(self, sql: str) -> Iterator[Answer]:
        """Run a message or script; every statement is checked before the first runs,
        so a refused statement refuses the whole message and nothing is spent."""
        steps = self.check(sql)
        for step in steps:
            yield self.run(step)

    def describe(self, sql: str) -> list[tuple[str, str]] | None:
        """The (name, kind) of each result column of one statement, found without
        running it (None: no result rows, e.g. SET). A kind is a PostgreSQL type name
        (proxy.pgtypes)."""
        _, work = self.check(sql)[-1]
        if isinstance(work, Explained):
            return [("QUERY PLAN", "text")]
        if isinstance(work, SessionCommand):
            return [(work.name.split(".")[-1], "text")] if work.show else None
        if isinstance(work, GroupingSetsPlan):  # the first set groups by the most
            work = work.parts[0][1]
        if isinstance(work, StagedPlan) and isinstance(work.held, PassthroughPlan):
            work = work.held  # a TopChoice's statement: over public tables and a row
        if isinstance(work, PassthroughPlan):
            probe = exp.select("*").from_(work.sql.subquery("q")).limit(0)
            columns, _ = self.engine.backend.query_with_columns(
                probe.sql(dialect=self.engine.backend.dialect))
            return self._as_postgresql(work, columns)
        columns = _post_columns(work)
        if self.settings.intervals and isinstance(work, QueryPlan) and not isinstance(
                work.post, OuterQuery):
            columns = [pair for o, column in zip(work.outputs, columns) for pair in
                       [column] + ([(f"{o.name}_ci95_low", _FLOAT),
                                    (f"{o.name}_ci95_high", _FLOAT)] if o.aggregate is not
                                   None else [])]
        return columns

    def _as_postgresql(self, work: PassthroughPlan, columns: list[tuple[str, str]]
                       ) -> list[tuple[str, str]]:
        """A statement over public tables as run on the backend, its columns typed as
        PostgreSQL types them where the backend is another engine (DuckDB's SUM of an
        integer is its HUGEINT, PostgreSQL's bigint): ``result_types.statement_types``
        where it types an item, else the backend's type. PostgreSQL's own stand."""
        if self.engine.backend.dialect == "postgres":
            return columns
        typed = statement_types(work.sql, self.engine.rules.tables)
        if len(typed) != len(columns):
            return columns
        return [(name, pg or kind) for (name, kind), pg in zip(columns, typed)]

    def check(self, sql: str) -> list[tuple[str | None, Any]]:
        step = self.known(sql)
        if step is not None:
            return [step]
        steps = self.check_statements([(sql, tokens, None) for tokens in statement_tokens(sql)])
        self.know(sql, steps)
        return steps

    def known(self, sql: str) -> tuple[str | None, Any] | None:
        """The step of one private query checked before as this text under the current
        settings (no tokenising, no shape cache); None if it was not."""
        kept = self._checked.get(sql)
        return kept[1] if kept is not None and kept[0] is self.settings else None

    def know(self, sql: str, steps: list[tuple[str | None, Any]]) -> None:
        """Keep the steps ``sql`` was checked to under the current settings, if it is one
        private query or one over public tables only (``known``)."""
        if len(steps) != 1 or not isinstance(steps[0][1], (QueryPlan, PassthroughPlan)) \
                or (steps[0][0] is not None and reads_clock(steps[0][0])):
            return  # NOW(): its plan holds the moment it was read at
        if len(sql) > _CHECKED_LONGEST:
            return  # its plan is large (an IN list of 9,000 values: 7 MB) and rarely sent again
        if len(self._checked) >= _CHECKED_KEPT or \
                sum(map(len, self._checked)) + len(sql) > _CHECKED_CHARS:
            self._checked.clear()
        self._checked[sql] = (self.settings, steps[0])

    def check_statements(self, statements: Sequence[tuple[str, Sequence[Token],
                                                          exp.Expression | None]],
                         zones: Sequence[str] | None = None) -> list[tuple[str | None, Any]]:
        """Each statement's work (a session command or a plan) with, for a private
        query, its canonical SQL. A statement is (text, its tokens, its tree if parsed
        already); its plan comes from the shape cache (proxy.analyze.shapes), else from
        parsing (unless done) and analysing it. In a message of several statements a
        syntax error anywhere is reported first, before any analysis refuses. ``zones``:
        the TimeZone of each statement, where the message sets it between them."""
        if not statements:
            raise SyntaxProblem("empty query; send one SELECT with aggregates")
        for _, tokens, _ in statements:
            check_size(tokens)
        checkpoint()
        rules, shapes = self.engine.rules, self.engine.shapes
        if len(statements) > 1:  # a known shape parsed before: it has no syntax error
            statements = [(text, tokens, tree or (None if shapes.knows(tokens)
                                                  else parse_tokens(list(tokens), text)))
                          for text, tokens, tree in statements]
        settings = self.settings
        steps: list[tuple[str | None, Any]] = []
        for index, (text, tokens, tree) in enumerate(statements):
            if zones is not None and zones[index] != settings.time_zone:
                settings = replace(settings, time_zone=zones[index])
            # a prior's text is no part of its equality, but plans show it
            shape = shape_of(tokens)
            context = (self.analyst, settings, settings.prior and settings.prior.text)
            kept = shapes.plan(shape, context, rules)
            if kept is not None:
                steps.append(kept)
                continue
            tree = tree or parse_tokens(list(tokens), text)
            command = session_command(tree)
            if command is not None:
                settings = apply_command(settings, command)
                steps.append((None, command))
                continue
            rest = explain_rest(tree)
            if rest is not None:
                steps.append((None, self._explained(rest, settings)))
                continue
            work = analyze(tree, rules, settings, epsilon_hint(tree))
            for plan in _plans(work):
                if isinstance(plan, QueryPlan):
                    refuse_unanswerable(plan)
                refuse_beyond_backend(plan, self.engine.backend.capabilities)
            if isinstance(work, (QueryPlan, CombinedPlan)) or (
                    isinstance(work, StagedPlan) and isinstance(work.held, QueryPlan)):
                _post_columns(work)  # before any debit: what its engine cannot bind
            if isinstance(work, PassthroughPlan):  # kept for this very statement
                shapes.remember_public(shape, context, rules, work)
            steps.append((shapes.remember(shape, context, rules, tree, work), work)
                         if isinstance(work, QueryPlan) else (canonical_sql(tree), work)
                         if isinstance(work, (GroupingSetsPlan, CombinedPlan)) else
                         (None, work))  # (the text of their one charge, ``_jointly``)
        return steps

    def _explained(self, rest: str, settings) -> Explained:
        """The step of the statement EXPLAIN wraps, checked as if sent (so it is refused
        as it would be), under the settings the message has set by then."""
        inner = explained(rest)
        kept, self.settings = self.settings, settings
        try:
            steps = self.check_statements([(inner, tokens, None)
                                           for tokens in statement_tokens(inner)])
        finally:
            self.settings = kept
        if len(steps) != 1 or isinstance(steps[0][1], (SessionCommand, Explained)):
            raise SyntaxProblem("EXPLAIN takes one SELECT: EXPLAIN SELECT COUNT(*) FROM t")
        return Explained(steps[0])

    def replay_now(self, step) -> Answer | None:
        """The answer of a repeat of a private query when memory alone can give it (the
        answer cache's entry under a data version still current, what the analyst has
        left known: ``Engine.replay``, ``Ledger.served_now``), its row kept as any
        replay's; None when the backend must be asked (then ``run`` it). Never under a
        time quantum: the padding sleeps."""
        canonical, plan = step
        if (not isinstance(plan, QueryPlan) or self.engine.rules.defaults.time_quantum_ms
                or no_groups(plan)):
            return None
        charge = self._replay_charge(canonical, plan)
        stored = self.engine.replay(self.analyst, plan, charge)
        remaining = None if stored is None else self.engine.ledger.served_now(charge)
        if remaining is None:
            return None
        answer = self._restored_repeat(stored, remaining, plan)
        return _with_intervals(answer) if self.settings.intervals else answer

    def run(self, step) -> Answer:
        canonical, work = step
        if isinstance(work, SessionCommand):
            return self._session_command(work)
        if isinstance(work, Explained):
            return self._explain(work.step[1])
        if isinstance(work, PassthroughPlan):
            columns, rows = self.engine.backend.query_with_columns(
                work.text(self.engine.backend.dialect))
            columns = self._as_postgresql(work, columns)
            return Answer(f"SELECT {len(rows)}", [name for name, _ in columns], rows,
                          notice=work.note, kinds=[kind for _, kind in columns])
        if isinstance(work, GroupingSetsPlan):
            answer = self._grouping_sets(canonical, work)
        elif isinstance(work, CombinedPlan):
            answer = self._combined(canonical, work)
        elif isinstance(work, StagedPlan):
            answer = self._staged(work)
        else:
            answer = self._private(canonical, work)
        return _with_intervals(answer) if self.settings.intervals else answer

    def _grouping_sets(self, canonical: str, work: GroupingSetsPlan) -> Answer:
        """Each grouping set's query answered as it would be on its own, all paid for as
        one charge (``_jointly``), their rows one set after another, then ORDER BY and
        LIMIT over all of them; the metadata: the sets' ε added up, their bounds row by
        row, their notes."""
        answers = self._jointly(canonical, work.parts)
        consistent = consistent_rows([plan for _, plan in work.parts],
                                     [answer.rows for answer in answers],
                                     [answer.privacy["ci95"] for answer in answers],
                                     answers[0].columns)
        rows = [row for set_rows in (consistent or [a.rows for a in answers])
                for row in set_rows]
        bounds = {name: [b for answer in answers for b in answer.privacy["ci95"][name]]
                  for name in answers[0].privacy["ci95"]}
        order = sorted_rows(rows, work.order)
        order = order[: work.limit] if work.limit is not None else order
        kinds = [next((answer.kinds[j] for answer in answers  # a set grouping by it
                       if any(row[j] is not None for row in answer.rows)), answers[0].kinds[j])
                 for j in range(len(answers[0].columns))]
        privacy = _together(answers, answers[-1].privacy, ci95={
            name: [values[i] for i in order] for name, values in bounds.items()},
            notes=[*_notes(answers), _GROUPING_SETS.format(len(answers)),
                   *([_CONSISTENT_COUNTS] if consistent else [])])
        return Answer(f"SELECT {len(order)}", answers[0].columns, [rows[i] for i in order],
                      privacy, _notice(privacy), kinds)

    def _jointly(self, canonical: str, parts) -> list[Answer]:
        """Each (canonical, plan) of ``parts`` answered as it would be on its own, all
        paid for as one charge of the statement's (``_paid_jointly``): a budget short of
        them all refuses before any is computed, not after the first were charged. The
        last answer's remaining ε is what the charge left."""
        answers, left = self._paid_jointly(
            canonical, [plan for _, plan in parts],
            lambda joint: [self._private(text, plan, joint) for text, plan in parts])
        answers[-1].privacy["epsilon_remaining"] = float(left)
        return answers

    def _paid_jointly(self, canonical: str, parts: list[QueryPlan], answered):
        """``answered(joint)``, its releases (``parts``, in order) paid through one
        ``_Joint`` under the statement's ``canonical`` text, settled however it ends;
        and what remains after the charge."""
        joint = _Joint(self.engine.ledger, self.analyst, canonical, parts)
        try:
            result = answered(joint)
        except BaseException:
            joint.settle(answered=False)
            raise
        return result, joint.settle(answered=True)

    def _combined(self, canonical: str, work: CombinedPlan) -> Answer:
        """Each one-row release answered (and charged) as it would be on its own, then
        the outer query over them, all paid for as one charge (``_Joint``: a budget short
        of them all refuses before any is computed); the metadata: their ε added up,
        their notes."""
        answers = self._jointly(canonical, work.parts)
        privacy = _together(answers, answers[-1].privacy, notes=_notes(answers))
        if isinstance(work.post, RankedSeries):
            return _ranked_series(work.post, *answers, privacy)
        return _outer_answer(work.post, answers, privacy)

    def _staged(self, work: StagedPlan) -> Answer:
        """Each scalar subquery answered as it would be on its own, then the statement
        with their released values in their places (proxy.analyze.staged), all paid for
        as one charge (``_Joint``); the metadata: their ε added up, what each subquery
        released. The statement's public GROUP BY keys are read first: too many refuse
        it before anything is spent, not after its subqueries were computed."""
        engine = self.engine
        if isinstance(work.held, QueryPlan) and any(term.kind == PUBLIC
                                                    for term in work.held.group_by):
            with engine.view(work.held):
                pass
        if isinstance(work.held, PassthroughPlan):
            _planned_before_the_debit(engine, work.held)
        parts = [plan for _, plan in work.stages] + (
            [work.held] if isinstance(work.held, QueryPlan) else [])
        answer, left = self._paid_jointly(canonical_sql(work.statement), parts,
                                          lambda joint: self._stages_answered(work, joint))
        privacy = dict(answer.privacy, epsilon_remaining=float(left))
        return replace(answer, privacy=privacy, notice=_notice(privacy))

    def _stages_answered(self, work: StagedPlan, joint: _Joint) -> Answer:
        """``_staged``'s releases, each paid through ``joint``."""
        answers = [self._private(canonical, plan, joint) for canonical, plan in work.stages]
        public = isinstance(work.held, PassthroughPlan)  # its released rows compact
        statement = with_values(work, [answer.rows for answer in answers], self.engine.rules,
                                compact=public)
        written = None if public else canonical_sql(statement)  # before it is handed over
        plan = analyze(statement, self.engine.rules, self.settings, epsilon_hint(statement),
                       owned=True)  # this call's own tree, not read after
        released = "; ".join(_stage_note(canonical, answer, keyed)
                             for (canonical, _), answer, keyed in zip(work.stages, answers,
                                                                      work.keyed))
        if isinstance(work.held, PassthroughPlan) and isinstance(plan, PassthroughPlan):
            if isinstance(work.stages[0][1].post, TopChoice):
                return self._top_choice(plan, answers[0])
            return self._public_after(plan, answers, released)
        if not (isinstance(plan, QueryPlan) and isinstance(work.held, QueryPlan)) \
                or plan.loss != work.held.loss:  # what the one debit was made for
            raise NotSupported("the statement with its subqueries' values is not the "
                               "aggregate query it was with 0 in their places")
        final = self._private(written, plan, joint)
        privacy = _together([*answers, final], final.privacy,
                            notes=[*final.privacy["notes"], _STAGED.format(released)])
        return Answer(final.command, final.columns, final.rows, privacy, _notice(privacy),
                      final.kinds)

    def _public_after(self, plan: PassthroughPlan, answers: list[Answer], released: str
                      ) -> Answer:
        """A statement over public tables once its subqueries' releases stand in their
        places (TPC-H Q20: suppliers of the parts whose stock exceeds half a year's noisy
        shipments), run as written: post-processing of the releases, charged nothing
        more; the metadata: theirs, ε added up, no bounds (its columns are public)."""
        # the plan is this call's own: written out without a copy (Q20's VALUES, 8,508 rows)
        backend = self.engine.backend
        listed = released_as_lists(plan.sql) if backend.capabilities.released_lists else None
        if listed is None:
            fill_released(plan.sql)  # the rows ``with_values`` kept aside, in the VALUES
        sql = plan.sql.sql(dialect=backend.dialect, copy=False)
        if listed is not None and "%s" in sql:  # the backend would read a literal's %s
            put_back(listed[0])  # as a placeholder: the VALUES as written
            fill_released(plan.sql)
            listed, sql = None, plan.sql.sql(dialect=backend.dialect, copy=False)
        columns, rows = backend.query_with_columns(sql, listed[1] if listed else ())
        names = [name for name, _ in columns]
        privacy = _together(answers, answers[-1].privacy, ci95={},
                            notes=[*_notes(answers), _STAGED.format(released), _PUBLIC_AFTER])
        return Answer(f"SELECT {len(rows)}", names, rows, privacy, _notice(privacy),
                      [kind for _, kind in columns])

    def _top_choice(self, plan: PassthroughPlan, release: Answer) -> Answer:
        """The statement over public tables and the released row of its step's largest
        group (``proxy.analyze.staged.top_choice_plan``), run as written (it reads
        nothing private but the release); the metadata: the release's, its 95 % bound
        on the column of the released value's name."""
        columns, rows = self.engine.backend.query_with_columns(
            plan.sql.sql(dialect=self.engine.backend.dialect))
        names = [name for name, _ in columns]
        bounds = release.privacy["ci95"]
        privacy = dict(release.privacy, ci95={
            name: [bound for bound in bounds[name][:1] for _ in rows]
            for name in names if name in bounds},
            notes=[*release.privacy["notes"], _TOP_CHOICE])
        return Answer(f"SELECT {len(rows)}", names, rows, privacy, _notice(privacy),
                      [kind for _, kind in columns])

    def _explain(self, work) -> Answer:
        """EXPLAIN's rows: each release the statement would make (its mechanism and
        aggregates, as the ledger labels them, and its ε), and their total against what
        the analyst has left. From the plan alone: nothing read, nothing spent."""
        zcdp = self.engine.rules.defaults.accounting == "zcdp"
        if isinstance(work, PassthroughPlan):
            lines = [f"no release: {work.note or 'public tables only, answered as written'}; "
                     "no epsilon"]
        else:
            lines, total = [], Loss.of(0)
            releases = [plan for plan in _plans(work) if isinstance(plan, QueryPlan)]
            for index, plan in enumerate(releases, 1):
                if no_groups(plan):
                    lines.append(f"release {index}: none (the WHERE admits none of the "
                                 "GROUP BY keys), nothing spent")
                    continue
                groups = ", ".join(term.name for term in plan.group_by)
                lines.append(f"release {index}: {_mechanism(plan)} over {plan.table.name}"
                             + (f" by {groups}" if groups else "")
                             + f"; {_spending(plan.loss, zcdp)}")
                total += plan.loss
            lines.append(f"total: {_spending(total, zcdp)} of "
                         f"{self.engine.ledger.remaining(self.analyst)} epsilon left")
        lines.append("EXPLAIN read and spent nothing; an answer given before over data "
                     "unchanged since is replayed free")
        return Answer("EXPLAIN", ["QUERY PLAN"], [(line,) for line in lines], kinds=["text"])

    def scoped(self, event: ScopeEvent) -> None:
        """A transaction statement of the connection's: the settings it brings back."""
        self.settings = self._scopes.play(event, self.settings)

    def reset_all(self) -> None:
        """RESET ALL and DISCARD ALL: every idp.* setting back to the rules' default."""
        self._session_command(SessionCommand("all"))

    def _session_command(self, command: SessionCommand) -> Answer:
        if not command.show:
            def change(settings: Settings) -> Settings:
                return apply_command(settings, command)

            tag = "RESET" if command.value is None else "SET"
            after = change(self.settings)  # a bad value refused whatever the scope
            if not self._scopes.changed(change, command.local):
                return Answer(tag, notice=LOCAL_OUTSIDE)
            self.settings = after
            return Answer(tag)
        value = self._show(command.name)
        return Answer("SHOW", [command.name.split(".")[-1]], [(value,)], kinds=[_TEXT])

    def show_all(self) -> list[tuple[str, str, str]]:
        """The idp.* settings (name, current value, description), as SHOW ALL lists
        them beside the ordinary ones."""
        return [(name, self._show(name), description)
                for name, description in IDP_SETTINGS.items()]

    def _show(self, name: str) -> str:
        rules = self.engine.rules
        if name == "idp.budget":
            return str(self.engine.ledger.remaining(self.analyst))
        if name == "idp.epsilon":
            return str(self.settings.epsilon or rules.defaults.epsilon_per_query)
        if name == "idp.model":
            return self.settings.resolve_model(rules)
        if name == "idp.intervals":
            return "on" if self.settings.intervals else "off"
        if name == "idp.gamma":
            return f"{self.settings.gamma or DEFAULT_GAMMA:g}"
        if name == "idp.prior":
            return self.settings.prior.text if self.settings.prior else ""
        if name == "idp.noise":
            return self.settings.noise or default_noise(self.settings.resolve_model(rules), rules)
        if name == "idp.sensitivity":
            return self.settings.sensitivity or default_sensitivity(
                self.settings.model or rules.defaults.model, rules)
        if name == "timezone":
            return self.settings.time_zone
        return dict(self.settings.other).get(name, "")

    def _private(self, canonical: str, plan: QueryPlan, joint: _Joint | None = None
                 ) -> Answer:
        """A cached answer if there is one (no debit); else debit, compute, release and
        cache (a racing session's answer, stored first, wins). All of it inside the time
        quantum, if the rules set one. ``joint``: a part of a statement paid for as one
        charge, which records its debit, repeat or refund instead of the ledger."""
        with padded(self.engine.rules.defaults.time_quantum_ms):
            return self._compute(canonical, plan, joint or self.engine.ledger)

    def _compute(self, canonical: str, plan: QueryPlan, bill: Ledger | _Joint) -> Answer:
        engine = self.engine
        if no_groups(plan):
            if isinstance(bill, _Joint):
                bill.free()
            return self._no_groups(canonical, plan)
        charge = self._charge(canonical, plan, plan.loss)
        debited = storing = False
        stored = engine.replay(self.analyst, plan, charge)  # memory, version read just now
        if stored is not None:
            return self._repeated(stored, charge, None, bill, plan)
        try:
            ledger = bill if bill is engine.ledger else None  # a part's repeat reads none
            with engine.view(plan, engine.expected(self.analyst, plan, charge,
                                                   ledger)) as view:
                stored = engine.cached(self.analyst, plan, charge, view)
                if stored is not None:  # its row kept for the ledger before it is sent
                    same = engine.ledger.backend is engine.backend
                    return self._repeated(stored, charge, view.tx if same else None, bill,
                                          plan)
                remaining = bill.debit(charge)  # committed before any statistic
                debited = True
                keys, released, version = engine.answer(plan, view)
                if isinstance(plan.post, SeriesLimit):
                    keys, released = series_limited(plan.post, keys, released)
                answer = _answer(plan, keys, released, charge, remaining)
                if isinstance(plan.post, OuterQuery):
                    answer = _outer_answer(plan.post, [answer], answer.privacy)
                answer = _cacheable(answer)
                # the entry's write ends the view (one round trip on PostgreSQL); from
                # here on the answer may be kept, so nothing is refunded
                storing = True
                sent = engine.remember(self.analyst, plan, charge, version, answer, view)
        except BackendUnavailable:
            if debited and not storing:
                bill.refund(charge)
            raise
        except BackendFailed as exc:
            if debited and not storing and type(exc) is BackendFailed:
                _totality_failure(canonical)
            raise
        return _restored(sent, charge.loss.spent, charge.loss.spent_delta, remaining,
                         rho=self._rho(charge.loss.spent_rho))

    def _repeated(self, stored: dict[str, Any], charge: Charge, tx: Any,
                  bill: Ledger | _Joint, plan: QueryPlan) -> Answer:
        """A repeat from the answer cache: its ledger row kept (written in a batch,
        ``Ledger.served_from_cache``), what remains read in ``tx`` if given."""
        return self._restored_repeat(stored, bill.served_from_cache(charge, tx), plan)

    def _restored_repeat(self, stored: dict[str, Any], remaining: Decimal,
                         plan: QueryPlan) -> Answer:
        """The stored release, its columns typed as the plan types them now (an entry
        stored before the types were PostgreSQL's holds the older ones); an outer
        query's answer (stored post-processed) as it was stored."""
        answer = _restored(stored, Decimal(0), Decimal(0), remaining, _FROM_CACHE,
                           rho=self._rho(Decimal(0)))
        if isinstance(plan.post, OuterQuery):
            return answer
        return replace(answer, kinds=[_output_kind(plan, o) for o in plan.outputs])

    def _replay_charge(self, canonical: str, plan: QueryPlan) -> Charge:
        """The charge of a repeat (its ledger row's fields), the last one kept: a plan's
        loss is computed in exact fractions."""
        last = self._last_charge
        if last is None or last[0] is not plan or last[1] != canonical:
            last = self._last_charge = (plan, canonical, self._charge(canonical, plan,
                                                                      plan.loss))
        return last[2]

    def _charge(self, canonical: str, plan: QueryPlan, loss: Loss) -> Charge:
        return Charge(self.analyst, canonical, plan.mechanism.model, _mechanism(plan), loss,
                      _neighbour(plan))

    def _rho(self, spent: Decimal) -> tuple[Decimal, Decimal] | None:
        """Under the zcdp accountant, (ρ spent, δ) for the answer's metadata."""
        defaults = self.engine.rules.defaults
        return (spent, defaults.accounting_delta) if defaults.accounting == "zcdp" else None


    def _no_groups(self, canonical: str, plan: QueryPlan) -> Answer:
        """The answer of a GROUP BY whose WHERE leaves none of the public keys (decided
        by the text: ``proxy.analyze.key_restriction``): no row, and nothing read, charged
        or recorded."""
        charge = self._charge(canonical, plan, Loss.of(0))
        answer = _answer(plan, [], [], charge, self.engine.ledger.remaining(self.analyst))
        answer.privacy["mechanism"] = "none"
        answer.privacy["notes"] = [NO_GROUPS, *answer.privacy["notes"]]
        answer.notice = _notice(answer.privacy)
        if isinstance(plan.post, OuterQuery):
            answer = _outer_answer(plan.post, [answer], answer.privacy)
        return answer


NO_GROUPS = ("the WHERE clause admits none of the GROUP BY keys the rules declare: no group "
             "is answered, nothing was computed and no epsilon spent")


def _spending(loss: Loss, zcdp: bool) -> str:
    """A loss as EXPLAIN shows it: ε, δ where any, and ρ where the ledger debits ρ."""
    return (f"epsilon {loss.spent}" + (f", delta {loss.spent_delta}" if loss.delta else "")
            + (f", rho {loss.spent_rho}" if zcdp else ""))


def _plans(work) -> list[QueryPlan | PassthroughPlan]:
    """The queries a statement's work runs, in the order it computes them (a staged
    statement's last step as held: priced for every key a released value could leave,
    or a statement over public tables)."""
    if isinstance(work, (GroupingSetsPlan, CombinedPlan)):
        return [part for _, part in work.parts]
    if isinstance(work, StagedPlan):
        return [*(part for _, part in work.stages), work.held]
    return [work]


def no_groups(plan: QueryPlan) -> bool:
    """Whether a GROUP BY answers no group by its text: a term's public keys, restricted
    by the WHERE, are none (terms keyed later, from a public table or by a partition
    selection, are not decided yet)."""
    return bool(plan.group_by) and plan.group_count == 0 and all(
        term.kind not in (PUBLIC, SELECTED) for term in plan.group_by)


# Statements whose statistics failed in the backend after the debit, other than by an
# outage, a cancel, a full disk or a lost session: the statistics SQL is total
# (docs/privacy.md §3.6), so each one is a bug and, on values that only some rows
# hold, possibly an oracle. Counted per process (each worker's own), logged as they
# happen and in the server's shutdown line (``proxy.wire.server``).
TOTALITY_FAILURES = 0
_counting = threading.Lock()


def _totality_failure(statement: str) -> None:
    global TOTALITY_FAILURES
    with _counting:
        TOTALITY_FAILURES += 1
        count = TOTALITY_FAILURES
    log.error("totality: the backend failed on the statistics of a charged statement "
              "(%d since start; see the backend error above): %s", count, statement)


def totality_failures() -> int:
    """How many charged statements failed in the backend (``TOTALITY_FAILURES``)."""
    return TOTALITY_FAILURES


def _answer(plan: QueryPlan, keys, released: list[list[Released]], charge: Charge,
            remaining: Decimal) -> Answer:
    rows = []
    kinds = [_output_kind(plan, o) for o in plan.outputs]
    fits = {o.aggregate: kind for o, kind in zip(plan.outputs, kinds)
            if o.aggregate is not None and kind in INT_RANGES}
    aggregates = [o.aggregate for o in plan.outputs if o.aggregate is not None]
    moments = any(_moment(plan, index) is not None for index in aggregates)
    for key, values in zip(keys, released):
        if not moments:  # each as released (``_shown``), none to keep in order
            shown = {index: values[index].value for index in aggregates}
        else:
            shown = _moments_in_order(plan, {index: _shown(plan, index, values[index].value,
                                                           key) for index in aggregates})
        for index, kind in fits.items():  # a released integer within its type's range
            shown[index] = fitted(shown[index], kind)
        rows.append(tuple(plan.group_by[o.group].shown(key[o.group]) if o.group is not None
                          else shown[o.aggregate] for o in plan.outputs))
    order = sorted_rows(rows, plan.order_by)
    order = order[: plan.limit] if plan.limit is not None else order
    columns = [o.name for o in plan.outputs]
    bounded = bound_keys(columns)
    ci95 = {key: [released[i][o.aggregate].ci95 for i in order]
            for o, key in zip(plan.outputs, bounded) if o.aggregate is not None
            and _moment(plan, o.aggregate) is None}
    # the counts and sums whose noise is added, symmetric and log-concave: their bounds
    # add up in sums of them (proxy.postbounds); the mechanisms are the plan's choice
    additive = [key for o, key in zip(plan.outputs, bounded)
                if o.aggregate is not None
                and plan.aggregates[o.aggregate].kind in (COUNT, UNITS, SUM) and all(
                    group[o.aggregate].mechanism in ADDITIVE for group in released)]
    mechanisms = sorted({r.mechanism for group in released for r in group})
    # a release's note may hold several, one a line (privacy.noisy_answers)
    notes = sorted({line for group in released for r in group if r.note
                    for line in r.note.split("\n")})
    if plan.per_unit is not None:
        notes.append(_per_unit_note(plan.per_unit.source, plan.per_unit.keys))
    if plan.multiplicity > 1:
        notes.append(_multiplicity_note(plan))
    if plan.delta is not None:
        mechanisms.append(SELECTION_MECHANISM)
        notes.insert(0, _selection_note(plan))
    privacy = {
        "model": "iDP" if plan.mechanism.model == "idp" else "DP",
        "mechanism": "; ".join(mechanisms),
        "sensitivity": plan.mechanism.sensitivity,
        "neighbours": charge.neighbour,
        "epsilon_spent": float(charge.loss.spent),
        "delta": float(charge.loss.spent_delta),
        "epsilon_remaining": float(remaining),
        "ci95": ci95,
        "additive": additive,
        # which rows there are is the keys' alone: no partition selection, no LIMIT
        # (which keeps the rows of the largest noisy values)
        "rows_public": plan.delta is None and plan.limit is None,
        "notes": notes,
    }
    return Answer(f"SELECT {len(order)}", columns, [rows[i] for i in order], privacy,
                  _notice(privacy), kinds)


def _planned_before_the_debit(engine, held: PassthroughPlan) -> None:
    """The public statement of a staged plan run on the backend as it is held (every
    comparison with a release kept true: the rows any released value could keep) before
    the subqueries are paid for: what fails there (a type mismatch, which DuckDB finds
    only when a row reaches it, ``ORDER BY 5`` of three columns) is refused for free (it
    was charged, then failed: the review of 2026-11-29). Public tables and literals
    only, so its error tells nothing of the protected data; one more run of the public
    statement, which the released values then narrow."""
    try:
        engine.backend.query_with_columns(held.text(engine.backend.dialect))
    except BackendFailed as error:
        raise NotSupported("the statement around the subquery cannot run: "
                           f"{str(error).splitlines()[0]}") from None


def _post_columns(work: QueryPlan | CombinedPlan | StagedPlan) -> list[tuple[str, str]]:
    """The (name, PostgreSQL type) of each column of ``work``'s answer, its
    post-processing run over a row of NULLs and over the release's public keys
    (``_keyed_rows``); what the post-processing engine cannot bind, cast or compute on
    them (a named window it lacks, text added to a number, a label cast to a number) is
    refused here, before any debit, not failed on the released rows after it."""
    if isinstance(work, StagedPlan):
        return _post_columns(work.held)
    plans = [plan for _, plan in work.parts] if isinstance(work, CombinedPlan) else [work]
    columns = [[(o.name, _output_kind(plan, o)) for o in plan.outputs] for plan in plans]
    post = work.post if isinstance(work, CombinedPlan) else None
    union = isinstance(post, OuterQuery) and post.what == UNIONED
    keyed = [_keyed_rows(plan, [kind for _, kind in kinds], union)
             for plan, kinds in zip(plans, columns)]
    for index, plan in enumerate(plans):
        if isinstance(plan.post, OuterQuery):
            columns[index] = _outer_columns(plan.post, [columns[index]], [keyed[index]])
            keyed[index] = [(None,) * len(columns[index])]  # rows its own query made
    if isinstance(post, RankedSeries):  # the query's own release, its rows filtered
        return columns[0]
    return columns[0] if post is None else _outer_columns(post, columns, keyed)


def _outer_columns(outer: OuterQuery, columns: list[list[tuple[str, str]]],
                   keyed: list[list[tuple]]) -> list[tuple[str, str]]:
    """The outer query's columns, typed on a row of NULLs, then run on ``keyed``, each
    release's rows of its public keys."""
    try:
        for probe in ([[(None,) * len(c)] for c in columns], keyed):
            names, kinds, *_ = run_outer(outer, [([n for n, _ in c], [k for _, k in c], rows)
                                                 for c, rows in zip(columns, probe)])
    except NotComputed as exc:  # PostgreSQL's own refusal keeps its SQLSTATE (42846)
        raise NotSupported(exc.message, exc.sqlstate if exc.sqlstate != NotComputed.sqlstate
                           else None) from None
    return list(zip(names, kinds))


def _keyed_rows(plan: QueryPlan, kinds: list[str], typed: bool) -> list[tuple]:
    """Rows a release may have, known before it is read: each GROUP BY column its
    public keys (every key in some row; NULL where they come from the data or a public
    table), each aggregate NULL — or, in a UNION, whose queries only pass values on, a
    value of its type (``_TYPED``: a count beside a timestamp fails the union's cast)."""
    cells = []
    for output, kind in zip(plan.outputs, kinds):
        if output.group is None:
            cells.append([_TYPED.get(kind) if typed else None])
            continue
        term = plan.group_by[output.group]
        known = term.kind not in (PUBLIC, SELECTED)
        cells.append([term.shown(key) for key in term.keys[:_KEYED]] if known and term.keys
                     else [None])
    return [tuple(values[i % len(values)] for values in cells)
            for i in range(max(len(values) for values in cells))]


_KEYED = 2_000  # the most keys of one GROUP BY column run through before the debit
# a value of each released type, for a UNION's rows before the debit
_TYPED = {"bigint": 1, "integer": 1, "smallint": 1, "double precision": 1.0, "real": 1.0,
          "numeric": Decimal(1), "boolean": True, "varchar": "",
          "date": dt.date(2000, 1, 1), "timestamp": dt.datetime(2000, 1, 1),
          "timestamptz": dt.datetime(2000, 1, 1, tzinfo=dt.timezone.utc)}


def _per_unit_note(source: QueryPlan, keys: tuple[tuple[str, str], ...] = ()) -> str:
    """What an aggregate over per-unit values computed (docs/privacy.md §3.11): from
    the rules and the query only; ``keys``: grouped by them too (one row per unit and
    key combination)."""
    table, bound = source.table, source.contribution_bound
    rule = ("max_rows_per_unit" if source.multiplicity == 1
            else "max_rows_per_unit times max_rows_per_key")
    clamped = (f"; a unit's counts are clamped to [0, {bound}] ({rule}) where "
               "aggregated" if bound is not None else "")
    per = " and ".join([table.privacy_unit or "unit", *(column for column, _ in keys)])
    return (f"aggregated over units: one row per {per} with rows of "
            f"{table.name} in scope; a unit the outer WHERE leaves out is not counted (not "
            f"as 0){clamped}")


def _multiplicity_note(plan: QueryPlan) -> str:
    """Why the noise of a join on bounded public keys is wider (docs/privacy.md §3.9):
    from the rules and the query only."""
    bounded = [f"{join.table.name}.{key_text(join.key)} (at most {join.multiplicity} rows "
               "per value)"
               for join in plan.joins if not join.protected and join.multiplicity > 1]
    return (f"joined on {', '.join(bounded)} (max_rows_per_key): a row of {plan.table.name} "
            f"may count up to {plan.multiplicity} times, so the sensitivities allow for "
            f"{plan.multiplicity} times as many changed rows")


_FLOAT, _TEXT = RULE_TYPES["float"], RULE_TYPES["text"]
_CHECKED_KEPT = 64  # texts per session whose step is kept (``Session.known``)
# ... of at most these characters together, none longer than the last: a plan takes about
# 160 bytes a character of its text, and 64 kept plans of long IN lists held 450 MB a
# session (2026-11-29)
_CHECKED_CHARS, _CHECKED_LONGEST = 100_000, 20_000
_FROM_CACHE = "repeated answer from the answer cache, no new epsilon spent"


def _outer_answer(outer: OuterQuery, answers: list[Answer], privacy: dict[str, Any]
                  ) -> Answer:
    """The outer query's result over the released rows of ``answers``; a released
    column it passes on unchanged keeps its 95% bounds, one it computes gets those of
    ``proxy.postbounds`` where a sound rule gives them. ``privacy``: the metadata of
    the releases together."""
    columns, kinds, rows, origins, carried, derived = run_outer(
        outer, [(answer.columns, answer.kinds, answer.rows) for answer in answers],
        [(answer.privacy["ci95"], frozenset(answer.privacy.get("additive", ())),
          answer.privacy.get("rows_public", False)) for answer in answers])
    keys = bound_keys(columns)
    ci95 = {keys[index]: spreads for index, spreads in derived.items()}
    for index, (release, source) in carried.items():
        bounds = answers[release].privacy["ci95"]
        if source in bounds:
            # a row of an outer join that release has no row in: no value, no bound
            ci95[keys[index]] = [None if origin is None or origin[release] is None
                                    else bounds[source][origin[release]]
                                    for origin in origins]
    privacy = dict(privacy, ci95=ci95,
                   notes=[*privacy["notes"], _POST_PROCESSED.format(outer.what)])
    return Answer(f"SELECT {len(rows)}", columns, rows, privacy, _notice(privacy), kinds)


_POST_PROCESSED = "{} ran on the released answers (post-processing, no epsilon)"


def _stage_note(canonical: str, answer: Answer, keyed: tuple) -> str:
    """A subquery's released value, as the note of the statement it stood in states it
    (a correlated one's: how many keys it released a value for, each with its own
    bound)."""
    if keyed:
        return f"({canonical}) a value for each of {len(answer.rows)} keys"
    value = answer.rows[0][0] if answer.rows else None
    bounds = [b for values in answer.privacy["ci95"].values() for b in values if b is not None]
    return f"({canonical}) = {value}" + (f" ±{_short(bounds[0])}" if bounds else "")


_STAGED = ("each scalar subquery was answered first, as a release of its own (its epsilon in "
           "the statement's one charge), and its value put in its place: {}")
_PUBLIC_AFTER = ("the statement then read public tables only: it ran as written "
                 "(post-processing, no epsilon)")
_TOP_CHOICE = ("the query ran on the released row and the public tables (post-processing, "
               "no epsilon)")
_RANKED = ("the series kept are the top-N subquery's, ranked by its own release (charged "
           "beside the query's); the join ran on the released answers (no epsilon)")


def _ranked_series(limit: RankedSeries, answer: Answer, ranking: Answer,
                   privacy: dict[str, Any]) -> Answer:
    """The rows of ``answer`` whose series are among ``ranking``'s rows (its top N),
    compared as the inner join's = does (a NULL matches nothing), in ``answer``'s order,
    then the query's LIMIT; each column's 95 % bounds follow its rows."""
    kept_series = {tuple(row[i] for i in limit.ranked) for row in ranking.rows}
    kept = [index for index, row in enumerate(answer.rows)
            if None not in (series := tuple(row[i] for i in limit.columns))
            and series in kept_series][: limit.limit]
    bounds = {name: [values[i] for i in kept]
              for name, values in answer.privacy["ci95"].items()}
    privacy = dict(privacy, ci95=bounds, notes=[*privacy["notes"], _RANKED])
    return Answer(f"SELECT {len(kept)}", answer.columns, [answer.rows[i] for i in kept],
                  privacy, _notice(privacy), answer.kinds)


def _cacheable(answer: Answer) -> dict[str, Any]:
    return {"command": answer.command, "columns": answer.columns, "rows": answer.rows,
            "kinds": answer.kinds, "privacy": answer.privacy}


def _restored(stored: dict[str, Any], spent: Decimal, delta: Decimal, remaining: Decimal,
              note: str | None = None, rho: tuple[Decimal, Decimal] | None = None) -> Answer:
    """A stored answer with this request's own accounting in its metadata (under the
    zcdp accountant ``rho``: the ρ spent and the δ budgets are stated at; remaining is
    then the largest ε of one more answer)."""
    privacy = dict(stored["privacy"], epsilon_spent=float(spent), delta=float(delta),
                   epsilon_remaining=float(remaining))
    if rho is not None:
        privacy["rho_spent"], privacy["accounting_delta"] = float(rho[0]), float(rho[1])
    if note is not None:
        privacy["notes"] = [*privacy["notes"], note]
    return Answer(stored["command"], stored["columns"], [tuple(row) for row in stored["rows"]],
                  privacy, _notice(privacy), stored["kinds"])


def bound_keys(columns: Sequence[str]) -> list[str]:
    """Where each column's 95 % bounds are kept in ``privacy["ci95"]``: under its name,
    or, where several columns share it (``SELECT AVG(income), AVG(age)``: both ``avg``,
    as PostgreSQL names them), under the name and its position, so that each keeps its
    own (one took the other's: income's interval was age's ±0.08)."""
    shared = {name for name in columns if columns.count(name) > 1}
    keys = [f"{name} (column {position})" if name in shared else name
            for position, name in enumerate(columns, 1)]
    while len(set(keys)) < len(keys):  # a name such as "avg (column 2)" written as well
        keys = [f"{key} (column {position})" if keys.count(key) > 1 else key
                for position, key in enumerate(keys, 1)]
    return keys


def _with_intervals(answer: Answer) -> Answer:
    """Each noisy column followed by the ends of its 95% interval, for tools that do not
    show notices (``SET idp.intervals = on``); empty where no bound is reported."""
    bounds = answer.privacy["ci95"]
    columns, kinds, picks = [], [], []
    for index, (name, kind, key) in enumerate(zip(answer.columns, answer.kinds,
                                                  bound_keys(answer.columns))):
        columns.append(name)
        kinds.append(kind)
        picks.append((index, None, 0))
        if key in bounds:
            columns += [f"{name}_ci95_low", f"{name}_ci95_high"]
            kinds += [_FLOAT, _FLOAT]
            picks += [(index, key, -1), (index, key, 1)]
    rows = []
    for number, row in enumerate(answer.rows):
        cells = []
        for index, name, sign in picks:
            value = row[index]
            if name is None:
                cells.append(value)
                continue
            spread = bounds[name][number]
            # (a moment sharing a released number's name takes none of its bounds)
            cells.append(None if spread is None or not isinstance(value, (int, float, Decimal))
                         else float(value) + sign * spread)  # a NUMERIC is a Decimal
        rows.append(tuple(cells))
    return Answer(answer.command, columns, rows, answer.privacy, answer.notice, kinds)


def _moments_in_order(plan: QueryPlan, shown: dict[int, Any]) -> dict[int, Any]:
    """A row's MIN and MAX of one date or timestamp column kept in their order, as the
    true ones are: each is drawn as a number from its own end of the window or bucket
    (``expressions.moment_column``), so in a group of one moment MAX came back before
    MIN (the review of 2026-11-29). Sorting released values is post-processing; it
    brings each nearer the truth (``noisy_answers.in_order`` does it for numbers)."""
    extremes: dict[str, list[int]] = {}
    for index, value in shown.items():
        moment = _moment(plan, index)
        if moment is not None and value is not None:
            extremes.setdefault(moment.column, []).append(index)
    for indices in extremes.values():
        ordered = sorted(indices, key=lambda i: plan.aggregates[i].kind == MAX)
        if ordered and plan.aggregates[ordered[0]].kind == MIN \
                and plan.aggregates[ordered[-1]].kind == MAX:
            for index, value in zip(ordered, sorted(shown[i] for i in ordered)):
                shown[index] = value
    return shown


def _moment(plan: QueryPlan, index: int) -> Moment | None:
    """What a MAX or MIN of a date or timestamp column ranks (its released number is
    the days or seconds from the origin), else None."""
    column = plan.aggregates[index].column
    return getattr(plan.table.columns.get(column), "moment", None) if column else None


def _shown(plan: QueryPlan, index: int, value, key: tuple):
    """A released value as the answer shows it: a moment for a MAX or MIN of a date or
    timestamp column (within its group's bucket, ``_bucketed``), else as released."""
    moment = _moment(plan, index)
    if moment is None or value is None:
        return value
    column = plan.table.columns[plan.aggregates[index].column]
    bucket = _bucket(plan, moment, key)
    if bucket is None:
        return None if moment.bucket is not None else column.shown(value)
    return _bucketed(moment, *bucket, column.shown(value, bucket[1]))


def _bucket(plan: QueryPlan, moment: Moment, key: tuple) -> tuple[Any, Any] | None:
    """The GROUP BY ``date_trunc`` of the moment's own column and the group's key of it
    (the bucket's start), where the plan has one: of the unit the number was counted in
    (``Moment.bucket``), else the first."""
    for term, start in zip(plan.group_by, key):
        if term.kind == TIME_TRUNC and term.column == moment.column and term.by is None \
                and start is not None and moment.bucket in (None, term.unit):
            return term, start
    return None


def _bucketed(moment: Moment, term, start, shown):
    """``shown`` kept within its group's bucket (``term``'s, from ``start``) and the
    moment's window (the declared domain as the WHERE narrows it): every row of the
    group lies in both, so its MAX and MIN do, but a draw over the whole window (a
    bucket the analysis did not count from, ``expressions.own_bucket``) may land in
    another month, one counted from the bucket beyond a short month's end, and one
    counted from a year's end beyond a domain or WHERE that ends in March (the review
    of 2026-11-29).
    Post-processing of the released value and its public key (docs/privacy.md §5.3)."""
    day = moment.kind == "date"
    lowest, highest = (end.date() if day else end for end in moment.window)
    if not day:  # whole seconds, as every moment answered (a strict bound's last tick)
        highest = highest.replace(microsecond=0)
        lowest = lowest if not lowest.microsecond else (
            lowest.replace(microsecond=0) + dt.timedelta(seconds=1))
    first = max(start.date() if day else start, lowest)
    try:
        end = next_start(start, term.unit)
    except (NotSupported, OverflowError):  # the year 9999's: the window's end
        last = highest
    else:
        last = min(end.date() - dt.timedelta(days=1) if day else end - dt.timedelta(seconds=1),
                   highest)
    return max(min(shown, last), first) if first <= last else max(min(shown, highest), lowest)


def _output_kind(plan: QueryPlan, output) -> str:
    """The PostgreSQL type of a released value of this output column, as PostgreSQL
    types the column (proxy.result_types)."""
    if output.group is not None:
        return key_type(plan.group_by[output.group], plan.table)
    if (moment := _moment(plan, output.aggregate)) is not None:
        return RULE_TYPES[moment.kind]
    aggregate = plan.aggregates[output.aggregate]
    argument = None if aggregate.column is None else argument_type(
        plan.table.columns[aggregate.column])
    return aggregate_type(aggregate.kind, argument, aggregate.continuous)


def _together(answers: list[Answer], base: dict[str, Any], **more: Any) -> dict[str, Any]:
    """The metadata of several releases paid for as one charge: ``base`` with their ε,
    δ (and ρ) added up as the ledger adds them (δ was the last part's alone: the
    review of 2026-11-29) and their mechanisms each once; ``more`` beside."""
    privacy = dict(base, epsilon_spent=_summed(a.privacy["epsilon_spent"] for a in answers),
                   mechanism="; ".join(dict.fromkeys(
                       m for a in answers for m in a.privacy["mechanism"].split("; "))),
                   **more)
    for name in ("delta", "rho_spent"):  # a part of no group has no ρ: it spent none
        if any(name in a.privacy for a in answers):
            privacy[name] = _summed(a.privacy.get(name, 0) for a in answers)
    return privacy


def _notes(answers: list[Answer]) -> list[str]:
    return [*dict.fromkeys(n for a in answers for n in a.privacy["notes"])]


def _summed(values) -> float:
    """Several answers' ε (or ρ) added as the ledger adds them, in decimals: each is
    the float of an exact loss, so ε 0.1 three times shows 0.3, not
    0.30000000000000004."""
    return float(sum(Decimal(repr(value)) for value in values))


def _notice(privacy: dict[str, Any]) -> str:
    bounds = ", ".join(
        f"{name} ±{_short(values[0])}" if len(values) == 1 else f"{name} ±{_short(max(values))} (widest)"
        for name, values in privacy["ci95"].items() if values and None not in values)
    delta = f" and delta {privacy['delta']:g}" if privacy.get("delta") else ""
    text = (f"{privacy['model']} ({privacy['mechanism']}): spent epsilon "
            f"{privacy['epsilon_spent']:g}{delta}, {privacy['epsilon_remaining']:g} remaining")
    if "rho_spent" in privacy:  # the zcdp accountant (docs/budget.md)
        text = (f"{privacy['model']} ({privacy['mechanism']}): spent epsilon "
                f"{privacy['epsilon_spent']:g}{delta} (zCDP rho {privacy['rho_spent']:g}); "
                f"one more answer may take epsilon {privacy['epsilon_remaining']:g} "
                f"(budgets are epsilon at delta {privacy['accounting_delta']:g})")
    if bounds:
        text += f"; 95% error bound {bounds}"
    for note in privacy["notes"]:
        text += f"; {note}"
    return text


def _short(value: float) -> str:
    return f"{value:.4g}"


_GROUPING_SETS = ("GROUPING SETS, ROLLUP or CUBE: {} grouped queries, each released and "
                  "charged on its own; a column outside a set's grouping is NULL")
_CONSISTENT_COUNTS = ("COUNT(*) and COUNT(column) made consistent: each subtotal is the "
                      "sum of the groups it covers, by weighted least squares over the "
                      "released counts (post-processing, no epsilon; docs/privacy.md "
                      "§3.19); the bounds are those of the released counts; COUNT(DISTINCT "
                      "…) and the other aggregates are as released")


def _mechanism(plan: QueryPlan) -> str:
    """What the ledger records of the plan's mechanism and aggregates."""
    kinds = ",".join(("public " if plan.public(a) else "") + a.label for a in plan.aggregates)
    selected = "" if plan.delta is None else f"; keys of {_selected_names(plan)} by " \
        f"partition selection, threshold {selection_of(plan).threshold}"
    if isinstance(plan.post, TopChoice):
        least = "least" if plan.post.smallest else "largest"
        selected += f"; the group of the {least} by the exponential mechanism"
    return f"{plan.mechanism.label}: {kinds}{selected}"


SELECTION_MECHANISM = "partition selection (thresholded discrete Laplace)"


def _selected_names(plan: QueryPlan) -> str:
    return ", ".join(term.column for term in plan.group_by if term.kind == SELECTED)


def _selection_note(plan: QueryPlan) -> str:
    """What the partition selection of ``plan`` spent and what it means for the rows
    shown: public (the plan's text and the rules), never the number of keys found."""
    selection, spent = selection_of(plan), plan.loss.spent
    units = f"distinct {plan.table.privacy_unit}" if plan.table.privacy_unit else "rows"
    return (f"the keys of {_selected_names(plan)} are chosen from the data (partition "
            f"selection, (epsilon, delta)-DP: epsilon {float(spent * SELECTION_SHARE):g} "
            f"of the {float(spent):g} spent, delta {float(plan.delta):g}): a key is shown "
            f"only when its noisy count of {units} reaches {selection.threshold}, so rare "
            "keys are missing; the aggregates share the rest of the epsilon")


def _neighbour(plan: QueryPlan) -> str:
    if plan.per_unit is not None:  # the units' own records (docs/privacy.md §3.11)
        return _neighbour(plan.per_unit.source)
    table = plan.table
    if plan.mechanism.individual:
        return f"any two values of one {table.privacy_unit}, or its absence (docs/privacy.md §5.1)"
    if plan.mechanism.prior is not None:
        return "any two data sets (docs/privacy.md §5.1)"
    others = [join.table.name for join in plan.joins if join.protected]
    others += [semi.table.name for semi in plan.semi_joins
               if semi.table.name not in (table.name, *others)]  # read by EXISTS
    where = (f" in {', '.join([table.name, *others[:-1]])} and {others[-1]}" if others
             else "")
    who = (f"all records of one {table.privacy_unit}{where}" if table.privacy_unit
           else "one record")
    group = f", groups of {table.group_size}" if table.group_size > 1 else ""
    return f"modify {who}{group}"
