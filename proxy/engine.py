"""The engine, shared by every session (proxy.session): for a plan whose ε is debited,
in one snapshot of the backend the per-unit bound and the pushed-down statistics, then
the noisy release; and the answer cache. The ε is reserved before the backend runs
anything and refunded only when the backend could not be reached (SPEC §7).

A query reads the table's data version once: a session opens a ``View`` (a snapshot
transaction and the version read in it), looks the answer up in the cache in it — a
read, no write lock — and, on a miss, has the ledger debit the ε (its own write
transaction, committed) and then computes the statistics in the same view, so the
version the answer is cached under is the one of the snapshot it was computed from.
"""

from __future__ import annotations

import gc
import itertools
import math
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any, TypeVar

from sqlglot import exp

from proxy.analyze.key_restriction import conjuncts, number_window
from proxy.analyze.shapes import ShapeCache
from proxy.answer_cache import AnswerCache, cache_key
from proxy.backends.base import Backend, Transaction, still_current
from proxy.errors import (
    BackendFailed,
    BackendUnavailable,
    DiskFull,
    NotSupported,
    PrivilegeMissing,
    RulesError,
)
from proxy.ledger import Charge, Ledger
from proxy.privacy.contribution_bounds import (
    draw_joint_bounds,
    joint_clipped,
    ladder_reads,
    laddered,
    ladders_alone,
    rungs,
)
from proxy.privacy.correlation import draw_bounds, row_rungs
from proxy.privacy.inverse_sensitivity import (
    ALL_ROWS,
    ONE_ROW,
    WEIGHTED,
    DrawScope,
    draw_scopes,
    first_windows,
    instance_releases,
    weighted_reaches,
    weighted_releases,
)
from proxy.privacy.noisy_answers import (
    Calibration,
    Released,
    column_needs,
    release_groups,
    spread_centres,
)
from proxy.privacy.partition_selection import (
    SELECTION_BATCH,
    SELECTION_SHARE,
    selection_of,
    whole_root,
)
from proxy.privacy.private_bound import private_levels
from proxy.privacy.refined_answers import exact_answer, release_refined
from proxy.privacy.requests import Asking, CountRequest, RankRequest, WeightCountRequest
from proxy.privacy.sampler import RandomSource, SecureSource
from proxy.privacy.smooth_sensitivity import smooth_sensitivities
from proxy.privacy.top_choice import top_release
from proxy.pushdown import compute_statistics
from proxy.pushdown.contributions import contribution_ladders
from proxy.pushdown.pairs import bound_counts, pair_sums
from proxy.pushdown.scope import (
    HashedClip,
    bound_tables,
    bounded_keys,
    bounded_reads,
    chain_tables,
    joined_units,
    keys_beyond_sql,
    plan_unit_bound_sql,
    table_ref,
)
from proxy.pushdown.selection import key_counts_sql
from proxy.pushdown.ungrouped import first_pass, remaining_passes
from proxy.pushdown.values import clamped_to_domain  # the one normalisation rule
from proxy.pushdown.weighted import weighted_counts, weighted_windows
from proxy.pushdown.window import (
    by_rank,
    grouped_windows,
    near,
    order_statistics,
    rank_counts,
    rank_window,
    widened,
    widened_spans,
    with_window_extremes,
)
from proxy.rules import LINKED_UNIT, Rules, Table, key_text, where_declared
from proxy.statistics import ColumnNeeds, Fetch, GroupStats, PairSums
from proxy.unit_bounds import UnitBounds
from proxy.vocabulary import PUBLIC, SELECTED, SMOOTH, GroupKey, Join, QueryPlan, TopChoice

T = TypeVar("T")
ANSWERS_KEPT = 10_000  # cached answers kept in memory too (the least recently used go)
READS_KEPT = 4_096  # keys of ``PerVersion`` memos kept (the least recently used go)
_ABSENT = object()


class PerVersion:
    """What the proxy reads once per data version (c, a key's bound, a public table's
    keys), keeping per key only the latest version's value: a write moves the table to
    a new version for good, so an older version's value would only be asked again by a
    snapshot still on it, which reads it once more. Memory so grows with the keys (at
    most READS_KEPT), not with the writes, in a server that runs for months."""

    def __init__(self) -> None:
        self._kept: OrderedDict[Any, tuple[Any, Any]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: Any, version: Any, read: Callable[[], T]) -> T:
        """The value kept for ``key`` at ``version``, else ``read()``, kept."""
        with self._lock:
            found = self._kept.get(key, (_ABSENT, None))
            if found[0] == version:
                self._kept.move_to_end(key)
                return found[1]
        value = read()
        with self._lock:
            self._kept[key] = (version, value)
            self._kept.move_to_end(key)
            if len(self._kept) > READS_KEPT:
                self._kept.popitem(last=False)
        return value

    def __len__(self) -> int:
        return len(self._kept)

    def values(self) -> list[Any]:
        return [value for _, value in self._kept.values()]


@dataclass
class View:
    """An open snapshot transaction and the table's data version read in it (None: the
    backend has no cheap one); with public tables joined, theirs too, and ``plan`` with
    the keys of its GROUP BY terms over public columns read in it. ``unit_version``:
    the data version of the tables c is read from (``bound_tables``), which keys c."""

    tx: Transaction
    version: str | None
    plan: QueryPlan | None = None
    unit_version: str | None = None


# How many younger collections run between two full ones (Python's default 10): the
# process holds large long-lived trees (rules, analyses by shape, statements kept per
# plan), which every full collection walks again, and an answer allocates hundreds of
# thousands of short-lived objects (statement trees, fetched rows). At 10, collecting
# took about a fifth of TPC-H Q15's, Q17's and Q20's answers at SF 1 (in process,
# 2026-11-28: 0.46 -> 0.40 s, 0.34 -> 0.27 s, 0.53 -> 0.45 s at 100; collection off:
# 0.34, 0.25, 0.42 s). Cyclic garbage (a discarded tree's parent links) that outlives
# the younger collections now waits ten times as many allocations for a full one.
FULL_COLLECTION_EVERY = 100


def _fewer_full_collections() -> None:
    """The process's full collections at most every ``FULL_COLLECTION_EVERY`` younger
    ones (a threshold already higher is kept)."""
    young, middle, full = gc.get_threshold()
    if 0 < full < FULL_COLLECTION_EVERY:
        gc.set_threshold(young, middle, FULL_COLLECTION_EVERY)


