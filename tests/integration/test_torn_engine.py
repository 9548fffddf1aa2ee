"""The torn-commit engine tears, and still enforces conditions (tests/support/torn.py)."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError

from api.settings import Settings
from tests.support.torn import TornEngine


@pytest.fixture
def through(torn: TornEngine, settings: Settings) -> Iterator[Any]:
    """A raw boto3 client whose requests go through the torn engine."""
    client = boto3.client("dynamodb", region_name=settings.aws_region, endpoint_url=torn.endpoint)
    yield client
    client.close()


def _put(table: str, pk: str, sk: str, **extra: Any) -> dict[str, Any]:
    item = {"pk": {"S": pk}, "sk": {"S": sk}, "v": {"S": "new"}}
    return {"Put": {"TableName": table, "Item": item, **extra}}


def _get(client: Any, table: str, pk: str, sk: str) -> dict[str, Any] | None:
    key = {"pk": {"S": pk}, "sk": {"S": sk}}
    item: dict[str, Any] | None = client.get_item(
        TableName=table, Key=key, ConsistentRead=True
    ).get("Item")
    return item


def _partition(client: Any, table: str, pk: str) -> list[dict[str, Any]]:
    """Every item of partition `pk`, by one consistent Query."""
    items: list[dict[str, Any]] = client.query(
        TableName=table,
        KeyConditionExpression="pk = :pk",
        ExpressionAttributeValues={":pk": {"S": pk}},
        ConsistentRead=True,
    )["Items"]
    return items


def _is(sk: str) -> Any:
    return lambda action: action.key_attributes["sk"]["S"] == sk


def test_a_read_sees_a_transaction_half_applied(
    torn: TornEngine, through: Any, settings: Settings
) -> None:
    table, pk = settings.table_name, f"torn-{uuid.uuid4().hex}"
    with torn.hold(_is("b")) as hold:
        writer = threading.Thread(
            target=through.transact_write_items,
            kwargs={"TransactItems": [_put(table, pk, "a"), _put(table, pk, "b")]},
        )
        writer.start()
        assert hold.reached.wait(10)
        # "a" is applied, "b" is not: a consistent Query sees the transaction torn.
        assert [item["sk"]["S"] for item in _partition(through, table, pk)] == ["a"]
        # A plain write to the item still being committed is refused, like DynamoDB's.
        with pytest.raises(ClientError) as refused:
            through.put_item(TableName=table, Item={"pk": {"S": pk}, "sk": {"S": "b"}})
        assert refused.value.response["Error"]["Code"] == "TransactionConflictException"
        # A transaction touching it is cancelled with TransactionConflict, in position.
        with pytest.raises(ClientError) as cancelled:
            through.transact_write_items(TransactItems=[_put(table, pk, "c"), _put(table, pk, "b")])
        reasons = cancelled.value.response["CancellationReasons"]
        assert [r["Code"] for r in reasons] == ["None", "TransactionConflict"]
        hold.release()
        writer.join(10)
    assert _get(through, table, pk, "b") is not None
    assert _get(through, table, pk, "c") is None  # the cancelled one wrote nothing


@pytest.mark.slow
def test_random_commits_tear_for_concurrent_readers(settings: Settings, engine: Any) -> None:
    """Without holds: pauses alone let a reader see some items new and others old."""
    table, pk = settings.table_name, f"torn-{uuid.uuid4().hex}"
    with TornEngine(engine.endpoint, seed=7, max_pause_ms=5) as slow:
        client = boto3.client(
            "dynamodb", region_name=settings.aws_region, endpoint_url=slow.endpoint
        )
        done = threading.Event()
        torn_reads = 0

        def read() -> None:
            nonlocal torn_reads
            while not done.is_set():
                versions = {item["v"]["S"] for item in _partition(client, table, pk)}
                if len(versions) > 1:
                    torn_reads += 1

        for sk in "abcd":
            item = {"pk": {"S": pk}, "sk": {"S": sk}, "v": {"S": "0"}}
            client.put_item(TableName=table, Item=item)
        reader = threading.Thread(target=read)
        reader.start()
        for version in range(1, 30):
            client.transact_write_items(
                TransactItems=[
                    {
                        "Put": {
                            "TableName": table,
                            "Item": {"pk": {"S": pk}, "sk": {"S": sk}, "v": {"S": str(version)}},
                        }
                    }
                    for sk in "abcd"
                ]
            )
        done.set()
        reader.join()
        client.close()
    assert torn_reads > 0


def test_conditions_hold_exactly_one_of_two_conflicting_transactions_wins(
    through: Any, settings: Settings
) -> None:
    table = settings.table_name
    for _ in range(10):
        pk = f"torn-{uuid.uuid4().hex}"
        barrier = threading.Barrier(2)
        results: list[str] = []

        def create(
            own: str,
            pk: str = pk,
            barrier: threading.Barrier = barrier,
            results: list[str] = results,
        ) -> None:
            absent = {"ConditionExpression": "attribute_not_exists(pk)"}
            barrier.wait()
            try:
                through.transact_write_items(
                    TransactItems=[_put(table, pk, "shared", **absent), _put(table, pk, own)]
                )
                results.append("won")
            except ClientError as exc:
                codes = [r["Code"] for r in exc.response["CancellationReasons"]]
                assert codes[0] in ("ConditionalCheckFailed", "TransactionConflict"), codes
                results.append("lost")

        threads = [threading.Thread(target=create, args=(own,)) for own in ("x", "y")]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert sorted(results) == ["lost", "won"]
        written = [_get(through, table, pk, own) is not None for own in ("x", "y")]
        assert sum(written) == 1


def test_cancellation_reasons_come_back_unchanged_with_the_old_item(
    through: Any, settings: Settings
) -> None:
    table, pk = settings.table_name, f"torn-{uuid.uuid4().hex}"
    through.put_item(TableName=table, Item={"pk": {"S": pk}, "sk": {"S": "a"}, "n": {"N": "1"}})
    update: dict[str, Any] = {
        "Update": {
            "TableName": table,
            "Key": {"pk": {"S": pk}, "sk": {"S": "a"}},
            "UpdateExpression": "SET #n = :new",
            "ConditionExpression": "#n = :old",
            "ExpressionAttributeNames": {"#n": "n"},
            "ExpressionAttributeValues": {":new": {"N": "3"}, ":old": {"N": "2"}},
            "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
        }
    }
    with pytest.raises(ClientError) as cancelled:
        through.transact_write_items(TransactItems=[_put(table, pk, "b"), update])
    reasons = cancelled.value.response["CancellationReasons"]
    assert reasons[0]["Code"] == "None"
    assert reasons[1]["Code"] == "ConditionalCheckFailed"
    assert reasons[1]["Item"]["n"] == {"N": "1"}
    # The same update with a true condition applies as a plain UpdateItem would.
    update["Update"]["ExpressionAttributeValues"][":old"] = {"N": "1"}
    through.transact_write_items(TransactItems=[_put(table, pk, "b"), update])
    assert _get(through, table, pk, "a")["n"] == {"N": "3"}  # type: ignore[index]
