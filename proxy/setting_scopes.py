"""Settings as PostgreSQL scopes them in a transaction block: ROLLBACK restores the
values of BEGIN, ROLLBACK TO those of the savepoint, and SET LOCAL lasts until the block
ends, when the session's own value (the last plain SET's in the block, or the one
before it) comes back. An analyst who writes ``BEGIN; SET LOCAL idp.epsilon = 1; …;
COMMIT`` expects the next statement to spend the default again; before, the block's
value stayed for the rest of the connection. The connection's own settings
(``proxy.wire.local``) and the session's idp.* settings (``proxy.session``) each keep
one of these beside their values, which are immutable snapshots (a dict never changed
in place, a frozen dataclass)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

T = TypeVar("T")

# A transaction statement's effect on the settings, as the connection plays it:
BEGIN, SAVEPOINT, ROLLBACK_TO, RELEASE, COMMIT, ROLLBACK = (
    "begin", "savepoint", "rollback to", "release", "commit", "rollback")
LOCAL_OUTSIDE = "SET LOCAL has no effect outside a transaction block (as in PostgreSQL)"


@dataclass(frozen=True)
class ScopeEvent:
    """``kind`` one of the names above; ``depth`` the savepoint's index among the
    block's (ROLLBACK TO, RELEASE); ``chained``: COMMIT or ROLLBACK AND CHAIN, a new
    block at once."""

    kind: str
    depth: int = 0
    chained: bool = False


class SettingScopes(Generic[T]):
    """The values a block's end or a savepoint's rollback brings back."""

    def __init__(self) -> None:
        self._kept: T | None = None  # in a block: what the session's value will be after it
        self._marks: list[tuple[T, T]] = []  # (value, kept) at BEGIN, then at each savepoint

    @property
    def in_block(self) -> bool:
        return bool(self._marks)

    def copy(self) -> SettingScopes[T]:
        copied = SettingScopes[T]()
        copied._kept, copied._marks = self._kept, list(self._marks)
        return copied

    def changed(self, change: Callable[[T], T], local: bool) -> bool:
        """A SET or RESET about to change the value: whether it applies (SET LOCAL
        outside a block does not); a plain one also changes what the block keeps."""
        if not self._marks:
            return not local
        if not local:
            self._kept = change(self._kept)
        return True

    def play(self, event: ScopeEvent, value: T) -> T:
        """The value after a transaction statement."""
        if event.kind == BEGIN:
            if not self._marks:
                self._kept, self._marks = value, [(value, value)]
            return value
        if event.kind == SAVEPOINT:
            self._marks.append((value, self._kept))
            return value
        if event.kind == RELEASE:
            del self._marks[event.depth + 1:]
            return value
        if event.kind == ROLLBACK_TO:
            value, self._kept = self._marks[event.depth + 1]
            del self._marks[event.depth + 2:]
            return value
        if not self._marks:  # COMMIT or ROLLBACK outside a block: nothing to end
            return value
        value = self._kept if event.kind == COMMIT else self._marks[0][0]
        self._kept, self._marks = None, []
        return self.play(ScopeEvent(BEGIN), value) if event.chained else value
