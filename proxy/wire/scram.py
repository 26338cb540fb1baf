"""SCRAM-SHA-256 (RFC 5802/7677), the server side, sans-IO.

Our own because libpq sends an empty user name inside the exchange (``n=,``), which
the library we tried rejects; the name comes from the StartupMessage instead. The secrets
it checks against are proxy.passwords'.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets

from proxy.passwords import ITERATIONS, MECHANISM, Secret, hmac_sha256


class AuthFailed(Exception):
    """Wrong password or a malformed exchange (SQLSTATE 28P01 either way)."""


# Keys the mock salts of this process's unknown names (PostgreSQL keeps its in pg_control).
_MOCK_KEY = secrets.token_bytes(32)


def _mock_secret(user: str) -> Secret:
    """What an unknown or disabled name is offered, as PostgreSQL does: the same salt on
    every attempt with that name (a real login's salt does not change either), keys that
    are never checked, and no PBKDF2 (none runs for a real login at the server)."""
    salt = hmac_sha256(_MOCK_KEY, user.encode())[:16]
    return Secret(ITERATIONS, salt, secrets.token_bytes(32), secrets.token_bytes(32))


class Exchange:
    """One authentication. With ``secret=None`` (unknown or disabled user) it runs the
    same exchange against a mock secret and fails at the end with the same message, so
    that a client cannot tell an unknown name from a wrong password; the reason of a
    failure is for the server log only."""

    def __init__(self, secret: Secret | None, user: str) -> None:
        self._known = secret is not None
        self._secret = secret or _mock_secret(user)
        self._nonce = ""
        self._first_bare = ""
        self._server_first = ""

    def start(self, mechanism: str, client_first: bytes) -> bytes:
        if mechanism != MECHANISM:
            raise AuthFailed(f"unsupported SASL mechanism {mechanism!r}; use {MECHANISM}")
        text = _ascii(client_first)
        header, _, bare = text.partition(",")
        authzid, _, bare = bare.partition(",")
        if header not in ("n", "y") or authzid:
            raise AuthFailed("channel binding and authorization identities are not supported")
        attributes = _attributes(bare)
        if "r" not in attributes or "n" not in attributes:
            raise AuthFailed("malformed SCRAM client-first message")
        self._gs2 = f"{header},,"
        self._first_bare = bare
        self._nonce = attributes["r"] + base64.b64encode(secrets.token_bytes(18)).decode()
        salt = base64.b64encode(self._secret.salt).decode()
        self._server_first = f"r={self._nonce},s={salt},i={self._secret.iterations}"
        return self._server_first.encode()

    def finish(self, client_final: bytes) -> bytes:
        text = _ascii(client_final)
        without_proof, _, proof = text.rpartition(",p=")
        attributes = _attributes(without_proof)
        if (attributes.get("r") != self._nonce or not proof
                or attributes.get("c") != base64.b64encode(self._gs2.encode()).decode()):
            raise AuthFailed("malformed SCRAM client-final message")
        message = f"{self._first_bare},{self._server_first},{without_proof}".encode()
        signature = hmac_sha256(self._secret.stored_key, message)
        try:
            client_key = bytes(a ^ b for a, b in zip(base64.b64decode(proof, validate=True),
                                                     signature, strict=True))
        except ValueError:
            raise AuthFailed("malformed SCRAM proof") from None
        matches = hmac.compare_digest(hashlib.sha256(client_key).digest(),  # for both
                                      self._secret.stored_key)
        if not self._known:
            raise AuthFailed("no enabled login of this name (unknown or disabled user)")
        if not matches:
            raise AuthFailed("wrong password")
        verifier = base64.b64encode(hmac_sha256(self._secret.server_key, message)).decode()
        return f"v={verifier}".encode()


def _ascii(data: bytes) -> str:
    try:
        return data.decode("ascii")
    except UnicodeDecodeError:
        raise AuthFailed("malformed SCRAM message") from None


def _attributes(text: str) -> dict[str, str]:
    pairs = {}
    for part in text.split(","):
        key, sep, value = part.partition("=")
        if not sep or len(key) != 1:
            raise AuthFailed("malformed SCRAM message")
        pairs[key] = value
    return pairs
