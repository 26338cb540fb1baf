"""Built-in PostgreSQL types on the wire: OIDs, result encoders (text and binary) and
parameter decoders. Only built-in OIDs are ever sent, so no client needs to look a type
up in the catalog (asyncpg's typeinfo query, JDBC's pg_type queries)."""

from __future__ import annotations

import datetime as dt
import math
import re
import struct
from decimal import Decimal, InvalidOperation, localcontext

from numpy import float32

from proxy.analyze.comparisons import beyond_double
from proxy.analyze.predicate import BLANKS, DECIMAL_TEXT, INTEGER_TEXT, boolean_word
from proxy.pgtypes import (
    BOOL,
    DATE,
    ELEMENTS,
    FLOAT4,
    FLOAT8,
    INT2,
    INT4,
    INT8,
    INTERVAL,
    NAMES,
    NUMERIC,
    OID,
    TIMESTAMP,
    TIMESTAMPTZ,
    interval_parts,
    interval_text,
)

INTEGERS = {INT2: "!h", INT4: "!i", INT8: "!q", OID: "!I"}
FLOATS = {FLOAT4: "!f", FLOAT8: "!d"}

_EPOCH = dt.date(2000, 1, 1)
_EPOCH_TS = dt.datetime(2000, 1, 1)
_NUMERIC_SIGNS = {0x0000: 1, 0x4000: -1}


class BadValue(ValueError):
    """A parameter that cannot be read as its type (SQLSTATE 22P02), or a number beyond
    its type's range (22003), as PostgreSQL refuses either."""

    def __init__(self, message: str, sqlstate: str = "22P02") -> None:
        super().__init__(message)
        self.sqlstate = sqlstate


# Results --------------------------------------------------------------------------------

def encode(value: object, oid: int, binary: bool, extra_float_digits: int = 1,
           zone: dt.tzinfo = dt.UTC) -> bytes | None:
    """``zone``: the session's TimeZone, in which text shows a ``timestamptz``."""
    if value is None:
        return None
    if oid in ELEMENTS:  # a one-dimensional array (percentiles of an array of fractions)
        return _array_binary(value, ELEMENTS[oid]) if binary else \
            _array_text(value, ELEMENTS[oid], extra_float_digits, zone).encode()
    if binary:
        return _encode_binary(value, oid)
    return _encode_text(value, oid, extra_float_digits, zone).encode()


def _array_text(values: list, element: int, extra_float_digits: int, zone: dt.tzinfo) -> str:
    """PostgreSQL's text of a one-dimensional array: ``{0.25,NULL,"a b"}``, an element
    quoted where it is empty, NULL's word, or holds a brace, comma, quote, backslash or
    blank."""
    texts = []
    for value in values:
        if value is None:
            texts.append("NULL")
            continue
        text = _encode_text(value, element, extra_float_digits, zone)
        if text == "" or text.upper() == "NULL" or any(c in _QUOTED for c in text):
            text = array_quoted(text)
        texts.append(text)
    return "{" + ",".join(texts) + "}"


def array_quoted(text: str) -> str:
    """An array element's text in double quotes, its backslashes and quotes escaped, as
    PostgreSQL reads and writes them."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


_QUOTED = frozenset('{},"\\ \t\n\r\v\f')


def _array_binary(values: list, element: int) -> bytes:
    """The binary form ``_array_from_binary`` reads: dimensions, a NULL flag, the element
    OID, the length and lower bound 1, then each element's length (-1: NULL) and bytes."""
    if not values:
        return struct.pack("!iiI", 0, 0, element)
    parts = [struct.pack("!iiIii", 1, any(v is None for v in values), element, len(values), 1)]
    for value in values:
        if value is None:
            parts.append(struct.pack("!i", -1))
            continue
        data = _encode_binary(value, element)
        parts.append(struct.pack("!i", len(data)) + data)
    return b"".join(parts)


