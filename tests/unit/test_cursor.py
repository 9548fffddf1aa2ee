"""Cursors: opaque, signed, bound to a tenant."""

from __future__ import annotations

import base64

import pytest

from api.domain.cursor import CursorCodec, Position
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
