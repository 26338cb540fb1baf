"""Analyst accounts for the network server: SCRAM secrets in ``idp.users`` beside the
ledger, never a password. An account is a login; its budget lives in the ledger. The
command line makes the secret where the password is typed (``secret_of``), so that the
password reaches neither a server's admin socket nor the database."""

from __future__ import annotations

from proxy.backends.base import Backend
from proxy.errors import ProxyError
from proxy.ledger import Ledger
from proxy.passwords import Secret, make_secret


class UserError(ProxyError):
    sqlstate = "42704"


class Users:
    def __init__(self, ledger: Ledger) -> None:
        self.ledger = ledger
        self.backend: Backend = ledger.backend
        self.backend.query("CREATE TABLE IF NOT EXISTS idp.users (name TEXT PRIMARY KEY, "
                           "secret TEXT NOT NULL, disabled BOOLEAN NOT NULL DEFAULT false)")

    def add(self, name: str, secret: str) -> None:
        """A new login with this SCRAM secret (``secret_of``); its budget opens from the
        rules (or the default budget)."""
        _check(name, secret)
        if self.backend.query("SELECT 1 FROM idp.users WHERE name = %s", (name,)):
            raise UserError(f"user {name!r} exists; use `idp-proxy users passwd {name}`")
        self.backend.query("INSERT INTO idp.users (name, secret) VALUES (%s, %s)",
                           (name, secret))
        self.ledger.open_budget(name)

    def passwd(self, name: str, secret: str) -> None:
        """A new SCRAM secret (``secret_of``) for a login, enabled again."""
        _check(name, secret)
        if not self.backend.query("UPDATE idp.users SET secret = %s, disabled = false "
                                  "WHERE name = %s RETURNING name", (secret, name)):
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


def secret_of(password: str) -> str:
    """The SCRAM secret of a new password, in the text ``idp.users`` stores."""
    if not password:
        raise UserError("the password must not be empty")
    return make_secret(password).text()


def _check(name: str, secret: str) -> None:
    if not name or not name.isprintable() or len(name) > 63:
        raise UserError("a user name is 1 to 63 printable characters")
    try:
        Secret.parse(secret)
    except ValueError:
        raise UserError("not a SCRAM-SHA-256 secret; `idp-proxy users add|passwd` makes it "
                        "from the password") from None
