"""The engine: one message of SQL in, answers with privacy metadata out.

Flow (SPEC §4): analyze every statement first (a refused statement refuses the whole
message, nothing spent) → for each private query: debit the ledger (committed), then in
one snapshot of the backend the per-unit bound and the pushed-down statistics, then the
noisy release. The ε is reserved before the backend runs anything and refunded only
when the backend could not be reached (SPEC §7).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from sqlglot import exp

from proxy.analyze import PassthroughPlan, QueryPlan, analyze, parse_statements
from proxy.analyze.plan import AVG, COUNT
from proxy.answer_cache import AnswerCache, cache_key, normalised_sql
from proxy.backends.base import Backend, Transaction
from proxy.errors import BackendFailed, BackendUnavailable, DiskFull, RulesError
from proxy.ledger import Charge, Ledger
from proxy.pgtypes import RULE_TYPES
from proxy.privacy.noisy_answers import Calibration, Released, column_needs, release_group
from proxy.privacy.private_bound import private_levels
from proxy.privacy.refined_answers import exact_answer, release_refined
from proxy.privacy.sampler import RandomSource, SecureSource
from proxy.privacy.smooth_sensitivity import smooth_sensitivities
from proxy.pushdown import compute_statistics, unit_bound_sql
from proxy.pushdown.ungrouped import first_pass, remaining_passes
from proxy.pushdown.window import rank_window
from proxy.rules import Rules
from proxy.settings import (
    DEFAULT_GAMMA,
    DEFAULT_SENSITIVITY,
    SessionCommand,
    Settings,
    apply_command,
    epsilon_hint,
    session_command,
)
from proxy.statistics import GroupStats
from proxy.timing import padded


@dataclass
class Answer:
    """One statement's result: rows for the client, and the privacy metadata."""

    command: str
    columns: list[str] = field(default_factory=list)
    rows: list[tuple] = field(default_factory=list)
    privacy: dict[str, Any] | None = None
    notice: str | None = None
    kinds: list[str] = field(default_factory=list)  # per column, as Session.describe says


