"""What a command that works for a while shows on stderr: a tqdm bar on a terminal,
nothing on a pipe (a script reading stderr gets only the errors).

Work of known length (creating the demo, a release) shows its bar at once; other work
shows an elapsed-time line only once it has run for a second, so quick commands print
just what they did before. Work nested in other work (the demo created for a query)
replaces the outer line while it runs."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

_TICK = 0.2  # seconds between redraws of the elapsed time
_shown: list[Progress] = []  # the work under way, innermost last (the main thread's)


class Progress:
    """Progress of one piece of work; ``step`` may be called from any thread."""

    def __init__(self, label: str, measured: bool, delay: float) -> None:
        self._label = label
        self._measured = measured  # a fraction done is known (``step``)
        self._delay = delay
        self._done = 0.0
        self._bar: Any = None  # the tqdm bar while drawn
        self._since = time.monotonic()
        self._paused = False
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self._ticker = threading.Thread(target=self._tick, daemon=True)

    def step(self, label: str, done: float) -> None:
        """Now doing ``label``, with this fraction (0 to 1) of the work done."""
        with self._lock:
            self._label, self._done = label, done
            self._draw()

    @contextmanager
    def hidden(self) -> Iterator[None]:
        """No bar while the command prints (an answer); the second counts anew after."""
        self._pause()
        try:
            yield
        finally:
            self._resume()

    def _pause(self) -> None:
        with self._lock:
            self._paused = True
            if self._bar is not None:
                self._bar.close()
                self._bar = None

    def _resume(self) -> None:
        with self._lock:
            self._paused = False
            self._since = time.monotonic()
            self._draw()

    def _start(self) -> None:
        self._ticker.start()
        with self._lock:
            self._draw()

    def _stop(self) -> None:
        self._stopped.set()
        self._ticker.join()
        self._pause()

    def _tick(self) -> None:
        while not self._stopped.wait(_TICK):
            with self._lock:
                self._draw()

    def _draw(self) -> None:
        """Draw or update the bar, once ``delay`` has passed (with the lock held)."""
        if self._paused:
            return
        if self._bar is None:
            if time.monotonic() - self._since < self._delay:
                return
            from tqdm import tqdm

            form = ("{desc}: {percentage:3.0f}%|{bar}| {elapsed}" if self._measured
                    else "{desc} ({elapsed})")
            self._bar = tqdm(total=1000 if self._measured else None, file=sys.stderr,
                             leave=False, bar_format=form, dynamic_ncols=True)
        self._bar.set_description_str(self._label, refresh=False)
        if self._measured:
            self._bar.n = round(self._done * 1000)
        self._bar.refresh()


class _Silent(Progress):
    """Stderr is not a terminal: nothing is drawn, no thread runs."""

    def _start(self) -> None:
        pass

    def _stop(self) -> None:
        pass

    def _draw(self) -> None:
        pass


@contextmanager
def progress(label: str, measured: bool = False) -> Iterator[Progress]:
    """Around work that may take a while: ``measured`` work (it calls ``step``) shows
    its bar at once, other work after a second; only when stderr is a terminal."""
    shown = (Progress if sys.stderr.isatty() else _Silent)(label, measured,
                                                            0.0 if measured else 1.0)
    outer = _shown[-1] if _shown else None
    if outer is not None:
        outer._pause()
    _shown.append(shown)
    shown._start()
    try:
        yield shown
    finally:
        shown._stop()
        _shown.pop()
        if outer is not None:
            outer._resume()
