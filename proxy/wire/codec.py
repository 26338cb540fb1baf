"""PostgreSQL protocol 3.0 framing, sans-IO: bytes in, frontend messages out; backend
messages built as bytes. No sockets here, so every malformed input can be tested alone.

Why our own: the Python codecs surveyed (docs: ../shared/research/wire-clients.md)
corrupt binary NUMERIC, drop untyped parameters or desynchronise on unknown messages;
framing is small enough to own and test.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass

PROTOCOL_3 = 196608
SSL_REQUEST = 80877103
GSSENC_REQUEST = 80877104
CANCEL_REQUEST = 80877102
MAX_STARTUP = 10_000  # bytes of a message before the StartupMessage's end (PostgreSQL's)


class ProtocolViolation(Exception):
    """The client broke the framing; the connection ends with SQLSTATE 08P01."""


class InvalidText(ProtocolViolation):
    """A string that is not UTF-8: in a startup message the connection ends; in a
    well-framed later message only that message is refused (22021), as PostgreSQL does."""


@dataclass(frozen=True)
class Startup:
    params: dict[str, str]


@dataclass(frozen=True)
class SSLRequest:
    pass


@dataclass(frozen=True)
class GSSENCRequest:
    pass


@dataclass(frozen=True)
class CancelRequest:
    pid: int
    key: int


@dataclass(frozen=True)
class Query:
    sql: str


@dataclass(frozen=True)
class Parse:
    name: str
    sql: str
    param_types: tuple[int, ...]


@dataclass(frozen=True)
class Bind:
    portal: str
    statement: str
    param_formats: tuple[int, ...]
    params: tuple[bytes | None, ...]
    result_formats: tuple[int, ...]


@dataclass(frozen=True)
class Describe:
    kind: str  # "S" statement, "P" portal
    name: str


@dataclass(frozen=True)
class Execute:
    portal: str
    max_rows: int


@dataclass(frozen=True)
class Close:
    kind: str
    name: str


@dataclass(frozen=True)
class Sync:
    pass


@dataclass(frozen=True)
class Flush:
    pass


@dataclass(frozen=True)
class Terminate:
    pass


@dataclass(frozen=True)
class Password:
    """A 'p' message: password, SASLInitialResponse or SASLResponse by context."""

    data: bytes


@dataclass(frozen=True)
class Undecodable:
    """A well-framed message whose text is not UTF-8 (SQLSTATE 22021; the session stays)."""

    type: str
    reason: str


@dataclass(frozen=True)
class Unsupported:
    """A frontend message of the protocol we do not serve: FunctionCall ('F'), and COPY
    FROM's CopyData, CopyDone and CopyFail ('d', 'c', 'f'), which PostgreSQL ignores
    outside a COPY."""

    type: str


@dataclass(frozen=True)
class Invalid:
    """A message of a type the protocol has no frontend message of: PostgreSQL ends the
    connection when it reaches it (08P01 "invalid frontend message type"), after
    answering the messages before it."""

    type: str


UNSUPPORTED = ("F", "d", "c", "f")
_TYPES = frozenset("QPBDECSHXp" + "".join(UNSUPPORTED))  # the frontend's message types

FrontendMessage = (Startup | SSLRequest | GSSENCRequest | CancelRequest | Query | Parse | Bind
                   | Describe | Execute | Close | Sync | Flush | Terminate | Password
                   | Undecodable | Unsupported | Invalid)


class Reader:
    """Splits the client's byte stream into messages. Until a StartupMessage arrives the
    messages are untyped (length first); after it, a type byte leads."""

    def __init__(self, max_message: int) -> None:
        self.max_message = max_message
        self.started = False
        self._buffer = bytearray()

    def feed(self, data: bytes) -> None:
        self._buffer += data

    def buffered(self) -> int:
        return len(self._buffer)

    def messages(self) -> Iterator[FrontendMessage]:
        while True:
            if self.started and self._buffer and chr(self._buffer[0]) not in _TYPES:
                # told at once, as PostgreSQL does: its length may be any four bytes
                # (a second StartupMessage's), which the client will never complete
                yield Invalid(chr(self._buffer[0]))
                self._buffer.clear()
                return
            header = 4 if not self.started else 5
            if len(self._buffer) < header:
                return
            (length,) = struct.unpack_from("!i", self._buffer, header - 4)
            if not self.started and length > MAX_STARTUP:
                # as PostgreSQL: a user name of 1 MB was echoed in its error and twice
                # in the log, 10,000 settings took 2.7 s to read
                raise ProtocolViolation("invalid length of startup packet")
            if length > self.max_message:
                raise ProtocolViolation(f"a message of {length:,} bytes is longer than the "
                                        f"server's max_message ({self.max_message:,} bytes); "
                                        "send less at once, or ask the data owner")
            if length < 4:
                raise ProtocolViolation(f"invalid message length {length}")
            total = header - 4 + length
            if len(self._buffer) < total:
                return
            kind = chr(self._buffer[0]) if self.started else ""
            body = bytes(self._buffer[header:total])
            del self._buffer[:total]
            if not self.started:
                yield self._untyped(body)
                continue
            try:
                yield _typed(kind, body)
            except InvalidText as exc:
                yield Undecodable(kind, str(exc))

    def _untyped(self, body: bytes) -> FrontendMessage:
        data = _Body(body)
        code = data.int32()
        if code == SSL_REQUEST and data.done():
            return SSLRequest()
        if code == GSSENC_REQUEST and data.done():
            return GSSENCRequest()
        if code == CANCEL_REQUEST:
            message = CancelRequest(data.int32(), data.int32())
            data.end()
            return message
        if code != PROTOCOL_3:
            raise ProtocolViolation(f"unsupported protocol version {code >> 16}.{code & 0xFFFF}")
        params = {}
        while True:
            key = data.cstring()
            if not key:
                break
            params[key] = data.cstring()
        data.end()
        self.started = True
        return Startup(params)


def _typed(kind: str, body: bytes) -> FrontendMessage:
    data = _Body(body)
    if kind == "Q":
        message: FrontendMessage = Query(data.cstring())
    elif kind == "P":
        name, sql = data.cstring(), data.cstring()
        message = Parse(name, sql, tuple(data.uint32() for _ in range(data.count())))
    elif kind == "B":
        portal, statement = data.cstring(), data.cstring()
        formats = tuple(data.int16() for _ in range(data.count()))
        params = tuple(data.value() for _ in range(data.count()))
        results = tuple(data.int16() for _ in range(data.count()))
        message = Bind(portal, statement, formats, params, results)
    elif kind in ("D", "C"):
        which = data.bytes(1).decode("ascii", "replace")
        if which not in ("S", "P"):
            raise ProtocolViolation(f"invalid {kind} target {which!r}")
        message = (Describe if kind == "D" else Close)(which, data.cstring())
    elif kind == "E":
        message = Execute(data.cstring(), data.int32())
    elif kind in ("S", "H", "X"):
        message = {"S": Sync, "H": Flush, "X": Terminate}[kind]()
    elif kind == "p":
        return Password(body)
    elif kind in UNSUPPORTED:
        return Unsupported(kind)
    else:
        return Invalid(kind)
    data.end()
    return message


class _Body:
    def __init__(self, body: bytes) -> None:
        self._body = body
        self._at = 0

    def bytes(self, n: int) -> bytes:
        if n < 0 or self._at + n > len(self._body):
            raise ProtocolViolation("message shorter than its contents")
        chunk = self._body[self._at:self._at + n]
        self._at += n
        return chunk

    def int16(self) -> int:
        return struct.unpack("!h", self.bytes(2))[0]

    def count(self) -> int:
        """A count of what follows, unsigned as PostgreSQL reads it: -1 is 65,535 items
        the message does not hold, not none."""
        return struct.unpack("!H", self.bytes(2))[0]

    def int32(self) -> int:
        return struct.unpack("!i", self.bytes(4))[0]

    def uint32(self) -> int:
        return struct.unpack("!I", self.bytes(4))[0]

    def value(self) -> bytes | None:
        length = self.int32()
        return None if length == -1 else self.bytes(length)

    def cstring(self) -> str:
        end = self._body.find(b"\0", self._at)
        if end < 0:
            raise ProtocolViolation("unterminated string")
        text = self._body[self._at:end]
        self._at = end + 1
        try:
            return text.decode("utf-8")
        except UnicodeDecodeError as exc:
            bad = text[exc.start:exc.end].hex(" ").replace(" ", " 0x")
            raise InvalidText(f'invalid byte sequence for encoding "UTF8": 0x{bad}') from None

    def done(self) -> bool:
        return self._at == len(self._body)

    def end(self) -> None:
        if not self.done():
            raise ProtocolViolation("message longer than its contents")


# Backend messages -----------------------------------------------------------------------

def message(kind: bytes, body: bytes = b"") -> bytes:
    return kind + struct.pack("!i", len(body) + 4) + body


def cstring(text: str) -> bytes:
    return text.replace("\0", "").encode() + b"\0"


def authentication(code: int, payload: bytes = b"") -> bytes:
    return message(b"R", struct.pack("!i", code) + payload)


def parameter_status(name: str, value: str) -> bytes:
    return message(b"S", cstring(name) + cstring(value))


def backend_key_data(pid: int, key: int) -> bytes:
    return message(b"K", struct.pack("!ii", pid, key))


def ready_for_query(status: str) -> bytes:
    return message(b"Z", status.encode())


@dataclass(frozen=True)
class Field:
    name: str
    type_oid: int
    type_size: int = -1
    type_modifier: int = -1


def row_description(fields: list[Field], formats: list[int]) -> bytes:
    body = struct.pack("!h", len(fields))
    for field, fmt in zip(fields, formats):
        # table OID 0 and attnum 0: computed columns, so JDBC asks no pg_attribute
        body += cstring(field.name) + struct.pack("!ihihih", 0, 0, field.type_oid,
                                                  field.type_size, field.type_modifier, fmt)
    return message(b"T", body)


def data_row(values: list[bytes | None]) -> bytes:
    body = struct.pack("!h", len(values))
    for value in values:
        body += struct.pack("!i", -1) if value is None else struct.pack("!i", len(value)) + value
    return message(b"D", body)


def command_complete(tag: str) -> bytes:
    return message(b"C", cstring(tag))


def parameter_description(oids: list[int]) -> bytes:
    return message(b"t", struct.pack(f"!h{len(oids)}I", len(oids), *oids))


def _fields(severity: str, code: str, text: str, detail: str | None,
            position: int | None = None) -> bytes:
    body = (b"S" + cstring(severity) + b"V" + cstring(severity) + b"C" + cstring(code)
            + b"M" + cstring(text))
    if detail:
        body += b"D" + cstring(detail)
    if position:
        body += b"P" + cstring(str(position))
    return body + b"\0"


def error_response(code: str, text: str, severity: str = "ERROR",
                   detail: str | None = None, position: int | None = None) -> bytes:
    """``position``: the character of the statement the error points at (psql draws
    a caret under it)."""
    return message(b"E", _fields(severity, code, text, detail, position))


def notice_response(text: str, code: str = "00000", detail: str | None = None) -> bytes:
    return message(b"N", _fields("NOTICE", code, text, detail))


def copy_out_response(columns: int) -> bytes:
    """CopyOutResponse: text format, every column text."""
    return message(b"H", struct.pack(f"!bh{columns}h", 0, columns, *([0] * columns)))


def copy_data(data: bytes) -> bytes:
    return message(b"d", data)


COPY_DONE = message(b"c")
PARSE_COMPLETE = message(b"1")
BIND_COMPLETE = message(b"2")
CLOSE_COMPLETE = message(b"3")
NO_DATA = message(b"n")
EMPTY_QUERY = message(b"I")
PORTAL_SUSPENDED = message(b"s")
