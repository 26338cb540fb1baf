"""Which threads' queries were cancelled, for every stage to stop at its next
checkpoint: a cancel, the statement timeout, a client's disconnect and shutdown all
interrupt the thread that runs a session's statement (``Backend.interrupt``), and the
stages above the backend — analysis, SQL building, the draws, the release — are Python
that no backend interrupt reaches. Each calls ``checkpoint()`` where its work can grow
(per node, per group, per draw): a set lookup, so they stop within a fraction of a
second with QueryCanceled (57014)."""

from __future__ import annotations

import threading

from proxy.errors import QueryCanceled

# thread id -> the Thread cancelled under it: an id is reused once its thread ends, and
# a cancel never forgotten must not doom the next thread that gets the id
_doomed: dict[int, threading.Thread | None] = {}
_lock = threading.Lock()


def _thread(owner: int) -> threading.Thread | None:
    if owner == threading.get_ident():
        return threading.current_thread()
    return next((thread for thread in threading.enumerate() if thread.ident == owner), None)


def doom(owner: int) -> None:
    """Thread ``owner``'s query is cancelled: its next checkpoint raises."""
    thread = _thread(owner)
    with _lock:
        _doomed[owner] = thread


def forget(owner: int) -> None:
    """Thread ``owner``'s query is over: its next job starts clean."""
    with _lock:
        _doomed.pop(owner, None)


def doomed(owner: int) -> bool:
    if owner not in _doomed:  # the usual case: one lookup
        return False
    thread = _doomed.get(owner)
    return thread is not None and thread is _thread(owner)


def checkpoint() -> None:
    """Raise QueryCanceled if this thread's query was cancelled."""
    if doomed(threading.get_ident()):
        raise QueryCanceled("canceling statement due to user request")
