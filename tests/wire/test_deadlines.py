"""Statement timeouts share one watcher thread (proxy.wire.deadlines)."""

from __future__ import annotations

import threading
import time

from proxy.wire.deadlines import Deadlines


def test_an_expired_deadline_runs_and_a_cancelled_one_does_not():
    deadlines = Deadlines()
    ran = []
    fired = threading.Event()
    deadlines.after(0.05, lambda: (ran.append("late"), fired.set()))
    cancelled = deadlines.after(0.01, lambda: ran.append("cancelled"))
    deadlines.cancel(cancelled)
    assert fired.wait(5)
    time.sleep(0.05)
    assert ran == ["late"]
    assert deadlines.pending() == 0


def test_an_earlier_deadline_added_later_runs_first():
    deadlines = Deadlines()
    order, done = [], threading.Event()
    deadlines.after(0.3, lambda: (order.append("second"), done.set()))
    deadlines.after(0.02, lambda: order.append("first"))
    assert done.wait(5)
    assert order == ["first", "second"]


def test_many_statements_use_one_thread_and_leave_nothing_pending():
    """A thousand statements that end before their (long) timeout: one watcher thread,
    not one timer each, and cancelled deadlines do not pile up."""
    deadlines = Deadlines()
    before = threading.active_count()
    handles = [deadlines.after(300, lambda: None) for _ in range(1000)]
    assert threading.active_count() <= before + 1
    for handle in handles:
        deadlines.cancel(handle)
    assert deadlines.pending() == 0
    assert len(deadlines._heap) <= 64
