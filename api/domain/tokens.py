"""Change tokens: 26-character Crockford ULIDs, strictly increasing per tenant.

The clock only proposes a token. Order comes from the store: a write commits only
if its token is greater than the tenant's head (see `api.storage.keys`), and a
token proposed after a known head is always greater than it, even when the clock
is behind or many writes share one millisecond.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime

from ulid import ULID, base32

from api.domain.errors import BadUserInput

_ULID_RE = re.compile(r"^[0-7][0-9A-HJKMNP-TV-Z]{25}$")
# The latest token time a client may send: 9999-12-31T23:00Z, an hour before the
# last instant a datetime can hold (a write proposes past the token it is based
# on, by at most a second per retry). ULIDs reach year 10889; a token the server
# hands out never comes near either, so a token above this is bad input.
MAX_TOKEN_MS = 253_402_300_799_999 - 3_600_000


def next_token(now_ms: int, after: str | None) -> str:
    """A new token from the clock, bumped past `after` when the clock is not ahead of it."""
    candidate = ULID.from_timestamp(now_ms / 1000)
    if after is not None:
        floor = ULID.from_str(after)
        if candidate <= floor:
            return token_after(after)
    return str(candidate)


def is_token(value: str) -> bool:
    return bool(_ULID_RE.fullmatch(value))


def check_token(value: str, what: str) -> str:
    """Validate a client-supplied change token."""
    if not isinstance(value, str) or not is_token(value):
        raise BadUserInput(f"{what} must be a change token (a 26-character ULID)")
    if token_ms(value) > MAX_TOKEN_MS:
        raise BadUserInput(f"{what} is not a change token of this server (its time is after 9999)")
    return value


def token_ms(token: str) -> int:
    """The Unix time in milliseconds a token stands for."""
    # Its first 10 characters: a fifth of the time of decoding the whole ULID, paid
    # for every item of every page (`updatedAt`).
    return int.from_bytes(base32.decode_timestamp(token[:10]), "big")


def token_time(token: str) -> datetime:
    """The instant a token stands for; `updatedAt` of the write that made it."""
    return datetime.fromtimestamp(token_ms(token) / 1000, tz=UTC)


def token_after(token: str) -> str:
    """The smallest token greater than `token`."""
    return str(ULID.from_int(int(ULID.from_str(token)) + 1))


def token_before(token: str) -> str:
    """The greatest token smaller than `token`."""
    return str(ULID.from_int(int(ULID.from_str(token)) - 1))


def tokens_from(first: str, count: int) -> list[str]:
    """`count` consecutive tokens from `first` up: the tokens of one transaction's writes."""
    start = int(ULID.from_str(first))
    return [str(ULID.from_int(start + i)) for i in range(count)]


def tokens_ending_at(last: str, count: int) -> list[str]:
    """`count` consecutive tokens up to `last`, ascending."""
    first = str(ULID.from_int(int(ULID.from_str(last)) - count + 1))
    return tokens_from(first, count)


def new_entity_id() -> str:
    """A server-made entity id: a ULID of its own, unrelated to any change token."""
    return str(ULID())
