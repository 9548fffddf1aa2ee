"""Change tokens: ULID format and strict ordering whatever the clock does."""

from __future__ import annotations

import pytest

from api.domain.errors import BadUserInput
from api.domain.tokens import (
    check_token,
    is_token,
    next_token,
    token_after,
    token_before,
    token_time,
)

NOW_MS = 1_795_300_000_000


def test_tokens_are_26_character_crockford_ulids() -> None:
    token = next_token(NOW_MS, None)
    assert len(token) == 26 and is_token(token)
    assert int(token_time(token).timestamp() * 1000) == NOW_MS


def test_many_tokens_in_one_millisecond_strictly_increase() -> None:
    tokens = [next_token(NOW_MS, None)]
    for _ in range(5000):
        tokens.append(next_token(NOW_MS, tokens[-1]))
    assert tokens == sorted(tokens) and len(set(tokens)) == len(tokens)


def test_a_clock_that_goes_backwards_still_gives_greater_tokens() -> None:
    head = next_token(NOW_MS, None)
    clock = NOW_MS
    for step in range(1000):
        clock -= 7 if step % 2 else -3  # wanders backwards overall
        token = next_token(clock, head)
        assert token > head
        head = token
    # Time stays anchored at the head, never jumps ahead of it.
    assert int(token_time(head).timestamp() * 1000) >= NOW_MS


def test_a_clock_far_behind_the_head_bumps_past_it() -> None:
    head = next_token(NOW_MS, None)
    assert next_token(NOW_MS - 10_000, head) == token_after(head)


def test_a_clock_ahead_of_the_head_uses_the_clock() -> None:
    head = next_token(NOW_MS, None)
    token = next_token(NOW_MS + 5, head)
    assert int(token_time(token).timestamp() * 1000) == NOW_MS + 5


def test_token_before_is_the_immediate_predecessor() -> None:
    assert token_before("01M806P8YE0JNMW7TSMJ956FTF") == "01M806P8YE0JNMW7TSMJ956FTE"
    assert token_before("01M806P8YE0JNMW7TSMJ956FV0") == "01M806P8YE0JNMW7TSMJ956FTZ"
    token = "01M806P8YE0JNMW7TSMJ956FTE"
    assert token_before(token_after(token)) == token == token_after(token_before(token))


def test_token_after_is_the_immediate_successor() -> None:
    assert token_after("01M806P8YE0JNMW7TSMJ956FTE") == "01M806P8YE0JNMW7TSMJ956FTF"
    assert token_after("01M806P8YE0JNMW7TSMJ956FTZ") == "01M806P8YE0JNMW7TSMJ956FV0"


@pytest.mark.parametrize(
    "value",
    [
        "",
        "abc",
        "01M806P8YE0JNMW7TSMJ956FT",
        "01M806P8YE0JNMW7TSMJ956FTEX",
        "81M806P8YE0JNMW7TSMJ956FTE",
        "01M806P8YE0JNMW7TSMJ956FTU",
        "01m806p8ye0jnmw7tsmj956fte",
        None,
        42,
    ],
)
def test_check_token_rejects_anything_but_a_ulid(value: object) -> None:
    with pytest.raises(BadUserInput):
        check_token(value, "since")  # type: ignore[arg-type]
