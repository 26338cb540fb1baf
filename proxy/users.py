"""Analyst accounts for the network server: SCRAM secrets in ``idp.users`` beside the
ledger, never a password. An account is a login; its budget lives in the ledger."""

from __future__ import annotations

from proxy.backends.base import Backend
from proxy.errors import ProxyError
from proxy.ledger import Ledger
from proxy.wire.scram import Secret, make_secret


class UserError(ProxyError):
    sqlstate = "42704"


class Users:
    def __init__(self, ledger: Ledger) -> None:
        self.ledger = ledger
        self.backend: Backend = ledger.backend
        self.backend.query("CREATE TABLE IF NOT EXISTS idp.users (name TEXT PRIMARY KEY, "
                           "secret TEXT NOT NULL, disabled BOOLEAN NOT NULL DEFAULT false)")

    def add(self, name: str, password: str) -> None:
        """A new login; its budget opens from the rules (or the default budget)."""
        _check(name, password)
        if self.backend.query("SELECT 1 FROM idp.users WHERE name = %s", (name,)):
            raise UserError(f"user {name!r} exists; use `idp-proxy users passwd {name}`")
        self.backend.query("INSERT INTO idp.users (name, secret) VALUES (%s, %s)",
                           (name, make_secret(password).text()))
        self.ledger.open_budget(name)

    def passwd(self, name: str, password: str) -> None:
        _check(name, password)
        if not self.backend.query("UPDATE idp.users SET secret = %s, disabled = false "
                                  "WHERE name = %s RETURNING name",
                                  (make_secret(password).text(), name)):
            raise UserError(f"no user {name!r}; add it with `idp-proxy users add {name}`")

    def disable(self, name: str) -> None:
        if not self.backend.query("UPDATE idp.users SET disabled = true WHERE name = %s "
                                  "RETURNING name", (name,)):
            raise UserError(f"no user {name!r}")

    def list(self) -> list[tuple[str, bool]]:
        return [(name, bool(disabled)) for name, disabled in
                self.backend.read("SELECT name, disabled FROM idp.users ORDER BY name")]

    def secret(self, name: str) -> Secret | None:
        """The login secret of an enabled user; None for unknown or disabled names."""
        rows = self.backend.read(
            "SELECT secret FROM idp.users WHERE name = %s AND NOT disabled", (name,))
        return Secret.parse(rows[0][0]) if rows else None


def _check(name: str, password: str) -> None:
    if not name or not name.isprintable() or len(name) > 63:
        raise UserError("a user name is 1 to 63 printable characters")
    if not password:
        raise UserError("the password must not be empty")
