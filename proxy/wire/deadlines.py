"""Statement timeouts without a thread per statement (issue 17 item 6).

A ``threading.Timer`` per running statement doubled the threads of a busy server (one
worker and one timer per active client). Here one daemon thread, started on first use,
keeps every pending deadline in a heap; cancelling one is O(1) (it is marked, and the
heap is compacted when marked entries outnumber live ones, so a long timeout with many
short statements does not let the heap grow without bound). A deadline that expires
runs its callback in a thread of its own: a callback that blocks (a cancel request to a
stuck backend) must not delay the other deadlines.
"""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from collections.abc import Callable


class Deadline:
    """One pending callback; ``Deadlines.cancel`` it when the statement ends first."""

    __slots__ = ("at", "callback", "cancelled")

    def __init__(self, at: float, callback: Callable[[], None]) -> None:
        self.at = at
        self.callback = callback
        self.cancelled = False


class Deadlines:
    def __init__(self) -> None:
        self._heap: list[tuple[float, int, Deadline]] = []
        self._order = itertools.count()  # ties: first scheduled, first run
        self._cancelled = 0
        self._changed = threading.Condition()
        self._thread: threading.Thread | None = None

    def after(self, seconds: float, callback: Callable[[], None]) -> Deadline:
        """Run ``callback`` (in its own thread) ``seconds`` from now unless cancelled."""
        deadline = Deadline(time.monotonic() + seconds, callback)
        with self._changed:
            if self._thread is None:
                self._thread = threading.Thread(target=self._watch, name="deadlines",
                                                daemon=True)
                self._thread.start()
            earliest = self._heap[0][0] if self._heap else None
            heapq.heappush(self._heap, (deadline.at, next(self._order), deadline))
            if earliest is None or deadline.at < earliest:
                self._changed.notify()
        return deadline

    def cancel(self, deadline: Deadline) -> None:
        """The callback will not run (if it has not started already)."""
        with self._changed:
            if deadline.cancelled:
                return
            deadline.cancelled = True
            self._cancelled += 1
            if self._cancelled > 64 and self._cancelled * 2 > len(self._heap):
                self._heap = [entry for entry in self._heap if not entry[2].cancelled]
                heapq.heapify(self._heap)
                self._cancelled = 0

    def pending(self) -> int:
        """Deadlines neither run nor cancelled."""
        with self._changed:
            return sum(not entry[2].cancelled for entry in self._heap)

    def _watch(self) -> None:
        while True:
            with self._changed:
                while not self._heap:
                    self._changed.wait()
                at, _, deadline = self._heap[0]
                if deadline.cancelled:
                    heapq.heappop(self._heap)
                    self._cancelled -= 1
                    continue
                wait = at - time.monotonic()
                if wait > 0:
                    self._changed.wait(wait)
                    continue
                heapq.heappop(self._heap)
                deadline.cancelled = True  # run once; a late cancel is a no-op
            threading.Thread(target=deadline.callback, name="deadline", daemon=True).start()


DEADLINES = Deadlines()  # one watcher thread per process, whatever the servers in it