def _shortest(number: float, oid: int) -> str:
    """A double (real) as PostgreSQL 12+ writes it when extra_float_digits > 0: the
    shortest digits that read back to it (Python's repr finds the same ones; numpy's for
    a real), written plainly for a decimal exponent from -4 to 14 (to 5 for a real) and
    as ``1e+15`` beyond, without a trailing ``.0`` (``661``, not ``661.0``, which the
    proxy sent until 2026-11-29)."""
    if number == 0:
        return "-0" if math.copysign(1.0, number) < 0 else "0"
    text, widest = (repr(number), 15) if oid == FLOAT8 else (str(float32(number)), 6)
    shortest = Decimal(text).normalize()
    sign, digits, exponent = shortest.as_tuple()
    power = len(digits) + exponent - 1  # of the first digit
    if -4 <= power < widest:
        return f"{shortest:f}"
    mantissa = "".join(map(str, digits))
    mantissa = mantissa[0] + (f".{mantissa[1:]}" if len(mantissa) > 1 else "")
    return f"{'-' if sign else ''}{mantissa}e{'+' if power >= 0 else '-'}{abs(power):02d}"


def _encode_text(value: object, oid: int, extra_float_digits: int, zone: dt.tzinfo) -> str:
    if oid == BOOL:
        return "t" if value else "f"
    if oid in INTEGERS:
        return str(_integer(value, oid))
    if oid in FLOATS:
        number = float(value)
        if math.isnan(number):
            return "NaN"
        if math.isinf(number):
            return "Infinity" if number > 0 else "-Infinity"
        if extra_float_digits > 0:
            return _shortest(number, oid)
        digits = (15 if oid == FLOAT8 else 6) + extra_float_digits
        return f"{number:.{max(digits, 1)}g}"
    if oid == NUMERIC:
        return f"{Decimal(str(value)):f}"
    if oid == TIMESTAMPTZ:
        return _moment_text(value.astimezone(zone))
    if oid in (DATE, TIMESTAMP):
        return _wall_text(value) if oid == TIMESTAMP else value.isoformat()
    if oid == INTERVAL:
        return interval_text(value)
    return str(value)


def _moment_text(value: dt.datetime) -> str:
    """A moment as PostgreSQL writes it in a zone: ``2024-03-31 00:00:00+01``, its
    offset's minutes and seconds only where they are not 0 (``+05:30``)."""
    offset = value.utcoffset() or dt.timedelta(0)
    sign, offset = ("-", -offset) if offset < dt.timedelta(0) else ("+", offset)
    hours, rest = divmod(int(offset.total_seconds()), 3600)
    minutes, seconds = divmod(rest, 60)
    shown = f"{sign}{hours:02d}" + (f":{minutes:02d}" if minutes or seconds else "") + (
        f":{seconds:02d}" if seconds else "")
    return _wall_text(value.replace(tzinfo=None)) + shown


def _wall_text(value: dt.datetime) -> str:
    """A wall-clock time as PostgreSQL writes it: its fraction of a second without
    trailing zeros (``12:40:55.12``, not Python's ``12:40:55.120000``)."""
    text = value.isoformat(" ")
    return text.rstrip("0") if value.microsecond else text


def _encode_binary(value: object, oid: int) -> bytes:
    if oid == BOOL:
        return b"\x01" if value else b"\x00"
    if oid in INTEGERS:
        return struct.pack(INTEGERS[oid], _integer(value, oid))
    if oid in FLOATS:
        return struct.pack(FLOATS[oid], float(value))
    if oid == NUMERIC:
        return _numeric_binary(Decimal(str(value)))
    if oid == DATE:
        return struct.pack("!i", (value - _EPOCH).days)
    if oid == INTERVAL:  # microseconds, days, months
        days, micros = interval_parts(value)
        return struct.pack("!qii", micros, days, 0)
    if oid in (TIMESTAMP, TIMESTAMPTZ):
        if value.tzinfo is not None:
            value = value.astimezone(dt.UTC).replace(tzinfo=None)
        delta = value - _EPOCH_TS
        return struct.pack("!q", (delta.days * 86400 + delta.seconds) * 1_000_000
                           + delta.microseconds)
    return str(value).encode()


