"""JSON for values SQL answers carry: Decimal, date, datetime and timedelta (an interval,
``MAX(t) - MIN(t)``) keep their type across
a round trip (tagged objects), and objects their keys' order, so a stored or forwarded
answer reads back as it was."""

from __future__ import annotations

import datetime
import json
from decimal import Decimal
from typing import Any

_TAGS = {"$decimal": Decimal, "$datetime": datetime.datetime.fromisoformat,
         "$date": datetime.date.fromisoformat,
         "$timedelta": lambda text: datetime.timedelta(microseconds=int(text))}


def dumps(value: Any) -> str:
    return json.dumps(value, default=_tagged)


def loads(text: str) -> Any:
    return json.loads(text, object_hook=_untagged)


def _tagged(value: Any) -> dict[str, str]:
    if isinstance(value, Decimal):
        return {"$decimal": str(value)}
    if isinstance(value, datetime.datetime):
        return {"$datetime": value.isoformat()}
    if isinstance(value, datetime.date):
        return {"$date": value.isoformat()}
    if isinstance(value, datetime.timedelta):  # whole microseconds, exactly
        return {"$timedelta": str(value // datetime.timedelta(microseconds=1))}
    raise TypeError(f"no JSON form for a {type(value).__name__}")


def _untagged(value: dict[str, Any]) -> Any:
    if len(value) == 1:
        (tag, text), = value.items()
        if tag in _TAGS:
            return _TAGS[tag](text)
    return value
