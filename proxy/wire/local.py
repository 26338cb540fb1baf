"""What a connection answers itself: transaction commands (read-only no-ops that keep
the transaction status clients track), prepared-statement housekeeping, and the
ordinary settings clients set and show (``extra_float_digits``, ``DateStyle``...).
None of these reaches a database."""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass, field

from sqlglot.tokens import Token, TokenType

from proxy.errors import BadSetting, ProxyError, Refused, SyntaxProblem
from proxy.setting_scopes import (
    BEGIN,
    COMMIT,
    LOCAL_OUTSIDE,
    RELEASE,
    ROLLBACK,
    ROLLBACK_TO,
    SAVEPOINT,
    ScopeEvent,
    SettingScopes,
)
from proxy.wire.route import Statement, setting_words
from proxy.zones import session_zone

# Sent as ParameterStatus at startup and whenever they change.
REPORTED = ("application_name", "client_encoding", "DateStyle", "integer_datetimes",
            "IntervalStyle", "is_superuser", "server_encoding", "server_version",
            "session_authorization", "standard_conforming_strings", "TimeZone",
            "default_transaction_read_only", "in_hot_standby")
_READ_ONLY = {"server_version", "server_encoding", "integer_datetimes", "is_superuser",
              "session_authorization", "standard_conforming_strings",
              "default_transaction_read_only", "in_hot_standby", "max_identifier_length",
              "transaction_read_only"}
# SHOW reads SESSION AUTHORIZATION as one word; SET drops SESSION and leaves AUTHORIZATION.
_ALIASES = {"time zone": "timezone", "transaction isolation level": "transaction_isolation",
            "session authorization": "session_authorization",
            "authorization": "session_authorization"}
# what the proxy reads and writes: other values are refused (each comma's part checked:
# DateStyle 'ISO, DMY' would read '01/02/2023' as PostgreSQL does not here)
_FIXED = {"client_encoding": ("utf8", "utf-8", "unicode", "'utf-8'"),
          "datestyle": ("iso", "mdy"), "intervalstyle": ("postgres",),
          "standard_conforming_strings": ("on",)}
_LEVELS = {"client_min_messages": ("debug5", "debug4", "debug3", "debug2", "debug1", "log",
                                   "notice", "warning", "error")}


def defaults(server_version: str, user: str) -> dict[str, str]:
    return {"application_name": "", "client_encoding": "UTF8", "DateStyle": "ISO, MDY",
            "integer_datetimes": "on", "IntervalStyle": "postgres", "is_superuser": "off",
            "server_encoding": "UTF8", "server_version": server_version,
            "session_authorization": user, "standard_conforming_strings": "on",
            "TimeZone": "UTC", "default_transaction_read_only": "on", "in_hot_standby": "off",
            "extra_float_digits": "1", "search_path": '"$user", public',
            "transaction_isolation": "repeatable read", "transaction_read_only": "on",
            "max_identifier_length": "63", "statement_timeout": "0", "lc_messages": "C",
            "client_min_messages": "notice", "lock_timeout": "0"}


@dataclass
class Outcome:
    tag: str
    columns: list[str] = field(default_factory=list)
    rows: list[tuple] = field(default_factory=list)
    changed: dict[str, str] = field(default_factory=dict)  # ParameterStatus to send
    ended: str | None = None  # "COMMIT" or "ROLLBACK": a transaction ended (and chained)
    scope: ScopeEvent | None = None  # what a transaction statement does to settings
    everything: bool = False  # RESET ALL or DISCARD ALL: the session's idp.* settings too
    notice: str | None = None


def _check_float_digits(value: str) -> None:
    """PostgreSQL's range for extra_float_digits, with its messages."""
    try:
        digits = int(value.strip())
    except ValueError:
        raise BadSetting(f'invalid value for parameter "extra_float_digits": "{value}"') \
            from None
    if not -15 <= digits <= 3:
        raise BadSetting(f'{digits} is outside the valid range for parameter '
                         '"extra_float_digits" (-15 .. 3)')


_UNITS_MS = {"ms": 1, "s": 1000, "min": 60_000, "h": 3_600_000, "d": 86_400_000}


def timeout_ms(value: str) -> int:
    """A time setting in milliseconds as PostgreSQL reads it (``statement_timeout``: a
    number of ms, or with a unit: '500ms', '5s', '1min', '2h', '1d'; 0 is none)."""
    match = re.fullmatch(r"\s*'?\s*(\d+(?:\.\d*)?)\s*(ms|s|min|h|d)?\s*'?\s*",
                         value.lower())
    if match is None:
        raise BadSetting(f'invalid value for parameter "statement_timeout": "{value}"')
    ms = round(float(match.group(1)) * _UNITS_MS[match.group(2) or "ms"])
    if ms > 2_147_483_647:
        raise BadSetting(f'{ms} ms is outside the valid range for parameter '
                         '"statement_timeout" (0 .. 2147483647)')
    return ms


