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
