"""The DynamoDB calls the API makes, issued directly with boto3: the baseline of
every row, and what the floor server (`floor.py`) makes behind a bare route."""

from __future__ import annotations

import math
import threading
import time
from typing import Any

from api.domain.records import Record
from api.domain.tokens import next_token
from api.service.reading import TAIL_ITEMS
from api.storage import keys
from tests.support.family import PERSON

HEAD_BYTES = 70  # the head item: pk, sk, its token and the one before (prev)


def query_page(ddb: Any, table: str, tenant: str, limit: int) -> dict[str, Any]:
    """A page of the log from its start: what a bulk page reads."""
    return dict(
        ddb.query(
            TableName=table,
            KeyConditionExpression="pk = :p",
            ExpressionAttributeValues={":p": {"S": keys.log_pk(tenant)}},
            Limit=limit,
            ConsistentRead=True,
            ReturnConsumedCapacity="TOTAL",
        )
    )


def query_tail(ddb: Any, table: str, tenant: str, after: str) -> dict[str, Any]:
    """The first read of an incremental sync: the head and the newest entries."""
    return dict(
        ddb.query(
            TableName=table,
            KeyConditionExpression="pk = :p AND sk > :a",
            ExpressionAttributeValues={":p": {"S": keys.log_pk(tenant)}, ":a": {"S": after}},
            ScanIndexForward=False,
            Limit=TAIL_ITEMS + 1,
            ConsistentRead=True,
            ReturnConsumedCapacity="TOTAL",
        )
    )


class RawWrites:
    """The same DynamoDB writes the API makes, issued directly with boto3."""

    def __init__(self, ddb: Any, table: str, person: dict[str, Any]) -> None:
        self.ddb, self.table = ddb, table
        self.fields = {k: {"S": v} for k, v in PERSON.normalize_changes(person).items()}
        self.tokens: dict[tuple[str, str], str] = {}
        self.last: dict[str, str | None] = {}
        self.lock = threading.Lock()

    def _token(self, tenant: str) -> str:
        with self.lock:
            token = next_token(int(time.time() * 1000), self.last.get(tenant))
            self.last[tenant] = token
            return token

    def _record(self, entity_id: str, token: str, pk: str, sk: str) -> dict[str, Any]:
        return {
            "pk": {"S": pk},
            "sk": {"S": sk},
            "ty": {"S": "PERSON"},
            "id": {"S": entity_id},
            "tok": {"S": token},
            "ca": {"N": "1795300000000"},
            "f": {"M": self.fields},
        }

    def create(self, tenant: str, entity_id: str) -> float:
        return self._transact(tenant, [(entity_id, None)])

    def update(self, tenant: str, entity_id: str) -> float:
        self.ddb.get_item(
            TableName=self.table,
            ConsistentRead=True,
            Key={"pk": {"S": keys.tenant_pk(tenant)}, "sk": {"S": keys.entity_sk(entity_id)}},
        )
        return self._transact(tenant, [(entity_id, self.tokens[(tenant, entity_id)])])

    def create_packed(self, tenant: str, entity_ids: list[str]) -> float:
        """Creates in the fewest transactions that hold them (33 a transaction, as
        `update_packed`): seeding, not a measured row."""
        return sum(
            self._transact(tenant, [(i, None) for i in entity_ids[start : start + 33]])
            for start in range(0, len(entity_ids), 33)
        )

    def update_packed(self, tenant: str, entity_ids: list[str]) -> float:
        """Updates of distinct entities in the fewest transactions that hold them: one
        BatchGetItem, then 33 updates (99 items) and the head per transaction."""
        for start in range(0, len(entity_ids), 100):
            wanted = [
                {"pk": {"S": keys.tenant_pk(tenant)}, "sk": {"S": keys.entity_sk(i)}}
                for i in entity_ids[start : start + 100]
            ]
            self.ddb.batch_get_item(
                RequestItems={self.table: {"Keys": wanted, "ConsistentRead": True}}
            )
        units = 0.0
        for start in range(0, len(entity_ids), 33):
            chunk = entity_ids[start : start + 33]
            units += self._transact(tenant, [(i, self.tokens[(tenant, i)]) for i in chunk])
        return units

    def _transact(self, tenant: str, writes: list[tuple[str, str | None]]) -> float:
        """The API's TransactWriteItems for (entity, old token or None) pairs of one
        writer: entities, old log entries, new log entries linked in order, the head.
        The writer wrote the previous transaction itself, so there is no chain check."""
        with self.lock:
            head = self.last.get(tenant)
        items: list[dict[str, Any]] = []
        prev = head
        for entity_id, old in writes:
            token = self._token(tenant)
            condition = "attribute_not_exists(pk)" if old is None else "tok = :old"
            put: dict[str, Any] = {
                "TableName": self.table,
                "ConditionExpression": condition,
                "Item": self._record(
                    entity_id, token, keys.tenant_pk(tenant), keys.entity_sk(entity_id)
                ),
            }
            if old is not None:
                put["ExpressionAttributeValues"] = {":old": {"S": old}}
                items.append({"Delete": {"TableName": self.table, **_log_key(tenant, old)}})
            items.append({"Put": put})
            entry = self._record(entity_id, token, keys.log_pk(tenant), token)
            if prev is not None:
                entry["pv"] = {"S": prev}
            items.append({"Put": {"TableName": self.table, "Item": entry}})
            self.tokens[(tenant, entity_id)] = prev = token
        assert prev is not None
        items.append(_head_update(self.table, tenant, prev, head, len(writes)))
        response = self.ddb.transact_write_items(
            ReturnConsumedCapacity="TOTAL", TransactItems=items
        )
        return sum(float(e["CapacityUnits"]) for e in response.get("ConsumedCapacity", []))


