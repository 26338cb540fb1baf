"""Passwords as PostgreSQL stores them: SCRAM-SHA-256 secrets
(``SCRAM-SHA-256$iter:salt$StoredKey:ServerKey``, RFC 5802/7677), never the password.

The analysts' table (proxy.users) keeps them; the wire's SCRAM exchange
(proxy.wire.scram) checks a login against them.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from dataclasses import dataclass

MECHANISM = "SCRAM-SHA-256"
ITERATIONS = 4096


@dataclass(frozen=True)
class Secret:
    iterations: int
    salt: bytes
    stored_key: bytes
    server_key: bytes

    def text(self) -> str:
        b64 = lambda raw: base64.b64encode(raw).decode()
        return (f"{MECHANISM}${self.iterations}:{b64(self.salt)}$"
                f"{b64(self.stored_key)}:{b64(self.server_key)}")

    @classmethod
    def parse(cls, text: str) -> Secret:
        mechanism, params, keys = text.split("$")
        iterations, salt = params.split(":")
        stored, server = keys.split(":")
        if mechanism != MECHANISM:
            raise ValueError(f"not a {MECHANISM} secret")
        return cls(int(iterations), base64.b64decode(salt), base64.b64decode(stored),
                   base64.b64decode(server))


def make_secret(password: str, salt: bytes | None = None, iterations: int = ITERATIONS) -> Secret:
    salt = salt if salt is not None else secrets.token_bytes(16)
    salted = hashlib.pbkdf2_hmac("sha256", password.encode(), salt, iterations)
    client_key = hmac_sha256(salted, b"Client Key")
    return Secret(iterations, salt, hashlib.sha256(client_key).digest(),
                  hmac_sha256(salted, b"Server Key"))


def hmac_sha256(key: bytes, data: bytes) -> bytes:
    return hmac.new(key, data, hashlib.sha256).digest()
