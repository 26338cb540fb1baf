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

_doomed: set[int] = set()
_lock = threading.Lock()


def doom(owner: int) -> None:
    """Thread ``owner``'s query is cancelled: its next checkpoint raises."""
    with _lock:
        _doomed.add(owner)


def forget(owner: int) -> None:
    """Thread ``owner``'s query is over: its next job starts clean."""
    with _lock:
        _doomed.discard(owner)


def doomed(owner: int) -> bool:
    return owner in _doomed


def checkpoint() -> None:
    """Raise QueryCanceled if this thread's query was cancelled."""
    if threading.get_ident() in _doomed:
        raise QueryCanceled("canceling statement due to user request")
