"""The admin socket of a served DuckDB file (proxy.admin) against another local user who
gets to its folder first: the server refuses to start there, the command line refuses
to send to a listener of another uid, and a password never crosses the socket.

Another user is played by uid 65534 (``nobody``), which needs root, as the tests run
here and in CI. Each test has a temporary directory of its own (TMPDIR of
the processes it starts), so the folders it plants meet no other test's server."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import tempfile
import threading
from pathlib import Path

import duckdb
import pytest

from proxy.admin import socket_path
from proxy.passwords import Secret, make_secret
from tests import forked_cli

NOBODY = 65534
RULES = '[server]\nauth = "scram"\n'
PASSWORD = "correct horse battery staple"
ME = os.getuid()
as_root = pytest.mark.skipif(ME != 0, reason="plays another user: needs root")


@pytest.fixture
def place():
    """A fresh temporary directory as /tmp is (anyone may make a folder there; 1777),
    holding a DuckDB file and rules that nobody may read and write too."""
    folder = Path(tempfile.mkdtemp(prefix="a", dir=tempfile.gettempdir()))
    folder.chmod(0o1777)
    data = folder / "data.duckdb"
    duckdb.connect(str(data)).close()
    data.chmod(0o666)
    (folder / "rules.toml").write_text(RULES)
    return folder


def _cli(place: Path, *args: str, stdin: str | None = None, user: int | None = None
         ) -> subprocess.CompletedProcess:
    env = {**os.environ, "TMPDIR": str(place), "IDP_PROXY_HOME": str(place / "home")}
    return forked_cli.run([*args, "--rules", str(place / "rules.toml"), "--backend",
                           f"duckdb:///{place / 'data.duckdb'}"], env=env, input=stdin,
                          timeout=60, user=user)


def _folder_of(place: Path, uid: int) -> Path:
    """Where a server run as ``uid`` with TMPDIR ``place`` keeps the data file's socket."""
    return place / f"idp-proxy-{uid}"


def _socket(place: Path, uid: int) -> Path:
    return _folder_of(place, uid) / socket_path(str(place / "data.duckdb")).name


def _mode(path: Path) -> tuple[int, int]:
    info = os.lstat(path)
    return info.st_uid, info.st_mode & 0o7777


class Listener:
    """A process's impostor on the socket path: records every byte each connection sends
    and answers a request line as a server would (``{"result": null}``)."""

    def __init__(self, path: Path) -> None:
        self.received: list[bytes] = []
        self._sock = socket.socket(socket.AF_UNIX)
        self._sock.bind(str(path))
        path.chmod(0o777)
        self._sock.listen(8)
        self._sock.settimeout(0.2)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except TimeoutError:
                continue
            with conn:
                conn.settimeout(10)
                data = b""
                while chunk := conn.recv(65536):
                    data += chunk
                    if data.endswith(b"\n"):
                        conn.sendall(b'{"result": null}\n')
                self.received.append(data)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(10)
        self._sock.close()


@as_root
def test_serve_refuses_a_folder_another_user_made_and_changes_nothing(place):
    folder = _folder_of(place, ME)
    folder.mkdir(mode=0o755)
    os.chown(folder, NOBODY, NOBODY)
    out = _cli(place, "serve", "--port", "0")
    assert (out.returncode, out.stderr) == (1, (
        f"ERROR [42501]: not serving: the admin socket's folder {folder} belongs to uid "
        f"{NOBODY}, not to this user (uid {ME}); another local user may have made it to listen "
        "in the server's place: remove it, or set TMPDIR to a folder of your own\n"))
    assert _mode(folder) == (NOBODY, 0o755) and not any(folder.iterdir())


def test_serve_refuses_a_symlink_in_the_folders_place_and_follows_it_nowhere(place):
    elsewhere = place / "elsewhere"
    elsewhere.mkdir(mode=0o755)
    _folder_of(place, ME).symlink_to(elsewhere)
    out = _cli(place, "serve", "--port", "0")
    assert out.returncode == 1
    assert out.stderr.startswith(f"ERROR [42501]: not serving: the admin socket's folder "
                                 f"{_folder_of(place, ME)} is a symbolic link; ")
    assert len(out.stderr.splitlines()) == 1
    assert _mode(elsewhere) == (ME, 0o755) and not any(elsewhere.iterdir())


@as_root
def test_the_command_sends_nothing_to_a_listener_of_another_uid(place):
    """``users add`` run as nobody finds the file held and its own folder fit (nobody's,
    0700), but the process listening there is root's: it sends nothing, not even the
    secret of the password."""
    folder = _folder_of(place, NOBODY)
    folder.mkdir(mode=0o700)
    os.chown(folder, NOBODY, NOBODY)
    listener = Listener(_socket(place, NOBODY))
    held = duckdb.connect(str(place / "data.duckdb"))  # as a server holds it
    try:
        out = _cli(place, "users", "add", "carol", "--password-stdin", stdin=PASSWORD + "\n",
                   user=NOBODY)
    finally:
        held.close()
        listener.close()
    assert (out.returncode, out.stdout, out.stderr) == (1, "", (
        f"ERROR [42501]: not sending to the server: the process listening on "
        f"{_socket(place, NOBODY)} runs as uid {ME}, not as this user (uid {NOBODY})\n"))
    assert listener.received and not any(listener.received)  # it connected, sent nothing


def test_the_command_checks_its_socket_folder_before_connecting(place):
    folder = _folder_of(place, ME)
    folder.mkdir(mode=0o700)
    listener = Listener(_socket(place, ME))
    folder.chmod(0o755)  # anyone may now reach into it
    held = duckdb.connect(str(place / "data.duckdb"))
    try:
        out = _cli(place, "budget", "grant", "alice", "5")
    finally:
        held.close()
        listener.close()
    assert (out.returncode, out.stderr) == (1, (
        f"ERROR [42501]: not sending to the server: its socket's folder {folder} has mode "
        "755, not 700\n"))
    assert listener.received == []


@pytest.mark.parametrize("command", ["add", "passwd"])
def test_a_password_never_crosses_the_socket(place, command):
    """The command sends the SCRAM secret it made of the password, which the server
    stores as it is."""
    folder = _folder_of(place, ME)
    folder.mkdir(mode=0o700)
    listener = Listener(_socket(place, ME))
    held = duckdb.connect(str(place / "data.duckdb"))
    try:
        out = _cli(place, "users", command, "carol", "--password-stdin", stdin=PASSWORD + "\n")
    finally:
        held.close()
        listener.close()
    assert out.returncode == 0, out.stderr
    sent = b"".join(listener.received)
    assert PASSWORD.encode() not in sent
    request = json.loads(sent.splitlines()[-1])
    assert (request["target"], request["method"], request["args"][0]) == (
        "users", command, "carol")
    secret = Secret.parse(request["args"][1])
    assert secret == make_secret(PASSWORD, secret.salt, secret.iterations)
