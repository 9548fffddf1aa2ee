"""The `Time` and `Date` scalars of contract 2, over the formats of `api.domain.timestamps`."""

from datetime import datetime
from typing import Any, NewType

import strawberry

from api.domain.timestamps import format_time, parse_date, parse_time

# Both travel as strings inside the server; the scalars validate and normalize them.
Time = NewType("Time", str)
Date = NewType("Date", str)


def _serialize_time(value: Any) -> str:
    return format_time(value) if isinstance(value, datetime) else str(value)


SCALAR_MAP: dict[object, Any] = {
    Time: strawberry.scalar(
        name="Time",
        description="RFC 3339 UTC timestamp with milliseconds, e.g. 2026-11-21T23:02:38.123Z",
        serialize=_serialize_time,
        parse_value=lambda value: format_time(parse_time(value)),
    ),
    Date: strawberry.scalar(
        name="Date",
        description="ISO 8601 calendar date, e.g. 1990-04-01",
        serialize=str,
        parse_value=lambda value: parse_date(value).isoformat(),
    ),
}
