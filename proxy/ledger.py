"""The privacy budget ledger: side tables in the backend (SPEC §7).

``idp.budgets`` holds one row per analyst (budget and spent, integer micro-ε);
``idp.ledger`` is append-only: every debit, budget refusal and refund. A debit is one
conditional UPDATE in the same transaction as its ledger row, committed before any
answer is computed: two sessions racing cannot overspend, and a crash after the
commit loses budget, never privacy.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from decimal import Decimal

from proxy.backends.base import Backend
from proxy.epsilon import from_micro, to_micro
from proxy.errors import BudgetExhausted, UnknownAnalyst
from proxy.rules import Rules

_SCHEMA = {
    "postgres": [
        ("CREATE TABLE IF NOT EXISTS idp.ledger (id BIGINT GENERATED ALWAYS AS IDENTITY "
         "PRIMARY KEY, logged_at TIMESTAMPTZ NOT NULL DEFAULT now(), {columns})"),
    ],
    "duckdb": [
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
LEDGER_FIELDS = ("id", "logged_at", "analyst", "sql_hash", "model", "mechanism", "epsilon",
                 "delta", "neighbour", "status", "released")


@dataclass(frozen=True)
class Charge:
    """What one query costs and how it is recorded."""

    analyst: str
    sql: str
    model: str
    mechanism: str
    epsilon: Decimal
    neighbour: str

    @property
    def sql_hash(self) -> str:
        return hashlib.sha256(self.sql.encode()).hexdigest()[:16]


class Ledger:
    def __init__(self, backend: Backend, rules: Rules) -> None:
        self.backend = backend
        self.rules = rules
        with backend.transaction() as tx:
            # Checked first: CREATE SCHEMA IF NOT EXISTS needs the right to create one
            # even when it exists, which a proxy role given only schema idp lacks.
            if not tx.execute("SELECT 1 FROM information_schema.schemata "
                              "WHERE schema_name = 'idp'"):
                tx.execute("CREATE SCHEMA idp")
            for statement in _SCHEMA[backend.dialect]:
                tx.execute(statement.format(columns=_LEDGER_COLUMNS))
            for statement in _COMMON:
                tx.execute(statement)

    def open_budget(self, analyst: str) -> None:
        """Give an analyst the budget the rules name (else the default), unless open."""
        self.backend.query(
            "INSERT INTO idp.budgets (analyst, budget_micro, spent_micro) VALUES (%s, %s, 0) "
            "ON CONFLICT (analyst) DO NOTHING", (analyst, to_micro(self.rules.budget_of(analyst))))

    def ensure_analyst(self, analyst: str) -> None:
        """Open the analyst's budget from the rules on first use; refuse strangers
        (analysts neither in the rules nor given a login with ``users add``)."""
        if analyst in self.rules.analysts:
            self.open_budget(analyst)
        elif not self.backend.query("SELECT 1 FROM idp.budgets WHERE analyst = %s", (analyst,)):
            raise UnknownAnalyst(
                f"analyst {analyst!r} is not declared in {self.rules.path}; "
                f"known analysts: {', '.join(sorted(self.rules.analysts)) or 'none'}")

    def debit(self, charge: Charge) -> Decimal:
        """Atomically take ε from the analyst's budget; return what remains.

        Refused debits are recorded too, and raise BudgetExhausted.
        """
        micro = to_micro(charge.epsilon)
        with self.backend.transaction() as tx:
            rows = tx.execute(
                "UPDATE idp.budgets SET spent_micro = spent_micro + %s "
                "WHERE analyst = %s AND spent_micro + %s <= budget_micro "
                "RETURNING budget_micro - spent_micro", (micro, charge.analyst, micro))
            status = "charged" if rows else "refused: budget"
            self._append(tx, charge, micro, status, released=bool(rows))
        if not rows:
            left = self.remaining(charge.analyst)
            raise BudgetExhausted(
                f"privacy budget exhausted: this query needs epsilon {charge.epsilon} and "
                f"{left} remains; ask the data owner for more or use a smaller idp.epsilon")
        return from_micro(rows[0][0])

    def refund(self, charge: Charge) -> None:
        """Give ε back: only when the backend was unreachable (nothing was computed)."""
        micro = to_micro(charge.epsilon)
        with self.backend.transaction() as tx:
            tx.execute("UPDATE idp.budgets SET spent_micro = spent_micro - %s WHERE analyst = %s",
                       (micro, charge.analyst))
            self._append(tx, charge, -micro, "refunded: backend unreachable", released=False)

    def _append(self, tx, charge: Charge, micro: int, status: str, released: bool) -> None:
        tx.execute(
            "INSERT INTO idp.ledger (analyst, sql_hash, model, mechanism, epsilon_micro, delta, "
            "neighbour, status, released) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)",
            (charge.analyst, charge.sql_hash, charge.model, charge.mechanism, micro, 0.0,
             charge.neighbour, status, released))

    def remaining(self, analyst: str) -> Decimal:
        rows = self.backend.query(
            "SELECT budget_micro - spent_micro FROM idp.budgets WHERE analyst = %s", (analyst,))
        return from_micro(rows[0][0]) if rows else Decimal(0)

    def budgets(self, analyst: str | None = None) -> list[tuple[str, Decimal, Decimal, Decimal]]:
        """(analyst, budget, spent, remaining) for one analyst or all."""
        for name in ([analyst] if analyst else self.rules.analysts):
            self.ensure_analyst(name)
        where, params = ("WHERE analyst = %s", (analyst,)) if analyst else ("", ())
        rows = self.backend.query(
            f"SELECT analyst, budget_micro, spent_micro FROM idp.budgets {where} ORDER BY analyst",
            params)
        return [(name, from_micro(b), from_micro(s), from_micro(b - s)) for name, b, s in rows]

    def grant(self, analyst: str, epsilon: Decimal) -> None:
        self.ensure_analyst(analyst)
        self.backend.query("UPDATE idp.budgets SET budget_micro = budget_micro + %s "
                           "WHERE analyst = %s", (to_micro(epsilon), analyst))

    def reset(self, analyst: str) -> None:
        """Spent back to zero (the ledger keeps the history)."""
        self.ensure_analyst(analyst)
        self.backend.query("UPDATE idp.budgets SET spent_micro = 0 WHERE analyst = %s", (analyst,))

    def entries(self, analyst: str | None = None) -> list[tuple]:
        where, params = ("WHERE analyst = %s", (analyst,)) if analyst else ("", ())
        rows = self.backend.query(
            "SELECT id, CAST(logged_at AS TEXT), analyst, sql_hash, model, mechanism, epsilon_micro, delta, "
            f"neighbour, status, released FROM idp.ledger {where} ORDER BY id", params)
        return [row[:6] + (from_micro(row[6]),) + row[7:] for row in rows]
