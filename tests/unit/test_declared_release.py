"""The one parser of the release an app declares (`api.domain.releases.declared`),
which both transports call: the header's text and connection_init's JSON value."""

from __future__ import annotations

import json
from typing import Any

import pytest

from api.domain import releases
from api.domain.errors import BadUserInput

# As the header's text; as JSON values parsed the way the socket's payload is.
TEXTS = [
    "+2",
    " 2 ",
    "2 ",
    "\t2",
    "0002",
    "02",
    "1_0",
    "2.0",
    "2.5",
    "0",
    "-1",
    "",
    "two",
    "٢",
    "²",
    "0x2",
    "1e1",
    "1" * 5000,
]
JSON = [
    "2.5",
    "2.0",
    "1e400",
    "-Infinity",
    "Infinity",
    "NaN",
    "0",
    "-1",
    "true",
    "false",
    "null",
    "[2]",
    '{"n": 2}',
    '"+2"',
    '"1_0"',
    '" 2"',
]


@pytest.mark.parametrize("raw", TEXTS + [json.loads(v) for v in JSON], ids=repr)
def test_anything_but_a_whole_number_from_1_is_bad_user_input(raw: Any) -> None:
    with pytest.raises(BadUserInput, match="must be a whole number from 1"):
        releases.declared(raw)


@pytest.mark.parametrize(("raw", "release"), [("1", 1), ("2", 2), ("10", 10), (2, 2), (10, 10)])
def test_a_whole_number_in_digits_is_that_release(raw: Any, release: int) -> None:
    assert releases.declared(raw) == release
