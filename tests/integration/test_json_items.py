"""Query items decoded by `json.loads` equal what botocore's own parser makes of them."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from botocore.exceptions import ClientError

from api.settings import Settings
from api.storage import json_items

EVERY_TYPE_BUT_BINARY = {
    "s": {"S": 'text with "quotes", \\ backslashes, "B": and "BS": inside, and ünïcödé'},
    "n": {"N": "-12.500"},
    "big": {"N": "123456789012345678901234567890"},
    "ss": {"SS": ["a", "b"]},
    "ns": {"NS": ["1", "2.5"]},
    "bool": {"BOOL": False},
    "null": {"NULL": True},
    "l": {"L": [{"S": "x"}, {"N": "1"}, {"M": {"k": {"BOOL": True}}}]},
    "m": {"M": {"nested": {"M": {"deep": {"L": []}}}, "empty": {"S": ""}}},
}


@pytest.fixture
def clients(settings: Settings) -> Iterator[tuple[Any, Any, list[bool]]]:
    """(plain botocore client, client with the JSON decoding, whether it took each response)."""
    plain = settings.dynamodb_client()
    fast = settings.dynamodb_client()
    taken: list[bool] = []

    def spy(response_dict: Any, customized_response_dict: Any, **kwargs: Any) -> None:
        json_items.decode_items_with_json(response_dict, customized_response_dict, **kwargs)
        taken.append("Items" in customized_response_dict)

    fast.meta.events.register(json_items.EVENT, spy)
    yield plain, fast, taken


def _put(ddb: Any, table: str, pk: str, sk: str, attributes: dict[str, Any]) -> None:
    ddb.put_item(TableName=table, Item={"pk": {"S": pk}, "sk": {"S": sk}, **attributes})


def _query(client: Any, table: str, pk: str, **extra: Any) -> dict[str, Any]:
    response: dict[str, Any] = client.query(
        TableName=table,
        KeyConditionExpression="pk = :p",
        ExpressionAttributeValues={":p": {"S": pk}},
        ConsistentRead=True,
        ReturnConsumedCapacity="TOTAL",
        **extra,
    )
    response.pop("ResponseMetadata")
    return response


def test_every_attribute_type_decodes_as_botocore_does(
    clients: tuple[Any, Any, list[bool]], settings: Settings
) -> None:
    plain, fast, taken = clients
    pk = f"json-{uuid.uuid4().hex}"
    for i in range(5):
        _put(plain, settings.table_name, pk, f"{i:03d}", EVERY_TYPE_BUT_BINARY)

    for extra in ({}, {"Limit": 2}, {"ScanIndexForward": False}):
        expected = _query(plain, settings.table_name, pk, **extra)
        assert _query(fast, settings.table_name, pk, **extra) == expected
    assert taken == [True, True, True]
    assert expected["Items"][0]["s"] == EVERY_TYPE_BUT_BINARY["s"]
    assert "LastEvaluatedKey" in _query(fast, settings.table_name, pk, Limit=2)


def test_binary_values_are_left_to_botocore(
    clients: tuple[Any, Any, list[bool]], settings: Settings
) -> None:
    plain, fast, taken = clients
    pk = f"json-{uuid.uuid4().hex}"
    _put(plain, settings.table_name, pk, "1", {"b": {"B": b"\x00\xffraw"}})
    _put(plain, settings.table_name, pk, "2", {"bs": {"BS": [b"x", b"y"]}})

    result = _query(fast, settings.table_name, pk)

    assert result == _query(plain, settings.table_name, pk)
    assert result["Items"][0]["b"] == {"B": b"\x00\xffraw"}  # bytes, not base64 text
    assert taken == [False]


def test_empty_result_and_errors_are_unchanged(
    clients: tuple[Any, Any, list[bool]], settings: Settings
) -> None:
    plain, fast, taken = clients
    pk = f"json-{uuid.uuid4().hex}"
    assert _query(fast, settings.table_name, pk) == _query(plain, settings.table_name, pk)

    with pytest.raises(ClientError) as error:
        _query(fast, "no-such-table", pk)
    assert error.value.response["Error"]["Code"] == "ResourceNotFoundException"
    assert taken == [True, False]
