"""A re-read's cursor (api.service.regroup): signed like every cursor, strict, and
carrying `viewed` (what its sync's first request's viewer reflected) when known; a
re-read's cursor of the previous release (6 parts, without it) is still read."""

from __future__ import annotations

import pytest

from api.domain.cursor import NO_VERSION, CursorCodec
from api.domain.errors import InvalidCursor
from api.domain.membership import Viewer
from api.service.regroup import Place, Regroup

S = "01M806P8YE0JNMW7TSMJ956FTE"  # the sync's since
J = "01M806PBBBBBBBBBBBBBBBBBBB"  # bob joined kids
U = "01M806PDWZH9M2Q6T243116EZ5"  # the sync's bound
codec = CursorCodec("secret")
regroup = Regroup(codec, lambda *_: ([], False))
BOB = Viewer("bob", ["kids"], {"kids": J}, J)


def _place(cursor: str, sub: str | None = BOB) -> Place | None:
    return regroup.place("t1", cursor, sub)


@pytest.mark.parametrize("viewed", [J, NO_VERSION, None])
@pytest.mark.parametrize("after", [None, J])
def test_a_re_reads_cursor_round_trips(viewed: str | None, after: str | None) -> None:
    place = Place(S, U, S, "kids", after, viewed)
    cursor = regroup._encode("t1", place)
    body = codec.body("t1", cursor)
    assert body.split("|")[:6] == ["R", S, U, S, "kids", after or ""]
    assert len(body.split("|")) == (6 if viewed is None else 7)  # 6: the previous release's
    assert _place(cursor) == place


def test_a_re_reads_cursor_of_the_previous_release_is_read_without_viewed() -> None:
    place = _place(codec.signed("t1", f"R|{S}|{U}||kids|"))
    assert place == Place(S, U, None, "kids", None, None)


def test_a_changes_cursor_is_not_a_re_reads() -> None:
    assert _place(codec.signed("t1", f"2.{S}.{U}..{S}.s")) is None


@pytest.mark.parametrize(
    "body",
    [
        f"R|{S}|{U}||kids||",  # an empty viewed
        f"R|{S}|{U}||kids||x",  # not a token
        f"R|{S}|{U}||kids||{J}|{J}",  # one part too many
        f"R|{S}|{U}||kids",  # one too few
        f"R|{S}|||kids||{J}",  # no bound
        f"R|{S}|{U}|x|kids||{J}",  # born not a token
    ],
)
def test_a_malformed_re_reads_cursor_is_rejected(body: str) -> None:
    with pytest.raises(InvalidCursor, match="malformed"):
        _place(codec.signed("t1", body))


def test_a_re_reads_cursor_edited_of_another_tenant_or_caller_is_rejected() -> None:
    cursor = regroup._encode("t1", Place(S, U, None, "kids", None, J))
    with pytest.raises(InvalidCursor):
        regroup.place("t2", cursor, BOB)
    with pytest.raises(InvalidCursor):
        _place(cursor[:-2] + ("AA" if cursor[-2:] != "AA" else "BB"))
    with pytest.raises(InvalidCursor, match="caller"):
        _place(cursor, Viewer("carol", ["kids"]))  # never joined nor left kids
    with pytest.raises(InvalidCursor, match="malformed"):
        _place(cursor, None)