class Engine:
    """Shared by every session: rules, backend, ledger and the random source."""

    def __init__(self, rules: Rules, backend: Backend, rng: RandomSource | None = None) -> None:
        self.rules = rules
        self.backend = backend
        _check_schema(rules, backend)
        self.ledger = Ledger(backend, rules)
        self.cache = AnswerCache(backend)
        for table in rules.tables.values():
            if not table.public:
                backend.track_versions(table.name)
        self.rng = rng or SecureSource()
        self._unit_bounds: dict[tuple[str, str], int] = {}

    def session(self, analyst: str) -> Session:
        self.ledger.ensure_analyst(analyst)
        return Session(self, analyst)

    def statistics(self, plan: QueryPlan) -> tuple[int, dict[tuple, GroupStats], str | None]:
        """The shift s = c·g (SPEC §5.2), every group's statistics and the table's data
        version (None: the backend has no cheap one), from one snapshot; with them,
        where asked, the smooth sensitivities (DP) or the private levels of the local
        sensitivities (iDP, ``report_scale = "private"``), read from windows of ranks in
        the same snapshot."""
        table, dialect = plan.table, self.backend.dialect
        clip = table.max_rows_per_unit if plan.model == "dp" else None
        bounded = (plan.model == "idp" and not plan.group_by
                   and self.rules.defaults.report_scale == "private")
        with self.backend.transaction(snapshot=True) as tx:
            shift, groups, version = self._statistics(plan, tx, clip, bounded)
            if plan.smooth_gamma is None and not bounded:
                return shift, groups, version
            by_column = {need.column: need for need in column_needs(plan, shift, bounded)}

            def window(column: str, from_top: bool):
                return rank_window(plan, by_column[column], dialect, clip, tx.execute, from_top)

            if bounded:
                groups[()].bounds = private_levels(plan, groups[()], shift,
                                                   self.rules.defaults.local_sensitivity_floor,
                                                   window, self.rng)
            else:
                groups[()].smooth = smooth_sensitivities(plan, groups[()], shift, window)
            return shift, groups, version

    def _statistics(self, plan: QueryPlan, tx: Transaction, clip: int | None,
                    counted: bool) -> tuple[int, dict[tuple, GroupStats], str | None]:
        """Under DP c is the declared contribution bound. Under iDP it is the table's
        largest per-unit row count, recomputed only when the table's data version
        changes. Where the backend has no cheap version, a fingerprint of the unit column
        serves, riding along in the statistics' first scan when there is no GROUP BY
        (the counts and sums do not depend on s; the ranks do). ``counted``: every
        column's n is needed (the private levels read windows)."""
        table, dialect = plan.table, self.backend.dialect
        version = self.backend.data_version(tx, table.name)

        def needs(shift: int):
            return column_needs(plan, shift, counted)

        if table.privacy_unit is None or plan.model != "idp":
            shift = (clip or 1) * table.group_size
            return shift, compute_statistics(plan, needs(shift), dialect, clip, tx.execute), \
                version
        if version is None:
            unit = table.columns.get(table.privacy_unit)
            folded = self.backend.fingerprint_aggregates(
                table.privacy_unit, unit is not None and unit.type == "int")
            if not plan.group_by:
                group, values = first_pass(plan, needs(1), dialect, None, tx.execute, folded)
                shift = self._shift(plan, tx, self.backend.fingerprint_text(values))
                remaining_passes(plan, needs(shift), group, dialect, None, tx.execute)
                return shift, {(): group}, None
            scan = exp.select(*folded).from_(exp.to_table(table.name, quoted=True))
            shift = self._shift(plan, tx, self.backend.fingerprint_text(
                tx.execute(scan.sql(dialect=dialect))[0]))
            return shift, compute_statistics(plan, needs(shift), dialect, None, tx.execute), None
        shift = self._shift(plan, tx, version)
        return shift, compute_statistics(plan, needs(shift), dialect, None, tx.execute), version

    def release(self, plan: QueryPlan) -> tuple[list[tuple], list[list[Released]], str | None]:
        """Every group's key and released answers, and the data version they were
        computed at; after the debit."""
        if plan.individual:
            true, version = self.unit_value(plan)
            return [()], [[release_refined(plan, true, self.rng)]], version
        shift, groups, version = self.statistics(plan)
        if plan.prior is not None:
            return [()], [[release_refined(plan, exact_answer(plan, groups[()]), self.rng)]], \
                version
        defaults = self.rules.defaults
        calibration = Calibration(plan.model, shift, defaults.local_sensitivity_floor,
                                  defaults.exact_release, defaults.report_scale)
        keys = plan.group_keys() if plan.group_by else [()]
        return keys, [release_group(plan, groups.get(key, GroupStats()), calibration, self.rng)
                      for key in keys], version

    def unit_value(self, plan: QueryPlan) -> tuple[Any, str | None]:
        """One unit's value of the asked column (the mean of its rows for a number, the
        first in order otherwise; None when it has none) and the data version. Numbers
        are normalised first, as for every statistic (NaN rows skipped, the rest clamped
        to the declared domain or ±MAGNITUDE_CAP), so the value is finite or None."""
        from proxy.pushdown.scope import normalised  # the one normalisation rule

        table, name = plan.table, plan.aggregates[0].column
        column, declared = exp.column(name, quoted=True), table.columns[name]
        value = (exp.Avg(this=normalised(column, declared.lower, declared.upper))
                 if declared.numeric else exp.Min(this=column))
        query = exp.select(value).from_(exp.to_table(table.name, quoted=True)).where(plan.where)
        with self.backend.transaction(snapshot=True) as tx:
            version = self.backend.data_version(tx, table.name)
            return tx.execute(query.sql(dialect=self.backend.dialect))[0][0], version

    def cached(self, analyst: str, plan: QueryPlan, charge: Charge) -> dict[str, Any] | None:
        """The answer this analyst was already given for this query over the data as it
        is now, recorded in the ledger as served from the cache; None when there is none."""
        if not self.rules.defaults.answer_cache:
            return None
        with self.backend.transaction() as tx:
            version = self.backend.data_version(tx, plan.table.name)
            if version is None:
                return None
            stored = self.cache.lookup(tx, analyst, self.cache_key(charge.sql, plan, version))
            if stored is not None:
                self.ledger.append(tx, charge, 0, "served from cache", released=True)
            return stored

    def remember(self, analyst: str, plan: QueryPlan, charge: Charge, version: str | None,
                 answer: dict[str, Any]) -> dict[str, Any]:
        """Cache a new answer where ``cached`` would find it; return the answer to send
        (a racing session's, when it was stored first)."""
        if version is None or not self.rules.defaults.answer_cache:
            return answer
        try:
            return self.cache.store(analyst, self.cache_key(charge.sql, plan, version),
                                    plan.table.name, version, answer)
        except (BackendUnavailable, DiskFull):
            return answer  # paid and computed: the answer stands, uncached

    def cache_key(self, sql: str, plan: QueryPlan, version: str) -> str:
        defaults = self.rules.defaults
        calibration = (defaults.local_sensitivity_floor, defaults.exact_release,
                       defaults.report_scale)
        return cache_key(sql, plan, calibration, version)

    def _shift(self, plan: QueryPlan, tx: Transaction, version: str) -> int:
        """c·g with c cached per (table, data version)."""
        table = plan.table
        key = (table.name, version)
        if key not in self._unit_bounds:
            sql = unit_bound_sql(table.name, table.privacy_unit, self.backend.dialect)
            self._unit_bounds[key] = max(1, int(tx.execute(sql)[0][0]))
        return self._unit_bounds[key] * table.group_size