def _integer(value: object, oid: int) -> int:
    """A value sent as an integer type, within its range (``result_types.fitted`` keeps
    released values there; this keeps an encoding from failing on any other)."""
    low, high = _INTEGER_RANGES[oid]
    return min(max(int(value), low), high)


_INTEGER_RANGES = {INT2: (-2**15, 2**15 - 1), INT4: (-2**31, 2**31 - 1),
                   INT8: (-2**63, 2**63 - 1), OID: (0, 2**32 - 1)}


def _numeric_binary(value: Decimal) -> bytes:
    if value.is_nan():
        return struct.pack("!hhHh", 0, 0, 0xC000, 0)
    if value.is_infinite():  # PostgreSQL 14+'s numeric ±Infinity
        return struct.pack("!hhHh", 0, 0, 0xF000 if value.is_signed() else 0xD000, 0)
    sign = 0x4000 if value.is_signed() else 0
    text = f"{abs(value):f}"
    whole, _, fraction = text.partition(".")
    dscale = len(fraction)
    whole = whole.lstrip("0")
    whole = "0" * (-len(whole) % 4) + whole
    fraction = fraction + "0" * (-len(fraction) % 4)
    groups = [int(whole[i:i + 4]) for i in range(0, len(whole), 4)]
    weight = len(groups) - 1
    groups += [int(fraction[i:i + 4]) for i in range(0, len(fraction), 4)]
    while groups and groups[0] == 0:
        groups.pop(0)
        weight -= 1
    while groups and groups[-1] == 0:
        groups.pop()
    if not groups:
        weight = 0
    return struct.pack(f"!hhHh{len(groups)}h", len(groups), weight, sign, dscale, *groups)


# Parameters -----------------------------------------------------------------------------

def decode(data: bytes, oid: int, binary: bool) -> object:
    """A parameter's value; raises BadValue when the bytes are not of the type."""
    try:
        return _decode_binary(data, oid) if binary else _decode_text(data.decode(), oid)
    except _OutOfRange:
        raise BadValue(f"a parameter's value is out of range for type {NAMES.get(oid, oid)}",
                       "22003") from None
    except (ValueError, struct.error, InvalidOperation, UnicodeDecodeError):
        raise BadValue(f"invalid input for a parameter of type {NAMES.get(oid, oid)}") from None


class _OutOfRange(Exception):
    """A number beyond its type's range (PostgreSQL's 22003, not 22P02)."""


# What PostgreSQL's int*in, numeric_in and float*in read (PostgreSQL 15): BLANKS around
# (C's isspace, not Unicode's: Python's int() also read '１２' and '1_000'), ASCII digits;
# a double also C's strtod's hexadecimal and nan(…) forms and its words, signed.
_NUMERIC_WORDS = re.compile(r"(?i)nan|[+-]?inf(inity)?")
_FLOAT_WORDS = re.compile(r"(?i)[+-]?(nan(\([0-9a-z_]*\))?|inf(inity)?)")
_HEX_FLOAT = re.compile(r"[+-]?0[xX]([0-9a-fA-F]+\.?[0-9a-fA-F]*|\.[0-9a-fA-F]+)"
                        r"([pP][+-]?[0-9]+)?")
# numeric's storage: up to 131072 digits before the point, 16383 after it
_NUMERIC_WHOLE, _NUMERIC_SCALE = 131072, 16383


def _decode_text(text: str, oid: int) -> object:
    bare = text.strip(BLANKS)
    if oid in INTEGERS:
        if not INTEGER_TEXT.fullmatch(bare):
            raise ValueError(text)
        low, high = _INTEGER_RANGES[oid]
        if not (-2 ** 31 if oid == OID else low) <= int(bare) <= high:  # oidin: -1 is 2³²-1
            raise _OutOfRange
        return int(bare) % 2 ** 32 if oid == OID else int(bare)
    if oid in FLOATS:
        return _float_text(bare, oid)
    if oid == NUMERIC:
        if _NUMERIC_WORDS.fullmatch(bare):
            return Decimal(bare)
        if not DECIMAL_TEXT.fullmatch(bare):
            raise ValueError(text)
        value = Decimal(bare)
        if -value.as_tuple().exponent > _NUMERIC_SCALE or (
                value and value.adjusted() >= _NUMERIC_WHOLE):
            raise _OutOfRange
        return value
    if oid == BOOL:
        value = boolean_word(bare)
        if value is None:
            raise ValueError(text)
        return value
    if oid == DATE:
        return dt.date.fromisoformat(text)
    if oid in (TIMESTAMP, TIMESTAMPTZ):
        return dt.datetime.fromisoformat(text)
    return text


