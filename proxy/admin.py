"""Administering a server that holds a DuckDB file.

A DuckDB file can be open in one process only, so while ``idp-proxy serve`` runs on it,
``idp-proxy users|budget|ledger`` cannot open it. The server therefore listens on a Unix
socket named after the file, in a folder only its OS user can enter, and runs there the
few ledger and user calls those commands make; the commands send their call when they
find the file locked. Whoever may use the socket may open the file itself, so the
socket grants nothing new. PostgreSQL needs none of this: admins connect directly.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import socket
import tempfile
from pathlib import Path
from typing import Any

from proxy import jsontags
from proxy.errors import DatabaseInUse, ProxyError

log = logging.getLogger("idp_proxy.admin")

# The calls the command line makes, per target; nothing else is run.
CALLS = {"ledger": {"budgets", "grant", "reset", "remaining", "entries"},
         "users": {"add", "passwd", "disable", "list"}}


def socket_path(database: str) -> Path:
    """Where the server of this DuckDB file listens (short: socket paths are limited)."""
    digest = hashlib.sha256(str(Path(database).resolve()).encode()).hexdigest()[:16]
    return Path(tempfile.gettempdir()) / f"idp-proxy-{os.getuid()}" / f"{digest}.sock"


async def serve_admin(path: Path, targets: dict[str, Any]) -> asyncio.AbstractServer:
    """Listen on ``path`` (a stale socket of a killed server is replaced: the file's lock
    proves no other server of it runs)."""
    path.parent.mkdir(mode=0o700, exist_ok=True)
    os.chmod(path.parent, 0o700)
    path.unlink(missing_ok=True)

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        line = await reader.readline()
        try:
            if line:  # an empty one is a probe of whether the server listens
                try:
                    reply = await _run(targets, jsontags.loads(line))
                except (ValueError, TypeError, KeyError, AttributeError):
                    reply = {"error": ["08P01", "malformed admin request"]}
                writer.write(jsontags.dumps(reply).encode() + b"\n")
                await writer.drain()
        except ConnectionError:
            pass
        finally:
            writer.close()

    server = await asyncio.start_unix_server(handle, path)
    os.chmod(path, 0o600)
    return server


async def _run(targets: dict[str, Any], request: dict[str, Any]) -> dict[str, Any]:
    target, method, args = request["target"], request["method"], request["args"]
    if method not in CALLS.get(target, ()):
        return {"error": ["42501", f"{target}.{method} is not an admin call"]}
    call = getattr(targets[target], method)
    try:
        result = await asyncio.get_running_loop().run_in_executor(None, call, *args)
    except ProxyError as exc:
        return {"error": [exc.sqlstate, exc.message]}
    log.info("admin call %s.%s", target, method)
    return {"result": result}


class Remote:
    """One target (``ledger`` or ``users``) of a running server, called like the local
    object: ``Remote(path, "ledger").budgets("alice")``."""

    def __init__(self, path: Path, target: str) -> None:
        self.path = path
        self.target = target

    def __getattr__(self, method: str):
        if method not in CALLS.get(self.target, ()):
            raise AttributeError(method)
        return lambda *args: self._call(method, args)

    def _call(self, method: str, args: tuple) -> Any:
        request = {"target": self.target, "method": method, "args": list(args)}
        with socket.socket(socket.AF_UNIX) as sock:
            sock.connect(str(self.path))
            sock.sendall(jsontags.dumps(request).encode() + b"\n")
            data = b""
            while chunk := sock.recv(65536):
                data += chunk
        reply = jsontags.loads(data)
        if "error" in reply:
            sqlstate, message = reply["error"]
            raise ProxyError(message, sqlstate)
        return reply["result"]


def reach_server(error: DatabaseInUse, target: str) -> Remote:
    """The ``target`` of the server that holds the locked DuckDB file, when one answers
    on its socket; else ``error`` itself."""
    remote = socket_path(error.path)
    try:
        with socket.socket(socket.AF_UNIX) as sock:
            sock.connect(str(remote))
    except OSError:
        raise error from None
    return Remote(remote, target)