def _check_schema(rules: Rules, backend: Backend) -> None:
    """Every protected table and declared column must exist, so that a mistake in the
    rules stops the proxy at start instead of failing (and being charged) per query.
    Reads the schema only (``LIMIT 0``), never a row."""
    for table in rules.tables.values():
        if table.public:
            continue
        statement = exp.select("*").from_(exp.to_table(table.name, quoted=True)).limit(0)
        try:
            present, _ = backend.query_with_columns(statement.sql(dialect=backend.dialect))
            present = [name for name, _ in present]
        except BackendFailed:
            raise RulesError(f"{rules.path}: [tables.{table.name}] the backend has no table "
                             f"{table.name}") from None
        declared = set(table.columns) | ({table.privacy_unit} - {None})
        missing = sorted(declared - {name.lower() for name in present})
        if missing:
            raise RulesError(f"{rules.path}: [tables.{table.name}] the backend's table lacks "
                             f"the declared column(s) {', '.join(missing)}")


class Session:
    """One analyst's connection: settings live here, budget lives in the ledger."""

    def __init__(self, engine: Engine, analyst: str) -> None:
        self.engine = engine
        self.analyst = analyst
        self.settings = Settings()

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
        if isinstance(work, SessionCommand):
            return [(work.name.split(".")[-1], "text")] if work.show else None
        if isinstance(work, PassthroughPlan):
            probe = exp.select("*").from_(work.sql.subquery("q")).limit(0)
            columns, _ = self.engine.backend.query_with_columns(
                probe.sql(dialect=self.engine.backend.dialect))
            return columns
        columns = [(o.name, _output_kind(work, o)) for o in work.outputs]
        if self.settings.intervals:
            columns = [pair for o, column in zip(work.outputs, columns) for pair in
                       [column] + ([(f"{o.name}_ci95_low", _FLOAT),
                                    (f"{o.name}_ci95_high", _FLOAT)] if o.aggregate is not
                                   None else [])]
        return columns

    def check(self, sql: str) -> list[tuple[exp.Expression, Any]]:
        settings = self.settings
        steps = []
        for statement in parse_statements(sql):
            command = session_command(statement)
            if command is not None:
                settings = apply_command(settings, command)
                steps.append((statement, command))
            else:
                steps.append((statement, analyze(statement, self.engine.rules, settings,
                                                 epsilon_hint(statement))))
        return steps

    def run(self, step) -> Answer:
        statement, work = step
        if isinstance(work, SessionCommand):
            return self._session_command(work)
        if isinstance(work, PassthroughPlan):
            columns, rows = self.engine.backend.query_with_columns(
                work.sql.sql(dialect=self.engine.backend.dialect))
            return Answer(f"SELECT {len(rows)}", [name for name, _ in columns], rows,
                          kinds=[kind for _, kind in columns])
        answer = self._private(statement, work)
        return _with_intervals(answer) if self.settings.intervals else answer

    def _session_command(self, command: SessionCommand) -> Answer:
        if not command.show:
            self.settings = apply_command(self.settings, command)
            return Answer("RESET" if command.value is None else "SET")
        value = self._show(command.name)
        return Answer("SHOW", [command.name.split(".")[-1]], [(value,)], kinds=[_TEXT])

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
        if name == "idp.sensitivity":
            return self.settings.sensitivity or DEFAULT_SENSITIVITY[
                self.settings.model or rules.defaults.model]
        return dict(self.settings.other).get(name, "")

    def _private(self, statement: exp.Expression, plan: QueryPlan) -> Answer:
        """A cached answer if there is one (no debit); else debit, compute, release and
        cache (a racing session's answer, stored first, wins). All of it inside the time
        quantum, if the rules set one."""
        with padded(self.engine.rules.defaults.time_quantum_ms):
            return self._compute(statement, plan)

    def _compute(self, statement: exp.Expression, plan: QueryPlan) -> Answer:
        engine = self.engine
        charge = Charge(self.analyst, normalised_sql(statement), plan.model,
                        _mechanism(plan), plan.cost, _neighbour(plan))
        stored = engine.cached(self.analyst, plan, charge)
        if stored is not None:
            return _restored(stored, Decimal(0), engine.ledger.remaining(self.analyst),
                             _FROM_CACHE)
        remaining = engine.ledger.debit(charge)
        try:
            keys, released, version = engine.release(plan)
        except BackendUnavailable:
            engine.ledger.refund(charge)
            raise
        answer = _cacheable(_answer(plan, keys, released, charge, remaining))
        sent = engine.remember(self.analyst, plan, charge, version, answer)
        return _restored(sent, charge.epsilon, remaining)


