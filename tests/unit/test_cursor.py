"""Cursors: opaque, signed, bound to a tenant."""

from __future__ import annotations

import base64

import pytest

from api.domain.cursor import NO_VERSION, CursorCodec, Position
from api.domain.errors import InvalidCursor

A = "01M806P8YE0JNMW7TSMJ956FTE"
B = "01M806PDWZH9M2Q6T243116EZ5"
codec = CursorCodec("secret")


def test_round_trip() -> None:
    cursor = codec.encode("t1", Position(after=A, upper=B))
    assert codec.decode("t1", cursor) == Position(after=A, upper=B)
    assert A not in cursor and "t1" not in cursor  # opaque to clients, not readable at a glance


def test_a_cursor_of_another_tenant_is_rejected() -> None:
    cursor = codec.encode("t1", Position(after=A, upper=B))
    with pytest.raises(InvalidCursor):
        codec.decode("t2", cursor)


def test_a_cursor_signed_with_another_secret_is_rejected() -> None:
    cursor = CursorCodec("other").encode("t1", Position(after=A, upper=B))
    with pytest.raises(InvalidCursor):
        codec.decode("t1", cursor)


def test_every_single_character_edit_is_rejected() -> None:
    cursor = codec.encode("t1", Position(after=A, upper=B))
    for i in range(len(cursor)):
        replacement = "A" if cursor[i] != "A" else "B"
        tampered = cursor[:i] + replacement + cursor[i + 1 :]
        with pytest.raises(InvalidCursor):
            codec.decode("t1", tampered)


def test_a_forged_body_is_rejected() -> None:
    raw = f"1.{A}.{B}".encode() + b"\x00" * 16
    with pytest.raises(InvalidCursor):
        codec.decode("t1", base64.urlsafe_b64encode(raw).decode())


@pytest.mark.parametrize("garbage", ["", "x", "%%%", "a" * 5000, "====", "\u00e9\u00e9"])
def test_malformed_cursors_are_rejected(garbage: str) -> None:
    with pytest.raises(InvalidCursor):
        codec.decode("t1", garbage)


def test_a_cursor_carries_settled_and_the_tenant_s_first_token() -> None:
    position = Position(after=A, upper=B, settled=A, born=A)
    assert codec.decode("t1", codec.encode("t1", position)) == position
    born_only = Position(after=A, upper=B, born=A)
    assert codec.decode("t1", codec.encode("t1", born_only)) == born_only


def test_a_cursor_made_before_cursors_carried_born_is_still_read() -> None:
    body = f"1.{A}.{B}.{A}"
    raw = body.encode() + codec._sign("t1", body)
    cursor = base64.urlsafe_b64encode(raw).decode().rstrip("=")
    assert codec.decode("t1", cursor) == Position(after=A, upper=B, settled=A)


# Version 3: a sync with streams carries `viewed`, the caller's Member version its first
# request's viewer reflected (docs/ordering.md, "A join or a leave between two pages").
C = "01M806PDWZH9M2Q6T243116EZ9"


def _body(cursor: str) -> str:
    return codec.body("t1", cursor)


def _signed(body: str) -> str:
    return codec.signed("t1", body)


@pytest.mark.parametrize("settled", [None, A])
@pytest.mark.parametrize("viewed", [C, NO_VERSION])
def test_a_cursor_of_a_sync_with_streams_carries_what_its_viewer_reflected(
    settled: str | None, viewed: str
) -> None:
    position = Position(after=A, upper=B, settled=settled, born=A, streams=True, viewed=viewed)
    cursor = codec.encode("t1", position)
    assert _body(cursor) == f"3.{A}.{B}.{settled or ''}.{A}.{viewed}"
    assert codec.decode("t1", cursor) == position


def test_a_cursor_without_viewed_is_still_a_version_2_one() -> None:
    """What the previous release reads: every cursor but those carrying `viewed`."""
    streams = Position(after=A, upper=B, born=A, streams=True)
    assert _body(codec.encode("t1", streams)) == f"2.{A}.{B}..{A}.s"
    assert codec.decode("t1", codec.encode("t1", streams)) == streams
    plain = Position(after=A, upper=B, born=A, viewed=C)  # no streams: viewed is not carried
    assert _body(codec.encode("t1", plain)) == f"2.{A}.{B}..{A}"
    assert codec.decode("t1", codec.encode("t1", plain)) == Position(after=A, upper=B, born=A)


@pytest.mark.parametrize(
    "body",
    [
        f"3.{A}.{B}..{A}",  # no viewed
        f"3.{A}.{B}..{A}.",  # an empty one
        f"3.{A}.{B}..{A}.s",  # a version 2's flag in its place
        f"3.{A}.{B}..{A}.{C}.s",  # one part too many
        f"3.{A}.{B}..{A}.{C.lower()}",  # not a token
        f"3..{B}..{A}.{C}",  # no position
        f"3.{A}...{A}.{C}",  # no bound
        f"3.{A}.{B}.x.{A}.{C}",  # settled not a token
        f"2.{A}.{B}..{A}.{C}",  # viewed in a version 2
        f"4.{A}.{B}..{A}.{C}",  # a later version
    ],
)
def test_a_malformed_version_3_cursor_is_rejected(body: str) -> None:
    with pytest.raises(InvalidCursor, match="malformed"):
        codec.decode("t1", _signed(body))


def test_a_version_3_cursor_edited_or_of_another_tenant_is_rejected() -> None:
    cursor = codec.encode("t1", Position(after=A, upper=B, streams=True, viewed=C))
    with pytest.raises(InvalidCursor):
        codec.decode("t2", cursor)
    raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
    forged = raw[:-16].replace(C.encode(), B.encode()) + raw[-16:]  # a later viewed
    with pytest.raises(InvalidCursor):
        codec.decode("t1", base64.urlsafe_b64encode(forged).decode())
