"""What a test process starts does not outlive it, however it ends (even SIGKILL).

The first ``watch`` starts a watchdog: a small process in a session of its own (a
signal to the test's process group does not reach it) holding the read end of a pipe
whose only write end this process keeps. The test process tells it, one line at a
time, which servers (``idp-proxy serve``) and which folders (a PostgreSQL cluster's,
the run's TMPDIR) it has. When the pipe reaches end of file, the test process is gone:
the watchdog gives each server still running a second to stop by itself (a signal
to the whole group may have reached it too; one that is still stopping takes the second
SIGTERM as it took the first, and what it leaves is stopped below), then SIGTERM, which makes it stop its
catalog's PostgreSQL, then stops every PostgreSQL still running in the folders and
deletes them. A test process that ends normally removes everything itself first.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

# Run by ``python -c``: it imports nothing of the suite.
_SCRIPT = r"""
import json, os, shutil, signal, sys, time

def running(pid, started=None):
    try:
        fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    except OSError:
        return False
    return fields[0] != "Z" and started in (None, fields[19])

def wait(pids, seconds):
    deadline = time.monotonic() + seconds
    while any(running(*p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)

def postmaster(data):
    try:
        pid = int(open(os.path.join(data, "postmaster.pid")).read().split()[0])
        command = open(f"/proc/{pid}/cmdline", "rb").read()
    except (OSError, ValueError, IndexError):
        return None
    return pid if data.encode() in command else None

servers, folders, pending = {}, set(), b""
while True:
    try:
        chunk = os.read(int(sys.argv[1]), 65536)
    except OSError:
        break
    if not chunk:
        break
    *lines, pending = (pending + chunk).split(b"\n")
    for line in lines:
        try:
            action, kind, what = json.loads(line)
        except ValueError:
            continue  # cut by a signal handler's line: at worst the sweep stays
        if kind == "server" and action == "+":
            servers[what[0]] = what[1]
        elif kind == "server":
            servers.pop(what[0], None)
        elif action == "+":
            folders.add(what)
        else:
            folders.discard(what)
left = [(pid, started) for pid, started in servers.items() if running(pid, started)]
wait(left, 1)  # a signal to the whole group may have reached them too
for signum in (signal.SIGTERM, signal.SIGKILL):
    for pid, started in left:
        if running(pid, started):
            os.kill(pid, signum)
    wait(left, 30)
for folder in folders:
    if os.path.isdir(folder):
        datas = [folder] + [os.path.join(folder, name) for name in os.listdir(folder)]
        found = [postmaster(os.path.join(d, "data")) for d in datas]
        for pid in filter(None, found):
            os.kill(pid, signal.SIGQUIT)  # what pg_ctl -m immediate sends
        wait([(pid,) for pid in found if pid], 30)
    shutil.rmtree(folder, ignore_errors=True)
"""

_lock = threading.RLock()  # a signal handler may tell while the main thread tells
_owner: int | None = None  # the process the watchdog watches (a forked child needs its own)
_pipe = -1
_process: subprocess.Popen | None = None


def process_start(pid: int) -> str | None:
    """The start time of process ``pid`` (clock ticks since boot), None if there is no
    such process: with the pid it names one process, even after the pid is reused."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]


def _tell(action: str, kind: str, what) -> None:
    global _owner, _pipe, _process
    with _lock:
        if _owner != os.getpid():
            read, _pipe = os.pipe()  # both close on exec: only the watchdog gets one
            try:
                _process = subprocess.Popen(
                    [sys.executable, "-c", _SCRIPT, str(read)], pass_fds=(read,),
                    start_new_session=True, stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            finally:
                os.close(read)
            _owner = os.getpid()
        try:
            os.write(_pipe, json.dumps([action, kind, what]).encode() + b"\n")
        except OSError:
            pass  # the watchdog is gone: the next run's sweep remains


def watch_server(pid: int) -> None:
    _tell("+", "server", [pid, process_start(pid)])


def unwatch_server(pid: int) -> None:
    _tell("-", "server", [pid, None])


def watch_folder(folder: Path) -> None:
    """On the test process's death: stop the PostgreSQL of ``folder/data`` and of any
    ``folder/*/data``, then delete ``folder``."""
    _tell("+", "folder", str(folder))


def unwatch_folder(folder: Path) -> None:
    _tell("-", "folder", str(folder))


def watchdog_pid() -> int | None:
    return None if _process is None else _process.pid