def _answer(plan: QueryPlan, keys, released: list[list[Released]], charge: Charge,
            remaining: Decimal) -> Answer:
    rows = []
    for key, values in zip(keys, released):
        rows.append(tuple(key[o.group] if o.group is not None else values[o.aggregate].value
                          for o in plan.outputs))
    order = list(range(len(rows)))
    for index, descending in reversed(plan.order_by):
        order.sort(key=lambda i: _sort_key(rows[i][index]), reverse=descending)
    order = order[: plan.limit] if plan.limit is not None else order
    columns = [o.name for o in plan.outputs]
    ci95 = {o.name: [released[i][o.aggregate].ci95 for i in order]
            for o in plan.outputs if o.aggregate is not None}
    mechanisms = sorted({r.mechanism for group in released for r in group})
    notes = sorted({r.note for group in released for r in group if r.note})
    privacy = {
        "model": "iDP" if plan.model == "idp" else "DP",
        "mechanism": "; ".join(mechanisms),
        "sensitivity": _SENSITIVITY.get(plan.model, "global") if plan.smooth_gamma is None
        else "smooth (beta = epsilon/gamma) for percentiles, MAX and MIN; global otherwise",
        "neighbours": charge.neighbour,
        "epsilon_spent": float(charge.epsilon),
        "epsilon_remaining": float(remaining),
        "ci95": ci95,
        "notes": notes,
    }
    return Answer(f"SELECT {len(order)}", columns, [rows[i] for i in order], privacy,
                  _notice(privacy), [_output_kind(plan, o) for o in plan.outputs])


_FLOAT, _TEXT = RULE_TYPES["float"], RULE_TYPES["text"]
_SENSITIVITY = {"idp": "local, rounded up to a power of two",
                "refinement": "none (knowledge refinement does not depend on it)"}