def _float_text(bare: str, oid: int) -> float:
    """A double or real as PostgreSQL reads one: beyond the type's range, or not 0 but
    rounding to 0, is out of range (its subnormal numbers are read)."""
    if _FLOAT_WORDS.fullmatch(bare):
        return float(bare.lstrip("+-")[:3]) * (-1 if bare.startswith("-") else 1)
    if _HEX_FLOAT.fullmatch(bare):
        try:
            value = float.fromhex(bare)
        except OverflowError:
            raise _OutOfRange from None
        digits = bare.lower().split("p")[0].removeprefix("-").removeprefix("+")[2:]
        zero = digits.strip("0.") == ""
    elif DECIMAL_TEXT.fullmatch(bare):
        if beyond_double(bare):
            raise _OutOfRange
        value, zero = float(bare), Decimal(bare) == 0
    else:
        raise ValueError(bare)
    if oid == FLOAT4:
        try:
            value = struct.unpack("!f", struct.pack("!f", value))[0]
        except OverflowError:
            raise _OutOfRange from None
    if math.isinf(value) or (value == 0 and not zero):
        raise _OutOfRange
    return value


def _decode_binary(data: bytes, oid: int) -> object:
    if oid in ELEMENTS:
        return _array_from_binary(data, ELEMENTS[oid])
    if oid in INTEGERS:
        return struct.unpack(INTEGERS[oid], data)[0]
    if oid in FLOATS:
        return struct.unpack(FLOATS[oid], data)[0]
    if oid == BOOL:
        if data not in (b"\x00", b"\x01"):
            raise ValueError("bool")
        return data == b"\x01"
    if oid == NUMERIC:
        return _numeric_from_binary(data)
    if oid == DATE:
        return _EPOCH + dt.timedelta(days=struct.unpack("!i", data)[0])
    if oid in (TIMESTAMP, TIMESTAMPTZ):
        value = _EPOCH_TS + dt.timedelta(microseconds=struct.unpack("!q", data)[0])
        return value.replace(tzinfo=dt.UTC) if oid == TIMESTAMPTZ else value
    return data.decode()


def _array_from_binary(data: bytes, element: int) -> list:
    """A one-dimensional array (asyncpg sends a list so): its elements, None for NULL; the
    element type must be the array's (a client that says int8[] sends int8s)."""
    dimensions, _, sent = struct.unpack_from("!iiI", data)
    if dimensions == 0:
        return []
    if dimensions != 1 or sent != element:
        raise ValueError("array")
    count, _ = struct.unpack_from("!ii", data, 12)
    values, at = [], 20
    for _ in range(count):
        (length,) = struct.unpack_from("!i", data, at)
        at += 4
        if length < 0:
            values.append(None)
            continue
        values.append(_decode_binary(data[at:at + length], element))
        at += length
    if at != len(data):
        raise ValueError("array")
    return values


def _numeric_from_binary(data: bytes) -> Decimal:
    count, weight, sign, dscale = struct.unpack_from("!hhHh", data)
    if sign == 0xC000:
        return Decimal("NaN")
    if sign not in _NUMERIC_SIGNS or len(data) != 8 + 2 * count:
        raise ValueError("numeric")
    digits = "".join(f"{d:04d}" for d in struct.unpack_from(f"!{count}h", data, 8)) or "0"
    exponent = 4 * (weight + 1 - count) if count else 0
    value = Decimal(f"{digits}E{exponent}")
    with localcontext() as context:
        context.prec = max(len(digits), 4 * (weight + 1)) + dscale + 4
        return _NUMERIC_SIGNS[sign] * value.quantize(Decimal(1).scaleb(-dscale))
