"""Time zones by name: those a statement writes (``AT TIME ZONE 'Europe/Berlin'``) and
the session's ``TimeZone``, the zone PostgreSQL reads and shows ``timestamptz`` in.

Names are the IANA database's (Python's ``zoneinfo``), matched in any case as PostgreSQL
matches them. PostgreSQL also takes POSIX forms (``'UTC+2'``, ``'+02'``, ``'-05:30'``)
whose signs it reads one way or the other by their spelling; the proxy takes none of
them, so no zone is read with the wrong sign (``'Etc/GMT-2'`` is two hours east)."""

from __future__ import annotations

import datetime as dt
import functools
import zoneinfo
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from decimal import Decimal, InvalidOperation

from proxy.errors import BadSetting, NotSupported

UTC = "UTC"
_DAY = dt.timedelta(days=1)
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


# Names of PostgreSQL's default time zone abbreviations (pg_timezone_abbrevs) that are
# also IANA zones with summer time: in ``AT TIME ZONE`` (and a moment's text)
# PostgreSQL reads the abbreviation first, a fixed offset, where ``SET TimeZone`` reads
# the IANA zone. Every other IANA name reads alike in both (checked against
# PostgreSQL 15: the first four alone differ with the system's zone files).
_ABBREVIATIONS = {"cet": "Etc/GMT-1", "met": "Etc/GMT-1", "eet": "Etc/GMT-2", "wet": "Etc/UTC",
                  # fixed in the system's zone files, links to Panama, Phoenix and
                  # Honolulu in pip's tzdata (whose history differs before 1970)
                  "est": "Etc/GMT+5", "mst": "Etc/GMT+7", "hst": "Etc/GMT+10"}


def named_in_statement(name: str) -> zoneinfo.ZoneInfo:
    """The zone ``AT TIME ZONE 'name'`` reads, as PostgreSQL reads it: CET, MET, EET,
    WET, EST, MST and HST (any case) as the fixed offsets their abbreviations are, every
    other name as ``zone_named``."""
    fixed = _ABBREVIATIONS.get(name.lower())
    return zoneinfo.ZoneInfo(fixed) if fixed else zone_named(name)


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


# -- reading wall clocks as PostgreSQL does (the IANA rules from Python's zoneinfo) ----

@functools.lru_cache(maxsize=4096)
def _year_transitions(zone: zoneinfo.ZoneInfo, year: int
                      ) -> tuple[tuple[dt.datetime, dt.timedelta, dt.timedelta], ...]:
    """(UTC moment, offset before, offset after) of each change of the zone's offset
    in the UTC year ``year`` (found day by day, then to the second)."""
    found = []
    day = dt.datetime(year, 1, 1)
    end = dt.datetime(year + 1, 1, 1)
    before = offset_at(zone, day)
    while day < end:
        following = min(day + _DAY, end)
        after = offset_at(zone, following)
        if after != before:
            low, high = day, following  # offset(low) == before, offset(high) != before
            while high - low > dt.timedelta(seconds=1):
                middle = low + (high - low) / 2
                middle = middle.replace(microsecond=0)
                if middle <= low:
                    break
                if offset_at(zone, middle) == before:
                    low = middle
                else:
                    high = middle
            found.append((high, before, offset_at(zone, high)))
            before = offset_at(zone, high)
            if offset_at(zone, following) != before:  # two changes in one day: look again
                day = high
                continue
        day = following
    return tuple(found)


def offset_at(zone: zoneinfo.ZoneInfo, utc: dt.datetime) -> dt.timedelta:
    """The zone's offset at a moment (naive, UTC)."""
    return utc.replace(tzinfo=dt.UTC).astimezone(zone).utcoffset()


def transitions(zone: zoneinfo.ZoneInfo, low: dt.datetime, high: dt.datetime
                ) -> list[tuple[dt.datetime, dt.timedelta, dt.timedelta]]:
    """The zone's changes of offset (as ``_year_transitions``) from ``low`` to ``high``."""
    return [t for year in range(max(1, low.year - 1), min(9998, high.year + 1) + 1)
            for t in _year_transitions(zone, year) if low <= t[0] <= high]


def to_wall(zone: zoneinfo.ZoneInfo, utc: dt.datetime) -> dt.datetime:
    """A moment (naive, UTC) as the zone's wall clock."""
    return utc + offset_at(zone, utc)


def local_offset(zone: zoneinfo.ZoneInfo, wall: dt.datetime) -> dt.timedelta:
    """The offset PostgreSQL reads a wall clock of the zone with: after the last
    transition T (from offset b to a) with T + a <= wall, a; before the first, b. A
    skipped clock (in [T + b, T + a)) gets b, a repeated one (in [T + a, T + b)) gets a."""
    moments = transitions(zone, wall - dt.timedelta(days=2), wall + dt.timedelta(days=2))
    offset = offset_at(zone, wall - dt.timedelta(days=2))
    for moment, _, after in moments:
        if moment + after <= wall:
            offset = after
    return offset


def from_wall(zone: zoneinfo.ZoneInfo, wall: dt.datetime) -> dt.datetime:
    """A wall clock of the zone as a moment (naive, UTC)."""
    return wall - local_offset(zone, wall)