_FROM_CACHE = "repeated answer from the answer cache, no new epsilon spent"


def _cacheable(answer: Answer) -> dict[str, Any]:
    return {"command": answer.command, "columns": answer.columns, "rows": answer.rows,
            "kinds": answer.kinds, "privacy": answer.privacy}


def _restored(stored: dict[str, Any], spent: Decimal, remaining: Decimal,
              note: str | None = None) -> Answer:
    """A stored answer with this request's own accounting in its metadata."""
    privacy = dict(stored["privacy"], epsilon_spent=float(spent),
                   epsilon_remaining=float(remaining))
    if note is not None:
        privacy["notes"] = [*privacy["notes"], note]
    return Answer(stored["command"], stored["columns"], [tuple(row) for row in stored["rows"]],
                  privacy, _notice(privacy), stored["kinds"])


def _with_intervals(answer: Answer) -> Answer:
    """Each noisy column followed by the ends of its 95% interval, for tools that do not
    show notices (``SET idp.intervals = on``); empty where no bound is reported."""
    bounds = answer.privacy["ci95"]
    columns, kinds, picks = [], [], []
    for index, (name, kind) in enumerate(zip(answer.columns, answer.kinds)):
        columns.append(name)
        kinds.append(kind)
        picks.append((index, None, 0))
        if name in bounds:
            columns += [f"{name}_ci95_low", f"{name}_ci95_high"]
            kinds += [_FLOAT, _FLOAT]
            picks += [(index, name, -1), (index, name, 1)]
    rows = []
    for number, row in enumerate(answer.rows):
        cells = []
        for index, name, sign in picks:
            value = row[index]
            if name is None:
                cells.append(value)
                continue
            spread = bounds[name][number]
            cells.append(None if spread is None or value is None else value + sign * spread)
        rows.append(tuple(cells))
    return Answer(answer.command, columns, rows, answer.privacy, answer.notice, kinds)


def _output_kind(plan: QueryPlan, output) -> str:
    """The PostgreSQL type of a released value of this output column."""
    if output.group is not None:
        column = plan.table.columns.get(plan.group_by[output.group])
        return RULE_TYPES[column.type] if column is not None else _TEXT
    aggregate = plan.aggregates[output.aggregate]
    if aggregate.kind == COUNT:
        return RULE_TYPES["int"]
    if aggregate.kind == AVG:
        return _FLOAT
    return RULE_TYPES[plan.table.columns[aggregate.column].type]


def _notice(privacy: dict[str, Any]) -> str:
    bounds = ", ".join(
        f"{name} ±{_short(values[0])}" if len(values) == 1 else f"{name} ±{_short(max(values))} (widest)"
        for name, values in privacy["ci95"].items() if values and None not in values)
    text = (f"{privacy['model']} ({privacy['mechanism']}): spent epsilon "
            f"{privacy['epsilon_spent']:g}, {privacy['epsilon_remaining']:g} remaining")
    if bounds:
        text += f"; 95% error bound {bounds}"
    for note in privacy["notes"]:
        text += f"; {note}"
    return text


def _short(value: float) -> str:
    return f"{value:.4g}"


def _sort_key(value):
    return (value is None, value)


def _mechanism(plan: QueryPlan) -> str:
    kinds = ",".join(("public " if plan.public(a) else "") + a.label for a in plan.aggregates)
    smooth = "" if plan.smooth_gamma is None else f" smooth gamma={plan.smooth_gamma:g}"
    return f"{plan.model}{smooth}: {kinds}"


def _neighbour(plan: QueryPlan) -> str:
    table = plan.table
    if plan.individual:
        return f"any two values of one {table.privacy_unit}, or its absence (seed 001 §3)"
    if plan.prior is not None:
        return "any two data sets (seed 001 Prop. 1)"
    who = (f"all records of one {table.privacy_unit}" if table.privacy_unit
           else "one record")
    group = f", groups of {table.group_size}" if table.group_size > 1 else ""
    return f"modify {who}{group}"