def transaction_units(item_sizes: list[float]) -> int:
    """AWS: a transactional write costs 2 units per KB (rounded up) of each item."""
    return sum(2 * max(1, math.ceil(size / 1024)) for size in item_sizes)


def head_key(tenant: str) -> dict[str, Any]:
    return {"pk": {"S": keys.log_pk(tenant)}, "sk": {"S": keys.HEAD_SK}}


def head_token(ddb: Any, table: str, tenant: str) -> str:
    item = ddb.get_item(TableName=table, ConsistentRead=True, Key=head_key(tenant))["Item"]
    return str(item["tok"]["S"])


def _log_key(tenant: str, token: str) -> dict[str, Any]:
    return {"Key": {"pk": {"S": keys.log_pk(tenant)}, "sk": {"S": token}}}


def _head_update(
    table: str, tenant: str, token: str, head: str | None, entries: int
) -> dict[str, Any]:
    """The head moves from `head` to `token`, remembering `head` as its prev and how
    many entries the transaction wrote."""
    values: dict[str, Any] = {":t": {"S": token}, ":n": {"N": str(entries)}}
    update: dict[str, Any] = {
        "TableName": table,
        "Key": head_key(tenant),
        "UpdateExpression": "SET tok = :t, n = :n",
        "ConditionExpression": "attribute_not_exists(tok)",
        "ExpressionAttributeValues": values,
    }
    if head is not None:
        update["UpdateExpression"] += ", pv = :p"
        update["ConditionExpression"] = "tok = :p"
        values[":p"] = {"S": head}
    return {"Update": update}


def item_size(ddb: Any, table: str, record: Record) -> int:
    """DynamoDB's size of an item: attribute names plus values, in bytes."""
    item = ddb.get_item(
        TableName=table,
        Key={"pk": {"S": keys.log_pk(record.tenant_id)}, "sk": {"S": record.change_token}},
    )["Item"]
    return size(item)


def size(value: Any) -> int:
    total = 0
    for name, typed in value.items():
        total += len(name.encode())
        ((kind, inner),) = typed.items()
        if kind == "S":
            total += len(inner.encode())
        elif kind == "N":
            total += len(inner) // 2 + 1
        elif kind == "BOOL":
            total += 1
        elif kind == "M":
            total += 3 + size(inner)
        else:
            total += len(str(inner))
    return total
