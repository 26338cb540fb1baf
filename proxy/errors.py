"""Every refusal the proxy can give, each with a stable SQLSTATE.

A refusal is one line: what was refused and what is allowed instead. The codes are
listed in ``docs/sqlstate.md``; clients may rely on them.
"""

from __future__ import annotations


class ProxyError(Exception):
    """An error shown to the analyst: a one-line message and a SQLSTATE."""

    sqlstate = "XX000"

    def __init__(self, message: str, sqlstate: str | None = None) -> None:
        super().__init__(message)
        if sqlstate is not None:
            self.sqlstate = sqlstate

    @property
    def message(self) -> str:
        return str(self.args[0])


class TooComplex(ProxyError):
    """SQL nested deeper than Python's stack lets the proxy read (a RecursionError while
    reading it), refused as PostgreSQL refuses such a statement (54001)."""

    sqlstate = "54001"

    def __init__(self) -> None:
        super().__init__("statement too complex: it nests deeper than the proxy can read; "
                         "write it with fewer nested brackets, CASEs or NOTs")


class Refused(ProxyError):
    """The query text, the rules or the session settings do not allow this query.

    Raised before the backend is touched, so nothing is spent and nothing is logged to
    the ledger (SPEC §3.4: refusals depend only on text, rules and settings).
    """


class SyntaxProblem(Refused):
    """``position``: where in the statement the problem is (1-based characters), for
    clients that point at it (psql's caret, the command line's)."""

    sqlstate = "42601"

    def __init__(self, message: str, position: int | None = None) -> None:
        super().__init__(message)
        self.position = position


def pointing_at(text: str, position: int) -> str:
    """The line of ``text`` holding character ``position`` and a caret under it, as psql
    shows a syntax error's place."""
    before = text[:position - 1]
    number = before.count("\n") + 1
    start = before.rfind("\n") + 1
    end = text.find("\n", start)
    line = text[start:] if end < 0 else text[start:end]
    prefix = f"LINE {number}: "
    return f"{prefix}{line}\n{' ' * (len(prefix) + position - 1 - start)}^"


class RawRowAccess(Refused):
    sqlstate = "42501"


class NotSupported(Refused):
    sqlstate = "0A000"


class UnknownTable(Refused):
    sqlstate = "42P01"


class UnknownColumn(Refused):
    sqlstate = "42703"


class AmbiguousColumn(Refused):
    """An unqualified column that more than one table of the query has (PostgreSQL's
    ``column reference "x" is ambiguous``)."""

    sqlstate = "42702"


class UnknownFunction(Refused):
    sqlstate = "42883"


class ReadOnly(Refused):
    sqlstate = "25006"


class BadSetting(Refused):
    sqlstate = "22023"


class UnknownAnalyst(Refused):
    sqlstate = "28000"


class BudgetExhausted(ProxyError):
    """The ledger refused the debit; recorded in the ledger as a refusal."""

    sqlstate = "PB001"


class BackendFailed(ProxyError):
    """The backend failed on a query; its own text goes to the log only (SPEC §9)."""

    sqlstate = "58000"


class BackendLost(BackendFailed):
    """An operational failure of the backend in the middle of a statement (the server
    ended the session, ran out of memory...): not the statement's doing, so not a
    totality failure (``proxy.session``)."""


class RolledBack(BackendFailed):
    """The backend rolled the transaction back to end a conflict with another one
    (deadlock detected 40P01, serialization failure 40001): nothing it wrote stands (a
    debit that met one charged nothing); the statement may be sent again."""

    def __init__(self, sqlstate: str) -> None:
        super().__init__("the database behind the proxy rolled this statement back to end "
                         "a conflict with another session (nothing it wrote stands); send "
                         "it again", sqlstate)


class QueryCanceled(BackendFailed):
    """The statement was interrupted (a client's cancel or the statement timeout); it
    reached the backend, so it is charged like any other failure."""

    sqlstate = "57014"


class KeyTaken(BackendFailed):
    """An INSERT met a row with the same primary key (a racing session's, committed
    first); its transaction is rolled back. Expected, so not logged."""

    sqlstate = "23505"


class PrivilegeMissing(BackendFailed):
    """The proxy's own database role may not do what a statement needs (read a table,
    create its ``idp`` schema): the owner's setup, told at start with the GRANT to run
    (proxy.engine, proxy.ledger); to an analyst the usual generic failure."""

    sqlstate = "42501"


class DiskFull(BackendFailed):
    """The disk under the backend's files is full: nothing that must write (a debit, a
    ledger row, a cache entry) can commit until space is freed; the session stays."""

    sqlstate = "53100"

    def __init__(self) -> None:
        super().__init__("the disk of the database behind the proxy is full; ask the data "
                         "owner to free space, then retry")


class DatabaseInUse(BackendFailed):
    """A DuckDB file is locked by another process (a running server, usually)."""

    sqlstate = "55006"

    def __init__(self, message: str, path: str) -> None:
        super().__init__(message)
        self.path = path


class UnsafeAdminSocket(ProxyError):
    """The admin socket's folder, or the process listening on it, is not the server's OS
    user's: another local user may be waiting there for a password or a budget command.
    The server refuses to start, the command line to send."""

    sqlstate = "42501"


class OutputFailed(ProxyError):
    """A release's output file could not be written (the ε stays spent: the data was
    read and noised)."""

    sqlstate = "58030"


class BackendUnavailable(ProxyError):
    """The backend could not be reached; the reserved ε is refunded (SPEC §7)."""

    sqlstate = "08006"


class RulesError(Exception):
    """A rules file that cannot be used: names the file, the key and the reason."""
