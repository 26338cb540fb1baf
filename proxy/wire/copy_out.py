"""``COPY (query) TO STDOUT``: what psql's ``\\copy (…) TO 'file'`` sends. The query
inside is answered (and charged) like the same query on its own; only its rows travel
as COPY data instead of DataRows. COPY of a table, COPY FROM and COPY to a server file
stay refused: the first would send raw rows, the others write.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlglot.tokens import Token, TokenType

from proxy.errors import NotSupported, RawRowAccess, ReadOnly


@dataclass(frozen=True)
class CopyOptions:
    csv: bool = False
    header: bool = False
    delimiter: str = "\t"
    null: str = "\\N"
    quote: str = '"'

    def line(self, values: list[bytes | None]) -> bytes:
        """One row in PostgreSQL's text or CSV COPY format, from text-format cells."""
        cells = [self.null if v is None else self._cell(v.decode()) for v in values]
        return (self.delimiter.join(cells) + "\n").encode()

    def header_line(self, names: list[str]) -> bytes:
        return self.line([name.encode() for name in names])

    def _cell(self, text: str) -> str:
        if not self.csv:
            return (text.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n")
                    .replace("\r", "\\r"))
        # quoted where PostgreSQL quotes: where the text could be read as something else
        # (Python's csv module cannot tell an empty string from NULL, so it is not used)
        if text == self.null or any(c in text for c in (self.delimiter, self.quote, "\n", "\r")):
            return self.quote + text.replace(self.quote, self.quote * 2) + self.quote
        return text


def read_copy(tokens: tuple[Token, ...], text: str) -> tuple[str, CopyOptions]:
    """The query inside ``COPY (query) TO STDOUT [WITH] [(]options[)]`` and its options."""
    if len(tokens) < 2 or tokens[1].token_type != TokenType.L_PAREN:
        raise (ReadOnly if _word(tokens, "FROM") else RawRowAccess)(
            "COPY of a table is refused: it would send raw rows (or write them); write "
            "COPY (SELECT aggregates …) TO STDOUT, or psql's \\copy (SELECT …) TO 'file'")
    depth, close = 0, None
    for index, token in enumerate(tokens[1:], start=1):
        depth += {TokenType.L_PAREN: 1, TokenType.R_PAREN: -1}.get(token.token_type, 0)
        if depth == 0:
            close = index
            break
    rest = [t.text.upper() if t.token_type != TokenType.STRING else t.text
            for t in tokens[close + 1:] if t.token_type not in (
                TokenType.L_PAREN, TokenType.R_PAREN, TokenType.COMMA)]
    if rest[:2] != ["TO", "STDOUT"]:
        raise ReadOnly("COPY writes only to the client here: write COPY (query) TO STDOUT "
                       "(psql: \\copy (query) TO 'file')")
    query = text[tokens[1].end + 1:tokens[close].start]
    return query, _options([w for w in rest[2:] if w != "WITH"])


def _options(words: list[str]) -> CopyOptions:
    values: dict[str, object] = {}
    at = 0
    while at < len(words):
        word, following = words[at], words[at + 1] if at + 1 < len(words) else None
        at += 1
        if word == "CSV" or (word == "FORMAT" and following in ("CSV", "TEXT")):
            values["csv"] = word == "CSV" or following == "CSV"
            at += word == "FORMAT"
        elif word == "HEADER":
            on = following not in ("FALSE", "OFF", "0")
            values["header"] = on
            at += following in ("TRUE", "ON", "1", "FALSE", "OFF", "0")
        elif word in ("DELIMITER", "NULL", "QUOTE") and following is not None:
            values[word.lower()] = following
            at += 1
        else:
            raise NotSupported(f"COPY option {word} is not supported; use FORMAT text|csv, "
                               "HEADER, DELIMITER, NULL or QUOTE")
    if "null" not in values and values.get("csv"):
        values["null"] = ""
    if "delimiter" not in values and values.get("csv"):
        values["delimiter"] = ","
    return CopyOptions(**values)


def _word(tokens: tuple[Token, ...], word: str) -> bool:
    return any(t.text.upper() == word for t in tokens)