class Engine:
    """Shared by every session: rules, backend, ledger, the caches and the random source."""

    def __init__(self, rules: Rules, backend: Backend, rng: RandomSource | None = None,
                 store: Backend | None = None) -> None:
        """``store``: where the ledger, the logins and the answer cache live, when not
        where ``backend`` keeps them (``Backend.ledger_store``: a Spark backend has no
        transactions to keep them)."""
        self.rules = rules
        self.backend = backend
        _fewer_full_collections()
        backend.probe_capabilities()
        _attach(rules, backend)
        _check_schema(rules, backend)
        self.ledger = Ledger(store or backend.ledger_store(), rules)
        self.cache = AnswerCache(self.ledger.backend)
        # c per (bound statement, data version), kept for every later process
        self.unit_bound_store = UnitBounds(self.ledger.backend)
        self.shapes = ShapeCache()  # analyses by statement shape, for every session
        for table in rules.tables.values():
            if not table.public or table.join_keys:  # a joinable public table's keys, too
                backend.track_versions(table.name)
        self.rng = rng or SecureSource()
        self._unit_bounds = PerVersion()  # c per (table, joined units)
        # (table, key, most) -> no value of the key in more than ``most`` rows
        # (``_bounded_keys``)
        self._bounded = PerVersion()
        self._public_keys = PerVersion()  # a public table's keys per statement
        # idp.answers' entries met or stored by this process, by (analyst, key): a repeat
        # reads no entry from the backend
        self._answers: OrderedDict[tuple[str, str], dict[str, Any]] = OrderedDict()
        self._answers_lock = threading.Lock()
        # the tables a plan's version is made of -> (that version, when it was read, the
        # backend's quiet mark before it was read)
        self._versions: dict[tuple[str, ...], tuple[str, float, int | None]] = {}
        # ``cache_key``'s keys by (the plan's id, sql) and version: (the plan, kept alive
        # so that its id is not reused while kept, the key)
        self._keys = PerVersion()

    @contextmanager
    def view(self, plan: QueryPlan, ahead: Sequence[tuple[str, tuple]] = ()
             ) -> Iterator[View]:
        """A snapshot of the backend with the data version of the plan's table (and of
        the public tables it joins: an answer depends on them too), read once for the
        cache lookup and the statistics. GROUP BY terms over public columns get their
        keys here, before anything is charged: too many of them refuse the query.
        ``ahead``: reads sent with the version (``Transaction.ahead``; ``expected``)."""
        mark, read_at = self.backend.quiet_mark(), time.monotonic()
        with self.backend.reading() as tx:
            for sql, params in ahead:
                tx.ahead(sql, params)
            by_name = {plan.table.name: self.backend.data_version(tx, plan.table.name)}
            versions = {}
            for join in plan.joins:
                versions[join.alias] = by_name[join.table.name] = self.backend.data_version(
                    tx, join.table.name)
            # the tables EXISTS reads, and those units are derived through (unit_via)
            for name in (*(semi.table.name for semi in plan.semi_joins), *chain_tables(plan)):
                by_name[name] = self.backend.data_version(tx, name)
            tables = _tables_of(plan)
            version = _composed(by_name, tables)
            if version is not None:
                self._versions[tables] = (version, read_at, mark)
            with bounded_keys(self._bounded_keys(plan, tx, by_name)):
                yield View(tx, version, self._with_public_keys(plan, tx, versions),
                           _composed(by_name, bound_tables(plan)))

    def _bounded_keys(self, plan: QueryPlan, tx: Transaction,
                      versions: dict[str, str | None]) -> list[tuple[str, tuple[str, ...], int]]:
        """The keys the plan's statements read as occurring at most m times
        (``bounded_reads``: the keys its links name, its public joins' keys) that hold
        so in ``tx``'s snapshot: read there once per data version of their table (a
        write to the table changes its version, so the next view reads them again), each
        then sent as its table itself instead of its rows of a key counted at most m
        times (docs/privacy.md §3.13). A table without a version is counted in every
        statement, as before."""
        known = []
        for read in bounded_reads(plan):
            version = versions.get(read[0])
            if version is None:
                continue
            if self._bounded.get(read, version, lambda read=read: not tx.execute(
                    keys_beyond_sql(*read, self.backend.dialect))):
                known.append(read)
        return known

    def _read_per_version(self, sql: str, version: str | None, read: Callable[[], T]) -> T:
        """A public table's keys read by ``sql``, kept per data version (a table without
        one is read every time)."""
        return read() if version is None else self._public_keys.get(sql, version, read)

    def _with_public_keys(self, plan: QueryPlan, tx: Transaction,
                          versions: dict[str, str | None]) -> QueryPlan:
        """``plan`` with every GROUP BY term over a public table's column keyed by that
        column's distinct values in the public table among its rows the WHERE's
        conditions on that table alone keep (public: reading them reveals nothing of the
        protected data; a key they drop has no row in the answer, so no group is
        answered for it), read once per data version of that table and conditions."""
        if not any(term.kind == PUBLIC for term in plan.group_by):
            return plan
        limit = self.rules.defaults.max_groups
        terms = []
        for term in plan.group_by:
            if term.kind == PUBLIC:
                sql = public_keys_sql(plan, term, limit + 1, self.backend.dialect)
                version = versions.get(plan.table.columns[term.column].join)
                keys = self._read_per_version(
                    sql, version, lambda sql=sql: tuple(row[0] for row in tx.execute(sql)))
                if term.default is not None and term.default not in keys:
                    keys = (*keys, term.default)  # COALESCE(r.name, 'unknown'): its NULLs'
                term = replace(term, keys=keys)
            terms.append(term)
        keyed = replace(plan, group_by=tuple(terms))
        joint = []
        for indices in _joined_terms(keyed):
            sql = joint_keys_sql(keyed, indices, limit + 1, self.backend.dialect)
            read = tuple(sorted({plan.table.columns[keyed.group_by[i].column].join
                                 for i in indices}))
            version = None if any(versions.get(alias) is None for alias in read) else \
                ";".join(str(versions[alias]) for alias in read)
            combos = self._read_per_version(
                sql, version, lambda sql=sql: tuple(tuple(row) for row in tx.execute(sql)))
            joint.append((indices, combos))
            for at, index in enumerate(indices):  # each term's keys: those combined
                held = {combo[at] for combo in combos}
                terms[index] = replace(terms[index], keys=tuple(
                    key for key in terms[index].keys if key in held))
        keyed = replace(plan, group_by=tuple(terms), joint=tuple(joint))
        if keyed.group_count > limit:
            raise NotSupported(f"GROUP BY would answer more than the rules' max_groups = "
                               f"{limit:,} groups (the public table's values, in every "
                               "combination); filter the public table's column or group "
                               "by fewer columns")
        return keyed

    @contextmanager
    def _in(self, plan: QueryPlan, view: View | None) -> Iterator[View]:
        """``view`` while the backend can still read in it, else a new one (DuckDB opens
        the database again after a fatal error, e.g. a checkpoint that met a full disk
        on the debit's commit: the old snapshot's cursor is then dead)."""
        if view is not None and self.backend.readable(view.tx):
            yield view
        else:
            with self.view(plan) as fresh:
                yield fresh

    def statistics(self, plan: QueryPlan, view: View | None = None
                   ) -> tuple[int, dict[tuple, GroupStats], str | None]:
        """The shift s = c·g (SPEC §5.2), every group's statistics and the table's data
        version (None: the backend has no cheap one), from one snapshot (``view``, else
        a new one); with them, where asked, the smooth sensitivities (DP), the draws of
        the exponential mechanism (DP, 'instance': they read the data, so they are drawn
        here, after the debit) or the private levels of the local sensitivities (iDP,
        ``report_scale = "private"``), read from windows of ranks in the same snapshot."""
        dialect = self.backend.dialect
        clip = plan.contribution_bound if plan.mechanism.model == "dp" else None
        bounded = (plan.mechanism.local and not plan.group_by
                   and self.rules.defaults.report_scale == "private")
        with self._in(plan, view) as reading:
            plan, tx = reading.plan or plan, reading.tx
            shift, groups, version = self._statistics(plan, reading, clip, bounded)
            if plan.group_by and not plan.group_count:
                # a partition selection that released no key (§3.12): nothing to clip,
                # centre or draw for, and each group's share of ε would divide by none
                return shift, groups, version
            if laddered(plan):
                self._ladders(plan, tx, clip, shift, groups)
                self._centred(plan, tx, clip, shift, groups)
            if any(agg.kind.row.paired for agg in plan.aggregates):
                self._pairs(plan, tx, clip, groups)
            if plan.mechanism.scale != SMOOTH and not bounded and not plan.mechanism.exponential:
                return shift, groups, version
            by_column = {need.column: need for need in column_needs(plan, shift, bounded)}
            if plan.mechanism.exponential:
                for scope in draw_scopes(plan):
                    self._draws(plan, tx, groups, by_column, clip, shift, scope)
                return shift, groups, version

            def window_read(request: RankRequest):
                return rank_window(plan, by_column[request.column], dialect, clip, tx.execute,
                                   request.from_top)(request.first, request.last)

            if bounded:
                groups[()].bounds = answered(
                    private_levels(plan, groups[()], shift,
                                   self.rules.defaults.local_sensitivity_floor, self.rng),
                    window_read)
            else:
                groups[()].smooth = answered(smooth_sensitivities(plan, groups[()], shift),
                                             window_read)
            return shift, groups, version

    def _draws(self, plan: QueryPlan, tx: Transaction, groups: dict[tuple, GroupStats],
               by_column: dict, clip: int | None, shift: int, scope: DrawScope) -> None:
        """The exponential mechanism's draws over ``scope`` (``draw_scope``) into each
        group's ``instance``: over the scope the other aggregates read (``clip`` rows
        per unit under DP), over weighted ranks (grouped percentiles of a user-level
        table: ``_weighted_draws``), over one row per unit (the same in the piecewise
        form, ``HashedClip``) or one value per unit (MAX and MIN, ``UnitExtremes``),
        whose n are read here."""
        dialect, execute = self.backend.dialect, tx.execute
        if scope == WEIGHTED:
            self._weighted_draws(plan, tx, groups, by_column)
            return
        spans_of = first_windows(plan, shift, scope)
        if not spans_of:
            return
        counts = groups
        if scope is not ALL_ROWS:
            clip = HashedClip(1) if scope == ONE_ROW else replace(scope, cap=clip)
            needs = tuple(ColumnNeeds(column, count=True, lower=by_column[column].lower,
                                      upper=by_column[column].upper) for column in spans_of)
            counts = compute_statistics(plan, needs, self.backend.capabilities, clip, execute)
        # under GROUP BY every group's first windows in one read (grouped_windows)
        # (widened where the groups are few: a draw's wider window is then read already);
        # without GROUP BY, what the statistics read at ranks (``with_window_extremes``)
        if plan.group_by:
            first = {column: grouped_windows(plan, by_column[column], self.backend.capabilities,
                                             clip, execute,
                                             widened_spans(spans, len(plan.group_keys())))
                     for column, spans in spans_of.items()}
        else:
            first = {column: {(): by_rank(counts.get((), GroupStats()).column(column))}
                     for column in spans_of} if scope is ALL_ROWS else {}

        fetches: dict[tuple[str, tuple], Fetch] = {}

        def draws_read(request: RankRequest | CountRequest):
            """A draw's counts around a candidate, or its window of ascending ranks
            (under GROUP BY the first one from ``first``), in its group; each read
            widened and kept (``widened``), so that widening the window rarely reads."""
            need, key = by_column[request.column], request.group
            if isinstance(request, CountRequest):
                return rank_counts(plan, need, dialect, clip, execute, key)(request.point)
            if (request.column, key) not in fetches:
                n = counts.get(key, GroupStats()).column(request.column).n
                fetches[request.column, key] = near(
                    first.get(request.column, {}).get(key, {}),
                    widened(order_statistics(plan, need, dialect, clip, execute, n, key), n))
            return fetches[request.column, key](request.first, request.last)

        for key in plan.group_keys() if plan.group_by else [()]:
            group = GroupStats.of(groups, key)
            _keep_draws(plan, group, answered(instance_releases(
                plan, counts.get(key, GroupStats()), shift, self.rng, key, scope), draws_read))

    def _weighted_draws(self, plan: QueryPlan, tx: Transaction,
                        groups: dict[tuple, GroupStats], by_column: dict) -> None:
        """The draws of the plan's percentiles over weighted ranks (a user-level table
        under GROUP BY: privacy/inverse_sensitivity.py's ``weighted_release``) into
        each group's ``instance``: every group's first windows in one statement per
        column and fraction, a wider window or a tail's weights per group as a draw
        asks (pushdown/weighted.py)."""
        dialect, execute = self.backend.dialect, tx.execute
        first = {(column, fraction, reach): weighted_windows(
            plan, by_column[column], dialect, execute, fraction, reach)
            for column, fraction, reach in weighted_reaches(plan)}

        def weights_read(request):
            need, key = by_column[request.column], request.group
            if isinstance(request, WeightCountRequest):
                return weighted_counts(plan, need, dialect, execute, key)(request.point,
                                                                          request.after)
            found = first.get((request.column, request.fraction, request.reach))
            if found is None:
                found = weighted_windows(plan, need, dialect, execute, request.fraction,
                                         request.reach, key)
            return found.get(key, (0, 0, []))

        for key in plan.group_keys():
            _keep_draws(plan, GroupStats.of(groups, key),
                        answered(weighted_releases(plan, self.rng, key), weights_read))

    def _ladders(self, plan: QueryPlan, tx: Transaction, clip: int | None, shift: int,
                 groups: dict[tuple, GroupStats]) -> None:
        """Each group's per-unit contributions against the ladders of the plan's SUM,
        AVG, STDDEV and VARIANCE (privacy/contribution_bounds.py), in one more statement;
        the bounds of those clipped across groups drawn from them (after the debit)."""
        table = plan.table
        indexes = joint_clipped(plan, shift)
        wanted, joint = ladder_reads(plan, indexes)
        if not wanted:
            return
        ladders = tuple(rungs(contribution, table.columns.get(contribution.column),
                              shift // table.group_size) for contribution in wanted)
        for key, found in contribution_ladders(plan, wanted, ladders, self.backend.capabilities,
                                               clip, tx.execute, joint,
                                               isinstance(plan.post, TopChoice)).items():
            GroupStats.of(groups, key).ladders = found
        draw_joint_bounds(plan, indexes, shift, groups, self.rng)

    def _centred(self, plan: QueryPlan, tx: Transaction, clip: int | None, shift: int,
                 groups: dict[tuple, GroupStats]) -> None:
        """STDDEV/VARIANCE over several rows per unit (privacy/variance.py): each group's
        count and mean released (after the debit), then each unit's Σ(x − m̂)² about its
        group's m̂ against a public ladder, in one more statement; each group's
        ``centred``."""
        wanted = spread_centres(plan, groups, self._calibration(plan, shift), self.rng)
        if not wanted:
            return
        contributions = tuple(dict.fromkeys(wanted.values()))
        found = contribution_ladders(plan, tuple(c for c, _ in contributions),
                                     tuple(r for _, r in contributions),
                                     self.backend.capabilities, clip, tx.execute)
        for key in plan.group_keys() if plan.group_by else [()]:
            group = GroupStats.of(groups, key)
            for index, (contribution, _) in wanted.items():
                if contribution in found.get(key, {}):
                    group.centred[index] = found[key][contribution]

    def _calibration(self, plan: QueryPlan, shift: int) -> Calibration:
        defaults = self.rules.defaults
        return Calibration(plan.mechanism.model, shift, defaults.local_sensitivity_floor,
                           defaults.exact_release, defaults.report_scale, plan.mechanism.local)

    def _pairs(self, plan: QueryPlan, tx: Transaction, clip: int | None,
               groups: dict[tuple, GroupStats]) -> None:
        """CORR and its kin (privacy/correlation.py): the units beyond each rung over the
        whole scope, the bounds drawn from them (after the debit), then every group's
        sums at those bounds, in two more statements; each group's ``pairs``."""
        indexes = tuple(index for index, agg in enumerate(plan.aggregates)
                        if agg.kind.row.paired)
        columns, capabilities = plan.table.columns, self.backend.capabilities
        ladders = {index: (row_rungs(columns[plan.aggregates[index].other]),
                           row_rungs(columns[plan.aggregates[index].column]))
                   for index in indexes}
        beyond = bound_counts(plan, indexes, ladders, capabilities, clip, tx.execute)
        bounds = {index: draw_bounds(plan, index, beyond[index], self.rng)
                  for index in indexes}
        found = pair_sums(plan, bounds, capabilities, clip, tx.execute)
        for key in plan.group_keys() if plan.group_by else [()]:
            sums = found.get(key, {})
            GroupStats.of(groups, key).pairs = {
                index: sums.get(index) or PairSums(*bounds[index]) for index in indexes}

    def _statistics(self, plan: QueryPlan, view: View, clip: int | None,
                    counted: bool) -> tuple[int, dict[tuple, GroupStats], str | None]:
        """Under DP c is the declared contribution bound (of two protected tables joined
        on the unit: the product of theirs; times the multiplicity of the public joins:
        ``QueryPlan.contribution_bound``); without a privacy unit c is that multiplicity
        (a record becomes at most that many joined rows). Under iDP it is the table's largest
        per-unit row count (joined: the most joined rows one unit owns), recomputed only
        when the data version of the tables it is read from changes. Where the backend
        has no cheap version, a fingerprint of the unit column
        serves, riding along in the statistics' first scan when there is no GROUP BY
        (the counts and sums do not depend on s; the ranks do). ``counted``: every
        column's n is needed (the private levels read windows)."""
        table, capabilities = plan.table, self.backend.capabilities
        tx, version = view.tx, view.version

        def needs(shift: int):
            found = column_needs(plan, shift, counted)
            if (plan.mechanism.exponential and not plan.group_by
                    and capabilities.extremes_in_pass):
                return with_window_extremes(found, first_windows(plan, shift, ALL_ROWS))
            return found

        def compute(shift: int, clip: int | None) -> dict[tuple, GroupStats]:
            """No statistics pass where nothing reads it: a ``TopChoice`` is answered
            from its ladders alone (TPC-H Q15 ran a grouped pass of counts and sums per
            supplier that nothing read), and so is a plan of ``ladders_alone``."""
            if isinstance(plan.post, TopChoice) or ladders_alone(plan, shift):
                return {}
            return compute_statistics(plan, needs(shift), capabilities, clip, tx.execute)

        if table.privacy_unit is None or plan.mechanism.model != "idp":
            shift = (clip or plan.multiplicity) * table.group_size
            return shift, compute(shift, clip), version
        if plan.per_unit is not None:  # grouped by the unit and keys (docs/privacy.md §3.11)
            shift = self._units_shift(plan.per_unit.source, tx, view.unit_version)
            return shift, compute(shift, None), version
        if view.unit_version is None and joined_units(plan) is not None:
            shift = self._read_shift(plan, tx)  # uncached
            return shift, compute(shift, None), None
        if view.unit_version is None:
            unit = table.columns.get(table.privacy_unit)
            folded = self.backend.fingerprint_aggregates(
                table.privacy_unit, unit is not None and unit.type == "int")
            if not plan.group_by and not plan.joins:  # a join's rows are not the table's
                group, values = first_pass(plan, needs(1), capabilities, None, tx.execute,
                                           folded)
                shift = self._shift(plan, tx, self.backend.fingerprint_text(values))
                remaining_passes(plan, needs(shift), group, capabilities.dialect, None,
                                 tx.execute)
                return shift, {(): group}, None
            scan = exp.select(*folded).from_(table_ref(table.name))
            shift = self._shift(plan, tx, self.backend.fingerprint_text(
                tx.execute(scan.sql(dialect=capabilities.dialect, copy=False))[0]))
            return shift, compute(shift, None), None
        shift = self._shift(plan, tx, view.unit_version)
        return shift, compute(shift, None), version

    def answer(self, plan: QueryPlan, view: View | None = None
               ) -> tuple[list[tuple], list[list[Released]], str | None]:
        """Every group's key and released answers, and the data version they were
        computed at, read in ``view`` (else a new snapshot); after the debit."""
        if plan.mechanism.individual:
            true, version = self.unit_value(plan, view)
            return [()], [[release_refined(plan, true, self.rng)]], version
        with self._in(plan, view) as reading:
            plan = reading.plan or plan  # its public GROUP BY keys read
            if plan.delta is not None:  # and its keys from the data selected
                plan = self._selected(plan, reading.tx)
                reading = replace(reading, plan=plan)
            shift, groups, version = self.statistics(plan, reading)
        if plan.mechanism.prior is not None:
            return [()], [[release_refined(plan, exact_answer(plan, groups[()]), self.rng)]], \
                version
        calibration = self._calibration(plan, shift)
        if isinstance(plan.post, TopChoice):  # one group, chosen privately
            return *top_release(plan, groups, shift, self.rng), version
        keys = plan.group_keys() if plan.group_by else [()]
        if not keys:  # no key released: nothing to compute
            return [], [], version
        return keys, release_groups(plan, groups, keys, calibration, self.rng), version

    def _selected(self, plan: QueryPlan, tx: Transaction) -> QueryPlan:
        """``plan`` with the keys of its GROUP BY terms without declared keys chosen by a
        partition selection (docs/privacy.md §3.12), answered as declared keys with the
        rest of the ε. Each such term's selection gets an equal part of the selection's
        share of ε and of δ; together they keep at most ``max_groups`` combinations of
        keys (each at most the whole root of what the other terms leave: public). After
        the debit: the selection reads the data. The counts of the keys that are not
        released stay in this function."""
        selecting = [i for i, term in enumerate(plan.group_by) if term.kind == SELECTED]
        others = math.prod(len(term.keys) for term in plan.group_by if term.kind != SELECTED)
        cap = whole_root(max(1, self.rules.defaults.max_groups // max(1, others)),
                         len(selecting))
        selection = selection_of(plan)
        terms = list(plan.group_by)
        for index in selecting:
            # read a batch at a time: 3 M distinct keys held whole grew the process by
            # some 365 MiB beside the backend's own (benchmarks/selection_memory.py)
            counts = itertools.chain.from_iterable(tx.batches(
                key_counts_sql(plan, index, selection.keys_per_unit, self.backend.dialect),
                SELECTION_BATCH))
            keys = selection.select(counts, cap, self.rng)
            if terms[index].type == "int":  # an int column stored as floats: 3.0 is 3
                keys = tuple(int(key) if isinstance(key, float) and key.is_integer() else key
                             for key in keys)
            terms[index] = replace(terms[index], keys=keys)
        return replace(plan, group_by=tuple(terms), delta=None,
                       epsilon=plan.epsilon * (1 - SELECTION_SHARE))

    def unit_value(self, plan: QueryPlan, view: View | None = None) -> tuple[Any, str | None]:
        """One unit's value of the asked column (the mean of its rows for a number, the
        first in order otherwise; None when it has none) and the data version. Numbers
        are normalised first, as for every statistic (NaN rows skipped, the rest clamped
        to the declared domain or ±MAGNITUDE_CAP), so the value is finite or None."""
        table, name = plan.table, plan.aggregates[0].column
        column, declared = exp.column(name, quoted=True), table.columns[name]
        value = (exp.Avg(this=clamped_to_domain(column, declared.lower, declared.upper))
                 if declared.numeric else exp.Min(this=column))
        query = exp.select(value).from_(table_ref(table.name)).where(plan.where)
        with self._in(plan, view) as reading:
            return (reading.tx.execute(query.sql(dialect=self.backend.dialect, copy=False))[0][0],
                    reading.version)

    def cached(self, analyst: str, plan: QueryPlan, charge: Charge,
               view: View) -> dict[str, Any] | None:
        """The answer this analyst was already given for this query over the data as it
        is in ``view``; None when there is none. A read: the session records the repeat
        (``Ledger.served_from_cache``) before it sends it."""
        if not self.rules.defaults.answer_cache or view.version is None:
            return None
        key = self.cache_key(charge.sql, plan, view.version)
        kept = self._kept(analyst, key)
        if kept is not None:
            return kept
        same = self.cache.backend is self.backend  # else the store's own snapshot
        found = self.cache.lookup(view.tx if same else None, analyst, key)
        if found is not None:
            self._keep(analyst, key, found)
        return found

    def expected(self, analyst: str, plan: QueryPlan, charge: Charge,
                 ledger: Ledger | None) -> list[tuple[str, tuple]]:
        """What a ``view`` of this query is likely to read after the data version, to be
        sent with it (``Transaction.ahead``: on PostgreSQL one round trip for all),
        guessed under the version last read for the plan's tables: the answer cache's
        entry where this process holds none under it (a fresh answer's look-up), else
        what the analyst has left (a repeat's, read by ``ledger``'s
        ``served_from_cache`` in the view; None: not read there). A guess that the
        version read proves wrong costs one read that nothing uses; the statement is
        then run again as usual."""
        if not self.rules.defaults.answer_cache or self.cache.backend is not self.backend:
            return []
        recent = self._versions.get(_tables_of(plan))
        if recent is None:
            return []
        key = self.cache_key(charge.sql, plan, recent[0])
        if self._kept(analyst, key) is None:
            return [self.cache.lookup_statement(analyst, key)]
        return [] if ledger is None else [ledger.replay_left_statement(analyst)]

    def replay(self, analyst: str, plan: QueryPlan, charge: Charge) -> dict[str, Any] | None:
        """The answer this analyst was already given for this query, without reading the
        backend: when the data version last read for the plan's tables is still current
        (``still_current``: nothing was written to the backend since, or it was read less
        than the rules' ``replay_window_ms`` ago) and the answer under it is kept in
        memory. None: ask through ``view`` and ``cached``. Within the window a repeat
        may be of data up to that window older than the backend's: an answer already
        released and paid for."""
        if not self.rules.defaults.answer_cache:
            return None
        recent = self._versions.get(_tables_of(plan))
        if recent is None or not still_current(self.backend, recent[2], recent[1],
                                               self.rules.defaults.replay_window_ms):
            return None
        return self._kept(analyst, self.cache_key(charge.sql, plan, recent[0]))

    def _kept(self, analyst: str, key: str) -> dict[str, Any] | None:
        with self._answers_lock:
            found = self._answers.get((analyst, key))
            if found is not None:
                self._answers.move_to_end((analyst, key))
            return found

    def _keep(self, analyst: str, key: str, answer: dict[str, Any]) -> None:
        with self._answers_lock:
            self._answers[(analyst, key)] = answer
            if len(self._answers) > ANSWERS_KEPT:
                self._answers.popitem(last=False)

    def remember(self, analyst: str, plan: QueryPlan, charge: Charge, version: str | None,
                 answer: dict[str, Any], view: View | None = None) -> dict[str, Any]:
        """Cache a new answer where ``cached`` would find it; return the answer to send
        (a racing session's, when it was stored first). ``view``: the one the answer was
        computed in, its last use: the entry's write ends it where the backend can
        (``AnswerCache.store``'s ``after``)."""
        if version is None or not self.rules.defaults.answer_cache:
            return answer
        key = self.cache_key(charge.sql, plan, version)
        same = view is not None and self.cache.backend is self.backend
        try:
            kept = self.cache.store(analyst, key,
                                    "+".join([plan.table.name, *(join.table.name for join
                                                                 in plan.joins)]),
                                    version, answer, view.tx if same else None)
        except (BackendUnavailable, DiskFull):
            return answer  # paid and computed: the answer stands, uncached
        self._keep(analyst, key, kept)  # as stored: the one answer of its key
        return kept

    def cache_key(self, sql: str, plan: QueryPlan, version: str) -> str:
        """The answer cache's key, kept by plan (a session's plan of a text is kept
        with it, ``Session.known``), as an answer asks for it up to three times
        (``replay``, ``cached``, ``remember``), every repeat asks again, and a plan's
        ``repr`` costs a tenth of a millisecond."""
        def computed() -> tuple[QueryPlan, str]:
            defaults = self.rules.defaults
            calibration = (defaults.local_sensitivity_floor, defaults.exact_release,
                           defaults.report_scale, defaults.noise_scale)
            return plan, cache_key(sql, plan, calibration, version)

        return self._keys.get((id(plan), sql), version, computed)[1]

    def _shift(self, plan: QueryPlan, tx: Transaction, version: str) -> int:
        """c·m·g with c cached per (table, data version); for two protected tables joined
        on the unit, per (join, pair of data versions); m the multiplicity of the public
        joins (from the rules: one protected row is at most m joined rows, §3.9)."""
        bound = self._unit_bounds.get(
            (plan.table.name, joined_units(plan)), version,
            lambda: self.unit_bound_store.bound(
                plan.table.name, plan_unit_bound_sql(plan, self.backend.dialect), version,
                lambda sql: _read_bound(tx, sql)))
        return bound * plan.multiplicity * plan.table.group_size

    def _units_shift(self, source: QueryPlan, tx: Transaction, version: str | None) -> int:
        """s of a relation of one row per unit and key combination, under iDP: c·m·g of
        its source (the rows grouped), since a unit has at most one row of the relation
        per (joined) row of its own in scope, and neighbours keep every unit's rows, so
        c (the source's largest) bounds its rows of the relation on D and every
        neighbour. Cached as the source's own c where the relation's version is its
        (one table with its own unit column), else read again."""
        if version is None or joined_units(source) is not None:
            return self._read_shift(source, tx)
        return self._shift(source, tx, version)

    def _read_shift(self, plan: QueryPlan, tx: Transaction) -> int:
        """c·m·g with c read in the backend now (no data version to keep it by)."""
        return self._bound(plan, tx) * plan.multiplicity * plan.table.group_size

    def _bound(self, plan: QueryPlan, tx: Transaction) -> int:
        """c, read in the backend: the largest number of (joined) rows one unit owns."""
        return _read_bound(tx, plan_unit_bound_sql(plan, self.backend.dialect))


def _composed(versions: dict[str, str | None], tables: tuple[str, ...]) -> str | None:
    """The data version of ``tables`` together (a plan's, ``_tables_of``; c's,
    ``bound_tables``): the first table's version, then ``;name:version`` for each other;
    None if one has none."""
    found = [versions.get(name) for name in tables]
    if not tables or any(version is None for version in found):
        return None
    return ";".join([str(found[0]), *(f"{name}:{version}" for name, version
                                      in zip(tables[1:], found[1:]))])


def _read_bound(tx: Transaction, sql: str) -> int:
    return max(1, int(tx.execute(sql)[0][0]))


def _tables_of(plan: QueryPlan) -> tuple[str, ...]:
    """The tables whose data versions make up the plan's (``Engine.view``), in order."""
    return (plan.table.name, *(join.table.name for join in plan.joins),
            *(semi.table.name for semi in plan.semi_joins), *chain_tables(plan))


def answered(asking: Asking[T], read: Callable[[RankRequest | CountRequest], Any]) -> T:
    """Run a mechanism that asks for data as it goes (privacy/requests.py) to its
    result, sending it ``read(request)`` for each request it yields: the reads happen
    here, in the engine, between the mechanism's steps (psycopg's generators and their
    waiting loop, with the data in place of the socket)."""
    answer = None
    try:
        while True:
            answer = read(asking.send(answer))
    except StopIteration as done:
        return done.value


def _attach(rules: Rules, backend: Backend) -> None:
    """The tables the rules give a ``location``, read from there (backend.attach)."""
    for table in rules.tables.values():
        if table.location is None:
            continue
        try:
            backend.attach(table.name, table.location)
        except (NotSupported, BackendFailed) as exc:
            raise RulesError(f"{where_declared(rules, f'tables.{table.name}.location')}: "
                             f"[tables.{table.name}] {exc.message}") from None


def _check_unit_attribute(rules: Rules, table: str, unit: str, name: str,
                          backend: Backend) -> None:
    """A column declared ``unit_attribute`` holds one value (or only NULL) on all the
    rows of each unit, else a unit's rows would sit in several groups, each of which
    would spend the whole ε on it: the proxy does not start (the owner's mistake, caught
    before any analyst is billed for it)."""
    column, key = exp.column(name, quoted=True), exp.column(unit, quoted=True)
    mixed = exp.or_(exp.Count(this=exp.Distinct(expressions=[column])) > 1,
                    exp.and_(exp.Count(this=column.copy()) > 0,
                             exp.Count(this=column.copy()) < exp.Count(this=exp.Star())))
    units = exp.select(key).from_(table_ref(table)).group_by(key.copy()).having(mixed)
    statement = exp.select(exp.Count(this=exp.Star())).from_(units.subquery("u"))
    (count,), = backend.read(statement.sql(dialect=backend.dialect))
    if count:
        raise RulesError(f"{rules.path}: [tables.{table}.columns.{name}] unit_attribute: "
                         f"{count} unit(s) of {unit} have rows with different values of "
                         f"{name} (or some NULL); declare it only for a property of the unit "
                         "itself, or remove unit_attribute")


def _check_schema(rules: Rules, backend: Backend) -> None:
    """Every protected table and declared column must exist, so that a mistake in the
    rules stops the proxy at start instead of failing (and being charged) per query:
    the first of ``schema_problems`` stops it."""
    for table in rules.tables.values():
        problems = schema_problems(rules, table, backend)
        if problems:
            raise problems[0]
        if table.public and not table.join_keys and backend.dialect != "postgres":
            # what statements over it, run as written, are typed over elsewhere than on
            # PostgreSQL (``Session._as_postgresql``); one it cannot read keeps its rule
            # types: the statements fail there as before
            try:
                _described(table, backend)
            except BackendFailed:
                pass


def _described(table: Table, backend: Backend) -> dict[str, str]:
    """The backend's columns of ``table`` and their stored types, read from its schema
    (``LIMIT 0``), never a row; each declared column's recorded as its ``Column.stored``,
    the type its values are answered as (``proxy.result_types``)."""
    statement = exp.select("*").from_(table_ref(table.name)).limit(0)
    described, _ = backend.query_with_columns(statement.sql(dialect=backend.dialect))
    present = {name.lower(): kind for name, kind in described}
    for name, column in table.columns.items():
        if name in present:
            object.__setattr__(column, "stored", present[name])
    return present


def schema_problems(rules: Rules, table: Table, backend: Backend
                    ) -> list[PrivilegeMissing | RulesError]:
    """What in the backend keeps ``table``'s rules from starting the proxy, each with
    what to run or change (``idp-proxy rules check`` shows them all). Reads the schema
    only (``LIMIT 0``), never a row; of a public table that protected tables may join
    (``unique``, ``max_rows_per_key``), its declared columns too, and that each such
    column holds every value in at most its declared number of rows (else a join on it
    would multiply protected rows beyond what the shift allows for)."""
    if table.public and not table.join_keys:
        return []
    try:
        present = _described(table, backend)
    except PrivilegeMissing:
        role = backend.read("SELECT current_user")[0][0]
        return [PrivilegeMissing(f"the proxy's database role {role} may not read the table "
                                 f"{table.name}: as its owner, run GRANT SELECT ON "
                                 f"{table.name} TO {role}")]
    except BackendFailed:
        return [RulesError(f"{rules.path}: [tables.{table.name}] the backend has no table "
                           f"{table.name}")]
    declared = set(table.columns) | ({table.privacy_unit} - {None, LINKED_UNIT})
    missing = sorted(declared - set(present))
    problems: list[PrivilegeMissing | RulesError] = [RulesError(
        f"{rules.path}: [tables.{table.name}] the backend's table lacks the declared "
        f"column(s) {', '.join(missing)}")] if missing else []
    problems += [problem for name, column in table.columns.items() if name in present
                 and (problem := _type_problem(rules, table.name, name, column.type,
                                               present[name]))]
    if problems:
        return problems
    try:
        for key, most in table.join_keys.items():
            _check_rows_per_key(rules, table.name, key, most, backend)
        for name, column in table.columns.items():
            if column.unit_attribute:
                _check_unit_attribute(rules, table.name, table.privacy_unit, name, backend)
        if table.link is not None:  # the key a unit_via names: unique in its table
            _check_rows_per_key(rules, table.link.table, (table.link.key,), 1, backend,
                                linked_from=table.name)
    except RulesError as problem:
        return [problem]
    return []


_NUMBERS = {"smallint", "integer", "bigint", "real", "double precision", "numeric"}
_MOMENTS = {"date", "timestamp", "timestamptz"}
_STORED_AS = {"int": _NUMBERS, "float": _NUMBERS, "date": _MOMENTS, "timestamp": _MOMENTS,
              "bool": {"boolean"}}


def _type_problem(rules: Rules, table: str, name: str, declared: str, stored: str
                  ) -> RulesError | None:
    """A declared type the backend's column cannot hold fails every query that reads it,
    after the debit: refused at start instead, naming the rule's line. ``text`` takes
    any column but a number, a moment or a boolean (its keys compare as strings)."""
    base = stored.split("(")[0]
    fits = (base in _STORED_AS[declared] if declared in _STORED_AS
            else base not in _NUMBERS | _MOMENTS | {"boolean"})
    if fits:
        return None
    key = f"tables.{table}.columns.{name}"
    return RulesError(f"{where_declared(rules, key)}: [{key}] declared {declared}, the "
                      f"backend's column is {stored}; declare it as the column is stored, "
                      "or cast it in a view")


def _check_rows_per_key(rules: Rules, table: str, columns: tuple[str, ...], most: int,
                        backend: Backend, linked_from: str | None = None) -> None:
    """Refuse to start when a value of the key ``columns`` (one, or several together)
    occurs in more than ``most`` rows (``linked_from``: the table whose ``unit_via``
    names the key)."""
    if not backend.read(keys_beyond_sql(table, columns, most, backend.dialect)):
        return
    key = key_text(columns)
    if linked_from is not None:
        declared = f"tables.{linked_from}.unit_via"
        raise RulesError(f"{where_declared(rules, declared)}: [{declared}] {table}.{key} is "
                         f"not unique in the backend's table {table} (a value occurs in more "
                         f"than one row): a row of {linked_from} would have no one unit; "
                         "link to a unique key, or make it unique")
    if columns in rules.tables[table].unique:
        raise RulesError(f"{where_declared(rules, f'tables.{table}.unique')}: "
                         f"[tables.{table}.unique] {key} is not unique in the "
                         f"backend's table {table} (a value occurs in more than one row): a "
                         "join on it would count protected rows more than once; remove it "
                         "from unique, or make it unique")
    declared = f"tables.{table}.max_rows_per_key"
    raise RulesError(f"{where_declared(rules, declared)}: [{declared}] {key} = {most} does "
                     f"not hold in the backend's table {table} (a value occurs in more than "
                     f"{most} rows): a join on it would count protected rows more often than "
                     "the shift allows for; raise the bound, or remove the extra rows")


def public_keys_sql(plan: QueryPlan, term: GroupKey, limit: int, dialect: str) -> str:
    """The keys of a GROUP BY term over a public table's column: its distinct non-NULL
    values among the table's rows that meet the WHERE's conditions on that table alone
    (``_conditions_on``, over its columns as the plan names them), in order, at most
    ``limit`` of them."""
    column = plan.table.columns[term.column]
    join = next(j for j in plan.joins if j.alias == column.join)
    value = exp.column(term.column, quoted=True)
    return (exp.select(value.copy()).distinct().from_(_public_rows(join).subquery("_idp_p"))
            .where(exp.and_(value.copy().is_(exp.null()).not_(),
                            *(c.copy() for c in _conditions_on(plan, join.alias))))
            .order_by(value.copy()).limit(limit).sql(dialect=dialect))


def _public_rows(join: Join) -> exp.Select:
    """A public table's rows, each column named as the plan names it (``column_name``),
    for the WHERE's conditions on that table to read."""
    return exp.select(*(exp.alias_(exp.column(name, quoted=True), join.column_name(name),
                                   quoted=True) for name in join.table.columns)
                      ).from_(table_ref(join.table.name))


def _joined_terms(plan: QueryPlan) -> list[tuple[int, ...]]:
    """The GROUP BY terms over public columns keyed together (``QueryPlan.joint``):
    per set of public tables inner-joined to one another (a table joined on another's
    column, not the protected table's), the indices of their terms when two or more.
    A protected row's key of these terms is the values of the public rows it joined,
    which are joined to one another in the same way: the combinations the public rows
    alone form are the only ones a group can hold. None with keys from the data."""
    if any(term.kind == SELECTED for term in plan.group_by):
        return []
    public = {join.alias: join for join in plan.joins if not join.protected}
    linked = {alias: alias for alias in public}

    def root(alias: str) -> str:
        while linked[alias] != alias:
            alias = linked[alias]
        return alias

    for alias, join in public.items():
        for protected, _ in join.pairs:
            other = getattr(plan.table.columns.get(protected), "join", None)
            if not join.left and other in public and not public[other].left:
                linked[root(alias)] = root(other)
    sets: dict[str, list[int]] = {}
    for index, term in enumerate(plan.group_by):
        if term.kind == PUBLIC and term.default is None:  # a COALESCE's NULL: no combination
            sets.setdefault(root(plan.table.columns[term.column].join), []).append(index)
    return [tuple(indices) for indices in sets.values() if len(indices) > 1]


def joint_keys_sql(plan: QueryPlan, indices: tuple[int, ...], limit: int, dialect: str
                   ) -> str:
    """The combinations of the keys of the GROUP BY terms ``indices``, over public
    tables inner-joined to one another (``_joined_terms``): the distinct non-NULL
    values of their columns among the rows of those tables joined as the plan joins
    them, each table's rows those the WHERE's conditions on it alone keep, in order, at
    most ``limit``."""
    columns = [plan.group_by[index].column for index in indices]
    aliases = {plan.table.columns[column].join for column in columns}
    public = [join for join in plan.joins if not join.protected]
    for _ in public:  # the tables linking them, to a fixed point
        aliases |= {getattr(plan.table.columns.get(protected), "join", None)
                    for join in public if join.alias in aliases
                    for protected, _ in join.pairs} - {None}
    joins = [join for join in public if join.alias in aliases]
    rows = None
    for index, join in enumerate(joins):
        read = exp.select("*").from_(_public_rows(join).subquery("_idp_p")).where(
            exp.and_(exp.true(), *(c.copy() for c in _conditions_on(plan, join.alias))))
        named = read.subquery(f"_idp_k{index}")
        if rows is None:
            rows = exp.select(*(exp.column(c, quoted=True) for c in columns)).distinct() \
                .from_(named)
            continue
        on = [exp.column(protected, quoted=True).eq(exp.column(join.column_name(other),
                                                                quoted=True))
              for protected, other in join.pairs  # those on the protected table: left out
              if getattr(plan.table.columns.get(protected), "join", None) in aliases]
        rows = rows.join(named, on=exp.and_(exp.true(), *on), join_type="inner")
    return (rows.where(exp.and_(*(exp.column(c, quoted=True).is_(exp.null()).not_()
                                  for c in columns)))
            .order_by(*(exp.column(c, quoted=True) for c in columns))
            .limit(limit).sql(dialect=dialect))


def _conditions_on(plan: QueryPlan, alias: str) -> list[exp.Expression]:
    """The conjuncts of the plan's WHERE over columns of the public table ``alias`` alone
    (no subquery): what they keep of its rows is public."""
    where = plan.where
    if where is None:
        return []
    found = []
    for condition in conjuncts(where):
        columns = list(condition.find_all(exp.Column))
        if columns and not condition.find(exp.Subquery, exp.Select) and all(
                getattr(plan.table.columns.get(c.name), "join", None) == alias and not c.table
                for c in columns):
            found.append(condition)
    return found


def _keep_draws(plan: QueryPlan, group: GroupStats, drawn: dict[int, Any]) -> None:
    """A group's drawn values, by aggregate index, into its ``instance``, each kept
    within the range its WHERE lets in (``_within_where``)."""
    group.instance = {**group.instance, **{
        index: _within_where(plan, index, value) for index, value in drawn.items()}}


def _within_where(plan: QueryPlan, index: int, value):
    """A drawn percentile, MAX or MIN of a plain column kept within the range the WHERE
    lets its values in (``key_restriction.number_window``: the text alone), where every
    value in scope lies: the middle of a wide cell of candidates (the grid spans the
    declared domain) came back beyond a WHERE's bound (the second review of 2026-11-29).
    Post-processing. Not over joins, whose tables may share the column's name."""
    column = plan.table.columns.get(plan.aggregates[index].column or "")
    if value is None or plan.joins or column is None or column.type not in ("int", "float"):
        return value
    low, high = number_window(plan.where, column.name, column.type == "int")
    if column.lower is not None:  # within the domain too: MAX(age) WHERE age > 200 was 201
        low, high = max(low, column.lower), min(high, column.upper)
    if low > high:
        return value
    return min(max(value, low), high) if column.type == "float" else int(
        min(max(value, low), high))
