from __future__ import annotations

from datetime import UTC, date, datetime, timedelta, timezone

import pytest

from api.domain.timestamps import format_time, parse_date, parse_time


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (datetime(2026, 11, 21, 23, 2, 38, 123456, tzinfo=UTC), "2026-11-21T23:02:38.123Z"),
        (datetime(2026, 1, 1, tzinfo=UTC), "2026-01-01T00:00:00.000Z"),
        # Milliseconds are truncated, never rounded into the next second.
        (datetime(2026, 1, 1, 0, 0, 59, 999999, tzinfo=UTC), "2026-01-01T00:00:59.999Z"),
        # Other offsets are converted to UTC.
        (
            datetime(2026, 11, 22, 1, 2, 3, tzinfo=timezone(timedelta(hours=2))),
            "2026-11-21T23:02:03.000Z",
        ),
        # RFC 3339 needs four year digits.
        (datetime(1, 2, 3, tzinfo=UTC), "0001-02-03T00:00:00.000Z"),
    ],
)
def test_format_time(value: datetime, text: str) -> None:
    assert format_time(value) == text


@pytest.mark.parametrize(
    "text",
    ["2026-11-21T23:02:38.123Z", "2026-11-22T00:02:38+01:00", "0001-01-01T00:00:00.000000Z"],
)
def test_parse_then_format_round_trips_to_utc(text: str) -> None:
    parsed = parse_time(text)
    assert parsed.tzinfo is UTC
    assert parse_time(format_time(parsed)) == parsed.replace(
        microsecond=parsed.microsecond // 1000 * 1000
    )


@pytest.mark.parametrize(
    "text",
    [
        "2026-11-21T23:02:38",  # no offset
        "2026-11-21 23:02:38Z",
        "2026-11-21T23:02:38.123Z\n",
        "21/11/2026",
        "",
        "2026-13-01T00:00:00Z",
    ],
)
def test_parse_time_rejects(text: str) -> None:
    with pytest.raises(ValueError):
        parse_time(text)


def test_parse_date() -> None:
    assert parse_date("1990-04-01") == date(1990, 4, 1)
    for bad in ("1990-4-1", "1990-04-01\n", "1990-02-30", "1990-04-01T00:00:00Z"):
        with pytest.raises(ValueError):
            parse_date(bad)
