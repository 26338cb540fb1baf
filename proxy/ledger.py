"""The privacy budget ledger: side tables in the backend (SPEC §7).

``idp.budgets`` holds one row per analyst (budget and spent, integer micro-ε), and one
under the empty name for the optional global budget;
``idp.ledger`` is append-only: every debit, budget refusal and refund. A debit is one
conditional UPDATE in the same transaction as its ledger row, committed before any
answer is computed: two sessions racing cannot overspend, and a crash after the
commit loses budget, never privacy.

Every debit also adds the answer's ρ (``Loss.rho``) to ``spent_rho``, whichever the
accountant, so the owner can switch from ``pure`` to ``zcdp`` with the answers already
given counted exactly (docs/budget.md, "Accountants"). Under ``zcdp`` the condition of
the debit is on ρ: ``spent_rho + ρ <= budget_rho``, where ``budget_rho`` is the largest
ρ whose ε at the rules' δ is within the budget (proxy/accounting.py: the privacy
filter), kept beside ``budget_micro`` and recomputed when either changes.

With ``budget_refresh`` (docs/budget.md, "Refresh windows") each row keeps when its
calendar window ends; a debit first starts the current window of an account whose window
has ended (spent back to 0), in its own transaction.

A repeat served from the answer cache spends nothing, so its ``served from cache`` row
is an audit record, not a debit: it is kept in memory when the repeat is sent and
written in batches (``REPLAY_ROWS`` rows, or ``REPLAY_SECONDS`` after the oldest, before
the next debit of this process, when the ledger is read here, and at shutdown). A crash
loses at most the rows of the replays of that last moment; no budget changes with them.
"""

from __future__ import annotations

import datetime
import hashlib
import logging
import threading
import time
from contextlib import ExitStack
from dataclasses import dataclass, field
from decimal import Decimal
from typing import NoReturn

from proxy.accounting import RHO_SQL, epsilon_decimal, largest_epsilon, rho_budget
from proxy.backends.base import Backend, still_current
from proxy.errors import (
    BackendFailed,
    BackendUnavailable,
    BudgetExhausted,
    PrivilegeMissing,
    ProxyError,
    QueryCanceled,
    UnknownAnalyst,
)
from proxy.loss import Loss, from_micro, to_micro
from proxy.rules import Rules

# idp.ledger, by whether the backend has identity columns (Capabilities.identity_columns):
# an identity column numbers the rows, else a sequence.
_SCHEMA = {
    True: [
        ("CREATE TABLE IF NOT EXISTS idp.ledger (id BIGINT GENERATED ALWAYS AS IDENTITY "
         "PRIMARY KEY, logged_at TIMESTAMPTZ NOT NULL DEFAULT now(), {columns})"),
    ],
    False: [
        "CREATE SEQUENCE IF NOT EXISTS idp.ledger_id",
        ("CREATE TABLE IF NOT EXISTS idp.ledger (id BIGINT PRIMARY KEY DEFAULT "
         "nextval('idp.ledger_id'), logged_at TIMESTAMPTZ NOT NULL DEFAULT current_timestamp, "
         "{columns})"),
    ],
}
_LEDGER_COLUMNS = (
    "analyst TEXT NOT NULL, sql_hash TEXT NOT NULL, model TEXT NOT NULL, "
    "mechanism TEXT NOT NULL, epsilon_micro BIGINT NOT NULL, delta DOUBLE PRECISION NOT NULL, "
    "neighbour TEXT NOT NULL, status TEXT NOT NULL, released BOOLEAN NOT NULL"
)
_COMMON = [
    ("CREATE TABLE IF NOT EXISTS idp.budgets (analyst TEXT PRIMARY KEY, "
     "budget_micro BIGINT NOT NULL, spent_micro BIGINT NOT NULL DEFAULT 0)"),
]
log = logging.getLogger("idp_proxy.ledger")
GLOBAL = ""  # the idp.budgets row of the global budget (no analyst has an empty name)
LEDGER_FIELDS = ("id", "logged_at", "analyst", "sql_hash", "model", "mechanism", "epsilon",
                 "delta", "neighbour", "status", "released", "rho")
# ``budget show``: the first four under ``pure``; under ``zcdp`` the budget and what was
# spent and remains are ε at ``delta``, with the ρ behind them
BUDGET_FIELDS = ("analyst", "budget", "spent", "remaining", "delta", "rho_budget", "rho_spent")
# columns added since the first ledgers (ρ, for the zcdp accountant): (table, column),
# the end of each account's refresh window (seconds since the epoch; NULL: none) and
# its last reset (microseconds since the epoch; NULL: never)
_ADDED = {("budgets", "budget_rho"): RHO_SQL, ("budgets", "spent_rho"): RHO_SQL,
          ("ledger", "rho"): RHO_SQL, ("budgets", "window_end"): "BIGINT",
          ("budgets", "reset_micro"): "BIGINT"}
