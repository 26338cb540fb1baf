"""The optional time quantum of SPEC §9: how long a private answer takes depends on the
data (a missed pilot bracket, a recomputed per-unit bound, a cache hit), so with
``[defaults] time_quantum_ms`` each one is held back to the next whole number of quanta
after it started. What then leaks is only how many quanta it needed (docs/privacy.md §5).
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def padded(quantum_ms: int) -> Iterator[None]:
    """Run the block, then sleep until a whole number (≥ 1) of quanta has passed since it
    began — also when it raised. 0: no padding."""
    if quantum_ms <= 0:
        yield
        return
    quantum = quantum_ms / 1000
    start = time.monotonic()
    try:
        yield
    finally:
        elapsed = time.monotonic() - start
        time.sleep(max(1, math.ceil(elapsed / quantum)) * quantum - elapsed)
