"""Time zones by name: those a statement writes (``AT TIME ZONE 'Europe/Berlin'``) and
the session's ``TimeZone``, the zone PostgreSQL reads and shows ``timestamptz`` in.

Names are the IANA database's (Python's ``zoneinfo``), matched in any case as PostgreSQL
matches them. PostgreSQL also takes POSIX forms (``'UTC+2'``, ``'+02'``, ``'-05:30'``)
whose signs it reads one way or the other by their spelling; the proxy takes none of
them, so no zone is read with the wrong sign (``'Etc/GMT-2'`` is two hours east)."""

from __future__ import annotations

import functools
import zoneinfo
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from decimal import Decimal, InvalidOperation

from proxy.errors import BadSetting, NotSupported

UTC = "UTC"
# PostgreSQL's names for the server's own zone (``SET TIME ZONE LOCAL``/``DEFAULT``):
# the proxy's is UTC
_SERVER_ZONE = ("local", "default", "localtime")
# The zone of the statement under analysis: read where analysis meets a time constant
# or bucket, many calls below ``analyze``, so set there for one statement rather than
# passed through every call between.
_SESSION: ContextVar[str] = ContextVar("session_zone", default=UTC)


@contextmanager
def reading_in(zone: str) -> Iterator[None]:
    """Analyse in the session's TimeZone ``zone`` (a name ``session_zone`` gave)."""
    token = _SESSION.set(zone)
    try:
        yield
    finally:
        _SESSION.reset(token)


def reading_zone() -> zoneinfo.ZoneInfo:
    """The zone the statement under analysis is read in."""
    return zone_named(_SESSION.get())


@functools.lru_cache(maxsize=64)
def zone_named(name: str) -> zoneinfo.ZoneInfo:
    """An IANA zone, its name matched as PostgreSQL matches it (any case); refused
    otherwise (abbreviations and POSIX offsets mean other things in each engine)."""
    try:
        return zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        pass
    for known in _zone_names():
        if known.lower() == name.lower():
            return zoneinfo.ZoneInfo(known)
    raise NotSupported(f"time zone {name!r} is not a zone name of the IANA database "
                       "(e.g. 'Europe/Berlin', 'UTC')")


@functools.lru_cache(maxsize=1)
def _zone_names() -> tuple[str, ...]:
    return tuple(sorted(zoneinfo.available_timezones()))


def session_zone(value: str) -> str:
    """The canonical name of a ``SET TimeZone`` value (a startup parameter, ``SET TIME
    ZONE 'x'``, ``SET TIME ZONE -7``): an IANA name as the database spells it; the
    server's own zone, UTC, for LOCAL and DEFAULT; a whole number of hours east of UTC
    as PostgreSQL reads ``SET TIME ZONE n`` (``Etc/GMT-n``, whose sign is POSIX's)."""
    text = value.strip().strip("'\"").strip()
    if text.lower() in _SERVER_ZONE or text == "":
        return UTC
    try:
        hours = Decimal(text)
    except InvalidOperation:
        hours = None
    if hours is not None:
        if hours != int(hours) or not -14 <= hours <= 14:
            raise BadSetting(f'invalid value for parameter "TimeZone": "{text}"; the proxy '
                             "takes whole hours from -14 to 14, or a zone name such as "
                             "'Europe/Berlin'")
        return UTC if hours == 0 else f"Etc/GMT{-int(hours):+d}"
    try:
        return zone_named(text).key
    except NotSupported:
        raise BadSetting(f'invalid value for parameter "TimeZone": "{text}"; the proxy '
                         "takes a zone name of the IANA database such as 'Europe/Berlin' or "
                         "'UTC' (for a fixed offset 'Etc/GMT-2', two hours east)") from None