def _shown_ms(ms: int) -> str:
    """PostgreSQL's SHOW of a time setting: its largest unit that divides it."""
    if ms == 0:
        return "0"
    for unit in ("d", "h", "min", "s"):
        if ms % _UNITS_MS[unit] == 0:
            return f"{ms // _UNITS_MS[unit]}{unit}"
    return f"{ms}ms"


class LocalState:
    """Per-connection settings and transaction status ('I', 'T' or 'E'). The settings
    dict is replaced, never changed in place: the transaction's scopes keep snapshots."""

    def __init__(self, server_version: str, user: str) -> None:
        self._initial = defaults(server_version, user)
        self.settings = dict(self._initial)
        self.status = "I"
        self.savepoints: list[str] = []  # of the open transaction block, oldest first
        self.scopes: SettingScopes[dict[str, str]] = SettingScopes()

    def scratch(self) -> LocalState:
        """A copy to play a message's statements on, this connection's state unchanged."""
        copied = copy.copy(self)
        copied.savepoints = list(self.savepoints)
        copied.scopes = self.scopes.copy()
        return copied

    def scoped(self, event: ScopeEvent, outcome: Outcome | None = None) -> Outcome:
        """``outcome`` (an empty one) after ``event`` brought back the values it restores,
        with the reported ones that changed (PostgreSQL reports them at a rollback)."""
        outcome = outcome or Outcome("")
        before, self.settings = self.settings, self.scopes.play(event, self.settings)
        outcome.changed = {name: self.settings[name] for name in REPORTED
                           if self.settings.get(name) != before.get(name)}
        outcome.scope = event
        return outcome

    def _reset_all(self) -> None:
        def initial(settings: dict[str, str]) -> dict[str, str]:
            return {**self._initial,
                    "session_authorization": settings["session_authorization"]}

        self.scopes.changed(initial, local=False)
        self.settings = initial(self.settings)

    def name(self, word: str) -> str:
        """The canonical spelling of a setting (PostgreSQL's names are case-blind)."""
        word = _ALIASES.get(word, word)
        for known in self.settings:
            if known.lower() == word:
                return known
        return word

    def set(self, name: str, value: str, local: bool = False) -> dict[str, str]:
        """Apply one setting (startup parameter, SET or, ``local``, SET LOCAL); return what
        clients must be told."""
        name = self.name(name.lower())
        if name in ("role", "session_authorization"):
            raise Refused(f"SET {name} is not allowed: the proxy acts as the analyst who "
                          "logged in", "42501")
        if name in _READ_ONLY:
            raise BadSetting(f"parameter {name} cannot be changed")
        allowed = _FIXED.get(name.lower())
        if allowed and any(part.strip() not in allowed for part in value.lower().split(",")):
            raise BadSetting(f"{name} = {value!r} is not supported; the proxy speaks "
                             f"{self._initial[name]}")
        levels = _LEVELS.get(name.lower(), ())
        if levels and value.lower() not in levels:
            raise BadSetting(f'invalid value for parameter "{name}": "{value}"; available '
                             f"values: {', '.join(levels)}")
        if name == "TimeZone":  # the zone statements are read in (proxy.zones)
            value = session_zone(value)
        if name == "extra_float_digits":
            _check_float_digits(value)
        if name == "statement_timeout":  # the connection cancels a statement past it
            value = _shown_ms(timeout_ms(value))
        value = value if not allowed else self._initial[name]
        if not self.scopes.changed(lambda settings: {**settings, name: value}, local):
            return {}
        self.settings = {**self.settings, name: value}
        return {name: value} if name in REPORTED else {}

    def _savepoint(self, word: str, tokens: tuple[Token, ...]) -> Outcome:
        """SAVEPOINT name, RELEASE [SAVEPOINT] name, ROLLBACK TO [SAVEPOINT] name: the
        block's savepoints kept as PostgreSQL keeps them (a rollback to one keeps it and
        ends the block's failed state), with its errors."""
        said = {"SAVEPOINT": "SAVEPOINT", "RELEASE": "RELEASE SAVEPOINT"}.get(
            word, "ROLLBACK TO SAVEPOINT")
        if self.status == "I":
            raise ProxyError(f"{said} can only be used in transaction blocks", "25P01")
        last = tokens[-1]
        if len(tokens) < 2 or last.token_type is not TokenType.IDENTIFIER and \
                last.text.upper() == "TO":  # (``ROLLBACK TO SAVEPOINT`` names "savepoint")
            raise SyntaxProblem(f"{said} takes a savepoint's name: {said} s")
        name = last.text if last.token_type is TokenType.IDENTIFIER else last.text.lower()
        if word == "SAVEPOINT":
            self.savepoints.append(name)
            return self.scoped(ScopeEvent(SAVEPOINT), Outcome(word))
        if name not in self.savepoints:
            raise ProxyError(f'savepoint "{name}" does not exist', "3B001")
        at = len(self.savepoints) - 1 - self.savepoints[::-1].index(name)
        if word == "RELEASE":
            del self.savepoints[at:]
            return self.scoped(ScopeEvent(RELEASE, at), Outcome(word))
        del self.savepoints[at + 1:]
        self.status = "T"
        return self.scoped(ScopeEvent(ROLLBACK_TO, at), Outcome("ROLLBACK"))

    def execute(self, statement: Statement) -> Outcome:
        word = statement.word
        tokens = statement.tokens
        rest = [t.text.upper() for t in tokens[1:]]
        if word == "":
            return Outcome("")
        if word in ("BEGIN", "START"):
            if self.status == "I":
                self.status = "T"
            return self.scoped(ScopeEvent(BEGIN), Outcome("BEGIN"))
        if word in ("COMMIT", "END") or word in ("ROLLBACK", "ABORT") and "TO" not in rest:
            # AND CHAIN: a new transaction begins at once (not AND NO CHAIN)
            chained = rest[-2:] == ["AND", "CHAIN"]
            if chained and self.status == "I":
                raise ProxyError(f"{word} AND CHAIN can only be used in transaction blocks",
                                 "25P01")
            tag = "ROLLBACK" if word in ("ROLLBACK", "ABORT") or self.status == "E" \
                else "COMMIT"
            ended = tag if self.status != "I" else None
            self.status, self.savepoints = "T" if chained else "I", []
            return self.scoped(ScopeEvent(COMMIT if tag == "COMMIT" else ROLLBACK,
                                          chained=chained), Outcome(tag, ended=ended))
        if word in ("SAVEPOINT", "RELEASE", "ROLLBACK", "ABORT"):
            return self._savepoint(word, tokens)
        if word in ("LISTEN", "UNLISTEN", "FETCH", "MOVE"):
            # FETCH and MOVE read the connection's cursors (proxy.wire.cursors): here only
            # as a message's statements are played to find their zones
            return Outcome(word)
        if word == "CLOSE":
            return Outcome("CLOSE CURSOR ALL" if rest[:1] == ["ALL"] else "CLOSE CURSOR")
        if word == "DEALLOCATE":
            return Outcome("DEALLOCATE ALL" if "ALL" in rest else "DEALLOCATE")
        if word == "DISCARD":
            self._reset_all()
            return Outcome("DISCARD ALL", everything=True)
        words, value = setting_words(tokens)
        local = word == "SET" and "local" in words[:1]
        words = [w for w in words if w not in ("session", "local")]
        name = " ".join(words)
        if word == "SHOW":
            if name == "all":
                return Outcome("SHOW", ["name", "setting", "description"],
                               [(k, v, "") for k, v in sorted(self.settings.items())])
            key = self.name(name)
            if key not in self.settings:
                raise BadSetting(f'unrecognized configuration parameter "{name}"', "42704")
            return Outcome("SHOW", [key.lower()], [(self.settings[key],)])
        if word == "RESET":
            if name == "all":
                changed = {k: v for k, v in self._initial.items()
                           if k in REPORTED and self.settings.get(k) != v}
                self._reset_all()
                return Outcome("RESET", changed=changed, everything=True)
            key = self.name(name)
            if key in self._initial and key not in _READ_ONLY:
                return Outcome("RESET", changed=self.set(key, self._initial[key]))
            return Outcome("RESET")
        if name.startswith(("transaction", "session characteristics")):
            return Outcome("SET")
        if value == "DEFAULT" and tokens[-1].token_type != TokenType.STRING:  # = DEFAULT
            value = self._initial.get(self.name(name), "")
        quoted = len(value) > 1 and value[0] == value[-1] in "'\"" and ", " not in value
        changed = self.set(name, value[1:-1] if quoted else value, local)
        return Outcome("SET", changed=changed,
                       notice=LOCAL_OUTSIDE if local and not self.scopes.in_block else None)
