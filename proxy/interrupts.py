"""Which threads' queries were cancelled, for every stage to stop at its next
checkpoint: a cancel, the statement timeout, a client's disconnect and shutdown all
interrupt the thread that runs a session's statement (``Backend.interrupt``), and the
stages above the backend — analysis, SQL building, the draws, the release — are Python
that no backend interrupt reaches. Each calls ``checkpoint()`` where its work can grow
(per node, per group, per draw): a set lookup, so they stop within a fraction of a
second with QueryCanceled (57014)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from proxy.errors import QueryCanceled

# thread id -> the Thread cancelled under it: an id is reused once its thread ends, and
# a cancel never forgotten must not doom the next thread that gets the id
_doomed: dict[int, threading.Thread | None] = {}
# thread id -> what stops the work it runs that no checkpoint reaches (``stopping``)
_stoppers: dict[int, Callable[[], None]] = {}
_lock = threading.Lock()
REPEAT = 0.1  # seconds between two calls of a stopper while its block still runs


def _thread(owner: int) -> threading.Thread | None:
    if owner == threading.get_ident():
        return threading.current_thread()
    return next((thread for thread in threading.enumerate() if thread.ident == owner), None)


def doom(owner: int) -> None:
    """Thread ``owner``'s query is cancelled: its next checkpoint raises."""
    thread = _thread(owner)
    with _lock:
        _doomed[owner] = thread
        stop = _stoppers.get(owner)
        if stop is not None:
            stop()
            _again_later(owner, stop)


@contextmanager
def stopping(stop: Callable[[], None]) -> Iterator[None]:
    """While the block runs, a cancel of this thread's query also calls ``stop``, for
    work no checkpoint reaches (a statement of a private DuckDB), and again every
    ``REPEAT`` seconds until the block ends: DuckDB drops an interrupt that lands while
    it parses a statement. Raises QueryCanceled on entry if the query was cancelled."""
    owner = threading.get_ident()
    with _lock:
        _stoppers[owner] = stop
    try:
        checkpoint()
        yield
    finally:
        with _lock:
            _stoppers.pop(owner, None)


def _again_later(owner: int, stop: Callable[[], None]) -> None:
    timer = threading.Timer(REPEAT, _again, (owner, stop))
    timer.daemon = True
    timer.start()


def _again(owner: int, stop: Callable[[], None]) -> None:
    with _lock:
        if owner in _doomed and _stoppers.get(owner) is stop:
            stop()
            _again_later(owner, stop)


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