_RHO = f"CAST(%s AS {RHO_SQL})"
# Replays' rows (docs/budget.md, "The answer cache"): written when this many wait, or
# this long after the oldest of them was served, whichever comes first.
REPLAY_ROWS = 200
REPLAY_SECONDS = 0.5
_REPLAYS_KEPT = 100_000  # rows kept to retry while the store cannot take them
# Why ε goes back (a refund row's status is "refunded: " and this): the backend could
# not be reached, or a statement paid for at once stopped before its later parts
UNREACHABLE, NOT_COMPUTED = "backend unreachable", "not computed"


@dataclass(frozen=True)
class Charge:
    """What one query costs and how it is recorded."""

    analyst: str
    sql: str
    model: str
    mechanism: str
    loss: Loss  # its δ > 0 for an (ε, δ) query: keys chosen from the data
    neighbour: str
    # when it was made (seconds since the epoch): a refund goes back to its refresh
    # window only (``Ledger._refund``)
    made: int = field(default_factory=lambda: _now(), compare=False)
    # the same in microseconds: a refund goes to an account not reset since (``reset``)
    made_micro: int = field(default_factory=lambda: time.time_ns() // 1000, compare=False)

    @property
    def sql_hash(self) -> str:
        return hashlib.sha256(self.sql.encode()).hexdigest()[:16]


def _placeholders(count: int) -> str:
    """``%s, %s, …``: one parameter per account of an ``IN (…)`` list."""
    return ", ".join(["%s"] * count)


def _debit_sql(micro: int, rho: Decimal, accounts: list[str], zcdp: bool) -> tuple[str, tuple]:
    """The one conditional UPDATE that takes ε (and ρ) from every account that can pay
    it: the condition on ε under the pure accountant, on ρ under zcdp (the filter)."""
    if zcdp:
        condition, left, paid = (f"spent_rho + {_RHO} <= budget_rho",
                                 "budget_rho - spent_rho", rho)
    else:
        condition, left, paid = "spent_micro + %s <= budget_micro", "budget_micro - spent_micro", micro
    sql = (f"UPDATE idp.budgets SET spent_micro = spent_micro + %s, spent_rho = spent_rho + {_RHO} "
           f"WHERE analyst IN ({_placeholders(len(accounts))}) "
           f"AND {condition} RETURNING analyst, {left} AS left_over")
    return sql, (micro, rho, *accounts, paid)


def _lock_sql(accounts: list[str]) -> tuple[str, tuple]:
    """The accounts' rows locked in name order before the UPDATE: an UPDATE locks rows
    in its scan's order, which differs between plans, and two debits of one analyst
    under the global budget locked them in opposite orders (PostgreSQL: deadlock
    detected, 40P01)."""
    sql = (f"SELECT analyst FROM idp.budgets WHERE analyst IN "
           f"({_placeholders(len(accounts))}) ORDER BY analyst FOR UPDATE")
    return sql, tuple(accounts)


@dataclass(eq=False)
class _Debit:
    """One debit waiting for, or done in, a group commit."""

    charge: Charge
    micro: int
    rho: Decimal
    accounts: list[str]
    owner: int = field(default_factory=threading.get_ident)  # the session's thread
    done: bool = False
    rows: list[tuple] | None = None
    error: BaseException | None = None


class _Unpaid(Exception):
    """Some account cannot pay: roll the debit's transaction back."""


class Ledger:
    def __init__(self, backend: Backend, rules: Rules) -> None:
        if not backend.capabilities.transactional:
            raise BackendFailed(f"the {type(backend).__name__.removesuffix('Backend')} backend "
                                "cannot hold the ledger (no transactions); keep the ledger "
                                "in DuckDB or PostgreSQL", "0A000")
        self.backend = backend
        self.rules = rules
        self._owed: list[tuple[Charge, str]] = []  # refunds the backend could not take yet
        self._owed_lock = threading.Lock()
        self._batch = threading.Condition()  # group commit: the debits waiting, the leader
        self._waiting: list[_Debit] = []
        self._leading = False
        # replays' rows not written yet: (charge, when it was served); one writer at a time
        self._replays: list[tuple[Charge, datetime.datetime]] = []
        self._replayed = threading.Condition()
        self._writing = threading.Lock()
        self._writer: threading.Thread | None = None
        self._closed = False
        # what a replay's accounts have left, from a read of its own: accounts ->
        # (the smaller left, read at, the backend's quiet mark before, earliest window end)
        self._lefts: dict[tuple[str, ...], tuple[int | Decimal, float, int | None,
                                                 int | None]] = {}
        try:
            with backend.transaction() as tx:
                # Checked first: CREATE SCHEMA IF NOT EXISTS needs the right to create one
                # even when it exists, which a proxy role given only schema idp lacks.
                if not tx.execute("SELECT 1 FROM information_schema.schemata "
                                  "WHERE schema_name = 'idp'"):
                    tx.execute("CREATE SCHEMA idp")
                for statement in _SCHEMA[backend.capabilities.identity_columns]:
                    tx.execute(statement.format(columns=_LEDGER_COLUMNS))
                for statement in _COMMON:
                    tx.execute(statement)
                self._migrate(tx)
        except PrivilegeMissing:
            role, database = backend.read("SELECT current_user, current_database()")[0]
            raise PrivilegeMissing(
                f"the proxy's database role {role} may not create or use the schema idp "
                f"(its ledger, logins and answer cache): as the database's owner, run GRANT "
                f"CREATE ON DATABASE {database} TO {role}, or CREATE SCHEMA idp AUTHORIZATION "
                f"{role}") from None
        if rules.defaults.global_budget is not None:
            self.open_budget(GLOBAL)
        if self.zcdp:
            self._filter_budgets()
        self._windows()

    @property
    def zcdp(self) -> bool:
        return self.rules.defaults.accounting == "zcdp"

    def _migrate(self, tx) -> None:
        """Add the ρ columns to a ledger made before them. An account's ``spent_rho``
        starts at what its answers since the last reset can have cost, bounded above
        twice: (Σε)²/2 ≥ Σε²/2 over its rows since the reset (no ledger row marks a
        reset), and Σ±ε²/2 over all its rows, charged minus refunded (every refund
        follows its charge, so the rows before the reset add up to ≥ 0); the smaller of
        the two (an exponential-mechanism answer counted as ε²/2, above its ε²/8). The
        old ledger rows keep ρ NULL: it was not recorded then."""
        present = {(table, column) for table, column in tx.execute(
            "SELECT table_name, column_name FROM information_schema.columns "
            "WHERE table_schema = 'idp' AND table_name IN ('budgets', 'ledger')")}
        missing = [added for added in _ADDED if added not in present]
        for table, column in missing:
            tx.execute(f"ALTER TABLE idp.{table} ADD COLUMN IF NOT EXISTS {column} "
                       f"{_ADDED[table, column]}")
        if ("budgets", "spent_rho") not in missing:
            return
        squares = dict(tx.execute(
            "SELECT analyst, SUM(CAST(epsilon_micro AS DECIMAL(38, 0)) * ABS(epsilon_micro)) "
            "FROM idp.ledger WHERE status <> 'refused: budget' GROUP BY analyst"))
        everyone = sum(squares.values(), Decimal(0))
        for account, spent in tx.execute("SELECT analyst, spent_micro FROM idp.budgets"):
            rows = everyone if account == GLOBAL else squares.get(account, Decimal(0))
            square = min(Decimal(spent) ** 2, max(Decimal(rows), Decimal(0)))
            tx.execute(f"UPDATE idp.budgets SET spent_rho = {_RHO} "
                       "WHERE analyst = %s AND spent_rho IS NULL",  # once, if workers race
                       (square / 2_000_000_000_000, account))

    def _filter_budgets(self) -> None:
        """``budget_rho`` of every account for the rules' δ, where it differs (a ledger
        kept under the pure accountant, or a δ changed): each written only if its ε
        budget is still the one read (a grant meanwhile sets its own)."""
        for account, micro, rho in self.backend.read(
                "SELECT analyst, budget_micro, budget_rho FROM idp.budgets"):
            wanted = self._rho_budget(micro)
            if rho is None or Decimal(rho) != wanted:
                self.backend.query(f"UPDATE idp.budgets SET budget_rho = {_RHO} "
                                   "WHERE analyst = %s AND budget_micro = %s",
                                   (wanted, account, micro))

    def _windows(self) -> None:
        """Each account's refresh window as the rules say: a window opened (ending where
        the current one ends, what was spent so far counted in it) where the rules set
        one and the row has none, closed (NULL) where they set none. A changed length
        takes effect when the window in force ends."""
        now = _now()
        for account, end in self.backend.read("SELECT analyst, window_end FROM idp.budgets"):
            refresh = self.rules.refresh_of(account)
            if (refresh is None) != (end is None):
                self.backend.query(
                    "UPDATE idp.budgets SET window_end = %s WHERE analyst = %s",
                    (None if refresh is None else refresh.window_end(now), account))

    def _roll(self, tx, accounts: list[str]) -> float:
        """Start the current window of every account whose window has ended: spent (ε
        and ρ) back to 0, in the debit's transaction before its conditional UPDATE. Two
        racing debits both compute the same end, and the second finds the row rolled.
        Returns the moment it read: the debit's row is logged at it, so a row's time
        lies in the window it was charged in (the transaction's start, the column's
        default, can lie in the window before)."""
        moment = time.time()
        now = int(moment)
        for account in accounts:
            refresh = self.rules.refresh_of(account)
            if refresh is not None:
                tx.execute("UPDATE idp.budgets SET spent_micro = 0, spent_rho = 0, "
                           "window_end = %s WHERE analyst = %s AND window_end <= %s",
                           (refresh.window_end(now), account, now))
        return moment

    def _rho_budget(self, micro: int) -> Decimal | None:
        """The filter's ρ for a budget of ``micro`` micro-ε at the rules' δ (None under
        the pure accountant)."""
        if not self.zcdp:
            return None
        return rho_budget(from_micro(micro), self.rules.defaults.accounting_delta)

    def open_budget(self, analyst: str) -> None:
        """Give an analyst the budget the rules name (else the default), unless open;
        ``GLOBAL`` opens the global budget. Read first: every login asks, and a read
        does not wait for the writers' turn (the INSERT still settles a race)."""
        if self.backend.read("SELECT 1 FROM idp.budgets WHERE analyst = %s", (analyst,)):
            return
        budget = (self.rules.defaults.global_budget if analyst == GLOBAL
                  else self.rules.budget_of(analyst))
        refresh = self.rules.refresh_of(analyst)
        self.backend.query(
            "INSERT INTO idp.budgets (analyst, budget_micro, spent_micro, budget_rho, spent_rho, "
            f"window_end) VALUES (%s, %s, 0, {_RHO}, 0, %s) ON CONFLICT (analyst) DO NOTHING",
            (analyst, to_micro(budget), self._rho_budget(to_micro(budget)),
             None if refresh is None else refresh.window_end(_now())))

    def _accounts(self, analyst: str) -> list[str]:
        """The budgets a query of this analyst draws on."""
        return [analyst] + ([GLOBAL] if self.rules.defaults.global_budget is not None else [])

    def ensure_analyst(self, analyst: str) -> None:
        """Open the analyst's budget from the rules on first use; refuse strangers
        (analysts neither in the rules nor given a login with ``users add``)."""
        if analyst == GLOBAL:
            raise UnknownAnalyst("an analyst name must not be empty")
        if analyst in self.rules.analysts:
            self.open_budget(analyst)
        elif not self.backend.read("SELECT 1 FROM idp.budgets WHERE analyst = %s", (analyst,)):
            raise UnknownAnalyst(
                f"analyst {analyst!r} is not declared in {self.rules.path}; "
                f"known analysts: {', '.join(sorted(self.rules.analysts)) or 'none'}")

    def debit(self, charge: Charge) -> Decimal:
        """Atomically take ε from the analyst's budget and the global one (if the rules
        set one); return what remains of the smaller.

        One conditional UPDATE debits every account that can pay; if one cannot, the
        transaction is rolled back, so it is all or nothing (each row's condition is
        re-checked after waiting for a racing debit). Refused debits are recorded too,
        and raise BudgetExhausted.
        """
        self._settle()
        self._flush_before()
        micro, rho = to_micro(charge.loss.spent), charge.loss.spent_rho
        accounts = self._accounts(charge.analyst)
        if self.backend.capabilities.group_commit:
            rows = self._grouped(_Debit(charge, micro, rho, accounts))
            if rows is None:
                self._refused(charge, micro)
            return self._as_epsilon(min(left for _, left in rows))
        if len(accounts) == 1 and self.rules.refresh_of(charge.analyst) is None:
            rows = self._alone(charge, micro, rho, accounts)
            if not rows:
                self._refused_row(charge, micro)
            return self._as_epsilon(rows[0][1])
        try:
            with self.backend.transaction() as tx:
                if len(accounts) > 1:  # the rows locked in one order by every debit
                    tx.execute(*_lock_sql(accounts))
                moment = self._roll(tx, accounts)
                rows = tx.execute(*_debit_sql(micro, rho, accounts, self.zcdp))
                if len(rows) < len(accounts):
                    raise _Unpaid
                self.append(tx, charge, micro, "charged", released=True, at=moment)
        except _Unpaid:
            self._refused_row(charge, micro)
        return self._as_epsilon(min(left for _, left in rows))

    def _alone(self, charge: Charge, micro: int, rho: Decimal,
               accounts: list[str]) -> list[tuple]:
        """One account with no refresh window: its conditional UPDATE and its
        ``charged`` row in one statement (a row written only if the UPDATE paid), alone
        in its transaction (PostgreSQL: one round trip instead of four). A racing debit
        of the same row waits for this one and re-checks the condition, as in a
        transaction."""
        update, paid = _debit_sql(micro, rho, accounts, self.zcdp)
        columns, values, row = _ledger_row(charge, micro, "charged", released=True)
        return self.backend.query(f"WITH paid AS ({update}), logged AS (INSERT INTO idp.ledger "
                                  f"({columns}) SELECT {values} FROM paid) "
                                  "SELECT analyst, left_over FROM paid", paid + row)

    def _refused_row(self, charge: Charge, micro: int) -> NoReturn:
        """Write a refusal's row and raise BudgetExhausted."""
        with self.backend.transaction() as tx:
            self.append(tx, charge, micro, "refused: budget", released=False)
        self._refused(charge, micro)

    def _as_epsilon(self, left: int | Decimal) -> Decimal:
        """What remains, as people see it: ε (pure), or under zcdp the largest ε one more
        ε-DP answer may take (ρ left = ε²/2); never negative."""
        if self.zcdp:
            return largest_epsilon(Decimal(left))
        return from_micro(max(left, 0))

    def _refused(self, charge: Charge, micro: int) -> NoReturn:
        """Say whose budget is short (the refusal's row is written)."""
        left = self.remaining(charge.analyst)
        needed = Decimal(charge.loss.spent_rho) if self.zcdp else micro
        whose = ("your budget" if self._left(charge.analyst) < needed
                 else "the global budget of all analysts")
        cost = (f"rho {charge.loss.spent_rho.normalize():f} (epsilon {charge.loss.spent})"
                if self.zcdp else f"epsilon {charge.loss.spent}")
        remains = (f"one more answer may take at most epsilon {left}" if self.zcdp
                   else f"{left} remains")
        raise BudgetExhausted(
            f"privacy budget exhausted ({whose}): this query needs {cost} and {remains}; "
            "ask the data owner for more or use a smaller idp.epsilon") from None

    def _grouped(self, debit: _Debit) -> list[tuple] | None:
        """Group commit (backends whose writers take turns anyway: DuckDB): the debits
        waiting while another commits go into one transaction, each still its own
        conditional UPDATE, run one after the other (each sees the ones before it), with
        its own ledger row; one that cannot pay undoes its partial UPDATE and records
        its refusal there. None: refused. A batch that fails fails every debit in it
        (nothing of it committed), except that a cancel of the thread that ran it sends
        the others back to wait for the next batch."""
        while True:
            with self._batch:
                self._waiting.append(debit)
                while not debit.done and self._leading:
                    self._batch.wait()
                if not debit.done:
                    self._leading = True
            if not debit.done:
                try:
                    self._lead(debit)
                finally:
                    with self._batch:
                        self._leading = False
                        self._batch.notify_all()
            if debit.error is None:
                return debit.rows
            if isinstance(debit.error, QueryCanceled) and not self.backend.stopped(debit.owner):
                debit.done, debit.error = False, None  # another session's cancel: again
                continue
            raise debit.error

    def _lead(self, own: _Debit) -> None:
        batch: list[_Debit] = []
        try:
            with self.backend.transaction() as tx:
                with self._batch:
                    batch, self._waiting = self._waiting, []
                for debit in batch:
                    if self.backend.stopped(debit.owner):  # cancelled while it waited
                        debit.error = QueryCanceled("canceling statement due to user request")
                    else:
                        debit.rows = self._take(tx, debit)
        except BaseException as exc:  # noqa: BLE001 - every debit of the batch fails with it
            with self._batch:
                if own in self._waiting:
                    self._waiting.remove(own)
                    batch.append(own)
            for debit in batch:
                debit.error = exc
        with self._batch:
            for debit in batch:
                debit.done = True

    def _take(self, tx, debit: _Debit) -> list[tuple] | None:
        """One debit inside a batch's transaction."""
        moment = self._roll(tx, debit.accounts)
        rows = tx.execute(*_debit_sql(debit.micro, debit.rho, debit.accounts, self.zcdp))
        if len(rows) < len(debit.accounts):
            if rows:  # the accounts that could pay give it back: all or nothing
                tx.execute(f"UPDATE idp.budgets SET spent_micro = spent_micro - %s, "
                           f"spent_rho = spent_rho - {_RHO} "
                           f"WHERE analyst IN ({_placeholders(len(rows))})",
                           (debit.micro, debit.rho, *(name for name, _ in rows)))
            self.append(tx, debit.charge, debit.micro, "refused: budget", released=False,
                        at=moment)
            return None
        self.append(tx, debit.charge, debit.micro, "charged", released=True, at=moment)
        return rows

    def served_from_cache(self, charge: Charge, tx=None) -> Decimal:
        """Record a repeat answered from the answer cache (ε 0, nothing debited) and
        return what the analyst can still spend (read in ``tx``, a snapshot of the
        ledger's backend, else as ``_replay_left`` keeps it); before the repeat is sent.
        The row is kept in memory and written with others (``flush``): no write waits
        for it."""
        left = self._replay_left(self._accounts(charge.analyst), tx)
        self._keep_replay(charge)
        return self._as_epsilon(left)

    def served_now(self, charge: Charge) -> Decimal | None:
        """``served_from_cache`` when what the analyst has left is kept from a read
        still current: no statement, no wait (an answer on the server's event loop);
        None (nothing recorded) when it must be read."""
        left = self._kept_left(tuple(self._accounts(charge.analyst)))
        if left is None:
            return None
        self._keep_replay(charge)
        return self._as_epsilon(left)

    def _keep_replay(self, charge: Charge) -> None:
        served = datetime.datetime.now(datetime.timezone.utc)
        with self._replayed:  # once nothing can stop the repeat from being sent
            self._replays.append((charge, served))
            if self._writer is None and not self._closed:
                self._writer = threading.Thread(target=self._write_replays, daemon=True,
                                                name="ledger-replays")
                self._writer.start()
            if len(self._replays) == 1 or len(self._replays) >= REPLAY_ROWS:
                self._replayed.notify_all()

    def _replay_left(self, accounts: list[str], tx) -> int | Decimal:
        """The smaller of what ``accounts`` have left: read in ``tx`` if given; else
        kept from this method's last read of its own while that is still current
        (``still_current``) and no account's refresh window has ended since. Within the
        rules' ``replay_window_ms`` it may miss other processes' debits: only the
        replay's ``epsilon_remaining`` is that old; a debit always reads the row."""
        key = tuple(accounts)
        kept = self._kept_left(key) if tx is None else None
        if kept is not None:
            return kept
        mark, read_at = self.backend.quiet_mark(), time.monotonic()
        query = self._replay_left_sql(len(accounts))
        rows = tx.execute(query, accounts) if tx is not None else self.backend.read(query,
                                                                                    accounts)
        missing = [0] * (len(accounts) - len(rows))  # as ``remaining``: no row, nothing left
        left = min([0 if left is None else left for left, _ in rows] + missing)
        if tx is None:  # a snapshot opened before ``mark`` may miss a write made since
            ends = [end for _, end in rows if end is not None]
            self._lefts[key] = (left, read_at, mark, min(ends, default=None))
        return left

    def _kept_left(self, key: tuple[str, ...]) -> int | Decimal | None:
        kept = self._lefts.get(key)
        if kept is not None and (kept[3] is None or _now() < kept[3]) and still_current(
                self.backend, kept[2], kept[1], self.rules.defaults.replay_window_ms):
            return kept[0]
        return None

    def _replay_left_sql(self, accounts: int) -> str:
        return (f"SELECT {self._left_sql()}, window_end FROM idp.budgets "
                f"WHERE analyst IN ({_placeholders(accounts)})")

    def replay_left_statement(self, analyst: str) -> tuple[str, tuple[str, ...]]:
        """The read ``served_from_cache`` runs in a snapshot it is given (to send it
        ``ahead``: ``Transaction.ahead``)."""
        accounts = self._accounts(analyst)
        return self._replay_left_sql(len(accounts)), tuple(accounts)

    def pending_replays(self) -> int:
        """Replays' rows kept in memory, not written yet."""
        with self._replayed:
            return len(self._replays)

    def _write_replays(self) -> None:
        """The writer thread: a batch once ``REPLAY_ROWS`` wait or ``REPLAY_SECONDS``
        after the oldest was served; until ``close``."""
        pause = REPLAY_SECONDS
        while True:
            with self._replayed:
                while not self._replays and not self._closed:
                    self._replayed.wait()
                if self._closed:
                    return
                due = time.monotonic() + REPLAY_SECONDS
                while (len(self._replays) < REPLAY_ROWS and not self._closed
                       and (left := due - time.monotonic()) > 0):
                    self._replayed.wait(left)
            try:
                self.flush()
                pause = REPLAY_SECONDS
            except Exception as exc:  # noqa: BLE001 - kept, tried again after a pause
                log.warning("replays' ledger rows not written yet (%d kept; next try in "
                            "%g s): %s", self.pending_replays(), pause, exc)
                with self._replayed:  # doubling up to a minute while the store is away
                    self._replayed.wait_for(lambda: self._closed, pause)
                pause = min(2 * pause, 60.0)

    def flush(self) -> int:
        """Write the replays' rows kept in memory, in one transaction, in the order they
        were served, each with the moment it was served; how many. A failure keeps them
        for the next try (at most ``_REPLAYS_KEPT``: beyond, the oldest are dropped and
        logged; a replay spends nothing, so only its record is lost).

        The transaction (on PostgreSQL a pooled connection, on SQLite the writer's turn)
        is taken before the lock of batches, never while holding it: a debit calls this
        inside its query's view, holding a connection of the pool, and the writer thread
        holds none; had the writer taken the lock first and then waited for a connection
        while every connection was held by a debit waiting for that lock, none would
        have moved (seen: a server on a pool of 4 under 50 clients hung)."""
        with self._replayed:
            if not self._replays and not self._writing.locked():
                return 0
        batch: list[tuple[Charge, datetime.datetime]] = []
        try:
            with ExitStack() as held, self.backend.transaction(durable=False) as tx:
                # a debit waits for a batch under way, to its COMMIT: its row comes after
                self._writing.acquire()
                held.callback(self._writing.release)  # once the transaction has ended
                with self._replayed:
                    batch, self._replays = self._replays, []
                for start in range(0, len(batch), 100):
                    self._append_replays(tx, batch[start:start + 100])
        except BaseException:
            if batch:
                with self._replayed:
                    self._replays[:0] = batch
                    dropped = len(self._replays) - _REPLAYS_KEPT
                    if dropped > 0:
                        del self._replays[:dropped]
                        log.error("dropped the ledger rows of %d replays (the store did "
                                  "not take them; they spent nothing)", dropped)
            raise
        return len(batch)

    def _append_replays(self, tx, batch: list[tuple[Charge, datetime.datetime]]) -> None:
        """One INSERT of several replays' rows (ε, δ and ρ 0)."""
        values = ", ".join(["(CAST(%s AS TIMESTAMPTZ), %s, %s, %s, %s, 0, 0, %s, "
                            f"'served from cache', TRUE, {_RHO})"] * len(batch))
        params: list = []
        for charge, served in batch:
            params += [served.isoformat(), charge.analyst, charge.sql_hash, charge.model,
                       charge.mechanism, charge.neighbour, Decimal(0)]
        tx.execute("INSERT INTO idp.ledger (logged_at, analyst, sql_hash, model, mechanism, "
                   "epsilon_micro, delta, neighbour, status, released, rho) VALUES " + values,
                   params)

    def close(self) -> None:
        """Stop the writer thread and write every replay's row kept (at shutdown)."""
        with self._replayed:
            self._closed = True
            self._replayed.notify_all()
            writer = self._writer
        if writer is not None:
            writer.join(30)
        self.flush()

    def _flush_before(self) -> None:
        """Before a debit: the replays served before it are written first, so the
        ledger's order is the order of events in this process. A failure here does not
        stop the debit (the rows are kept)."""
        if not self._replays and not self._writing.locked():
            return
        try:
            self.flush()
        except Exception as exc:  # noqa: BLE001 - the debit goes on; the rows are kept
            log.warning("replays' ledger rows not written before a debit: %s", exc)

    def _left_sql(self) -> str:
        """What an account has left, in the accountant's unit (micro-ε, or ρ): all of it
        once its refresh window has ended (read, not written: the next debit rolls it)."""
        budget, spent = ("budget_rho", "spent_rho") if self.zcdp else ("budget_micro",
                                                                       "spent_micro")
        return f"{budget} - {_in_window(spent)}"

    def refund(self, charge: Charge, why: str = UNREACHABLE) -> None:
        """Give ε back for what was not computed: a release the backend could not be
        reached for (``UNREACHABLE``), or the later parts of a statement paid for at
        once that it never computed (``NOT_COMPUTED``, docs/privacy.md §3.16). While the
        backend stays unreachable the refund is owed, and paid before the next debit; a
        proxy that dies meanwhile loses it (budget, never privacy)."""
        try:
            self._refund(charge, why)
        except BackendUnavailable:
            with self._owed_lock:
                self._owed.append((charge, why))
            log.warning("refund of epsilon %s to %s owed until the backend is back",
                        charge.loss.spent, charge.analyst)

    def _settle(self) -> None:
        """Pay the refunds owed since the backend last went away, oldest first."""
        with self._owed_lock:
            owed, self._owed = self._owed, []
        for done, (charge, why) in enumerate(owed):
            try:
                self._refund(charge, why)
            except BackendUnavailable:
                with self._owed_lock:
                    self._owed[:0] = owed[done:]
                raise

    def _refund(self, charge: Charge, why: str) -> None:
        micro = to_micro(charge.loss.spent)
        accounts = self._accounts(charge.analyst)
        with self.backend.transaction() as tx:
            reset = tx.execute("SELECT reset_micro FROM idp.budgets WHERE analyst = %s",
                               (charge.analyst,))
            if reset and reset[0][0] is not None and reset[0][0] >= charge.made_micro:
                return  # reset since the charge: it took the charge back, no row either
            for account in accounts:  # into the window it was charged in, if still current,
                refresh = self.rules.refresh_of(account)  # and not reset since (then spent
                window = "" if refresh is None else " AND window_end = %s"  # would go < 0)
                tx.execute(f"UPDATE idp.budgets SET spent_micro = spent_micro - %s, "
                           f"spent_rho = spent_rho - {_RHO} WHERE analyst = %s{window} AND "
                           "(reset_micro IS NULL OR reset_micro < %s)",
                           (micro, charge.loss.spent_rho, account)
                           + (() if refresh is None else (refresh.window_end(charge.made),))
                           + (charge.made_micro,))
            self.append(tx, charge, -micro, f"refunded: {why}", released=False)

    def append(self, tx, charge: Charge, micro: int, status: str, released: bool,
               at: float | None = None) -> None:
        """One ledger row; its δ and ρ go with its ε: the charge's on a debit (or a
        refused one), none on a repeat from the cache, and taken back with a refund.
        ``at``: when it is logged (seconds since the epoch; else the transaction's start)."""
        columns, values, row = _ledger_row(charge, micro, status, released)
        if at is not None:
            columns, values = f"{columns}, logged_at", f"{values}, %s"
            row = (*row, datetime.datetime.fromtimestamp(at, datetime.timezone.utc))
        tx.execute(f"INSERT INTO idp.ledger ({columns}) VALUES ({values})", row)

    def _known(self, account: str) -> None:
        if account != GLOBAL:
            self.ensure_analyst(account)
        elif self.rules.defaults.global_budget is None:
            # the rules lack it, not the caller a right: 55000, not an authorization code
            raise ProxyError(f"{self.rules.path} sets no global budget: add global_budget = "
                             "EPSILON under [defaults] (and restart serve) to cap all analysts "
                             "together", "55000")

    def _left(self, account: str) -> int | Decimal:
        """What the account has left, in the accountant's unit (no row: nothing; a ρ
        budget not computed yet: nothing)."""
        rows = self.backend.read(
            f"SELECT {self._left_sql()} FROM idp.budgets WHERE analyst = %s", (account,))
        return rows[0][0] if rows and rows[0][0] is not None else 0

    def remaining(self, analyst: str) -> Decimal:
        """What the analyst can still spend: the smaller of their and the global budget
        (under zcdp: the largest ε one more ε-DP answer may take)."""
        return self._as_epsilon(min(self._left(account) for account in self._accounts(analyst)))

    def budgets(self, analyst: str | None = None) -> list[tuple[str, Decimal, Decimal, Decimal]]:
        """(analyst, budget, spent, remaining) for one analyst, the global budget
        (``GLOBAL``: no row when the rules set none) or all."""
        for name in (self.rules.analysts if analyst is None else [analyst]):
            if name != GLOBAL:
                self.ensure_analyst(name)
        where, params = ("WHERE analyst = %s", (analyst,)) if analyst is not None else ("", ())
        rows = self.backend.read(
            f"SELECT analyst, budget_micro, {_in_window('spent_micro')}, budget_rho, "
            f"{_in_window('spent_rho')} FROM idp.budgets {where} ORDER BY analyst", params)
        if not self.zcdp:
            return [(name or "(global)", from_micro(b), from_micro(s), from_micro(b - s))
                    for name, b, s, _, _ in rows]
        delta = self.rules.defaults.accounting_delta
        return [(name or "(global)", from_micro(b), epsilon_decimal(Decimal(spent), delta),
                 self._as_epsilon(Decimal(budget) - Decimal(spent)), delta,
                 _plain(budget), _plain(spent)) for name, b, _, budget, spent in rows]

    def grant(self, analyst: str, epsilon: Decimal) -> None:
        """Add ε to an analyst's budget, or to the global one (``GLOBAL``)."""
        self._known(analyst)
        with self.backend.transaction() as tx:
            rows = tx.execute("UPDATE idp.budgets SET budget_micro = budget_micro + %s "
                              "WHERE analyst = %s RETURNING budget_micro",
                              (to_micro(epsilon), analyst))
            if rows and self.zcdp:
                tx.execute(f"UPDATE idp.budgets SET budget_rho = {_RHO} WHERE analyst = %s",
                           (self._rho_budget(rows[0][0]), analyst))

    def reset(self, analyst: str) -> None:
        """Spent back to zero (the ledger keeps the history), and the moment of it kept: a
        refund of a charge made before it would take spent below zero (a statement in
        flight during the reset; the review of 2026-11-29), so none is made."""
        self._known(analyst)
        self.backend.query("UPDATE idp.budgets SET spent_micro = 0, spent_rho = 0, "
                           "reset_micro = %s WHERE analyst = %s",
                           (time.time_ns() // 1000, analyst))

    def entries(self, analyst: str | None = None,
                since: datetime.datetime | None = None) -> list[tuple]:
        """Ledger rows, oldest first: one analyst's or all, from a moment on or all
        (the replays' rows kept in memory are written first)."""
        self.flush()
        conditions, params = ["TRUE"], []
        if analyst:
            conditions.append("analyst = %s")
            params.append(analyst)
        if since is not None:
            conditions.append("logged_at >= CAST(%s AS TIMESTAMPTZ)")
            params.append(since.isoformat())
        rows = self.backend.read(
            "SELECT id, CAST(logged_at AS TEXT), analyst, sql_hash, model, mechanism, "
            "epsilon_micro, delta, neighbour, status, released, rho FROM idp.ledger "
            f"WHERE {' AND '.join(conditions)} ORDER BY id", params)
        return [row[:6] + (from_micro(row[6]),) + row[7:11]
                + (None if row[11] is None else _plain(row[11]),) for row in rows]


def _ledger_row(charge: Charge, micro: int, status: str, released: bool
                ) -> tuple[str, str, tuple]:
    """One ledger row's columns, value placeholders and values (``Ledger.append``)."""
    sign = (micro > 0) - (micro < 0)
    delta = float(charge.loss.spent_delta) * sign if charge.loss.delta else 0.0
    return ("analyst, sql_hash, model, mechanism, epsilon_micro, delta, neighbour, status, "
            "released, rho", f"%s, %s, %s, %s, %s, %s, %s, %s, %s, {_RHO}",
            (charge.analyst, charge.sql_hash, charge.model, charge.mechanism, micro, delta,
             charge.neighbour, status, released, charge.loss.spent_rho * sign))


def _now() -> int:
    """Seconds since the epoch, by this machine's clock: what refresh windows follow."""
    return int(time.time())


def _in_window(spent: str) -> str:
    """``spent`` as it counts now: 0 once the account's refresh window has ended (the
    moment written into the SQL, a whole number)."""
    return f"CASE WHEN window_end <= {_now()} THEN 0 ELSE {spent} END"


def _plain(value) -> Decimal:
    """A DECIMAL without its trailing zeros, positional (``0.0002``, not ``2E-4``)."""
    return Decimal(format(Decimal(value).normalize(), "f"))
