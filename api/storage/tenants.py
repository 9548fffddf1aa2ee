"""Deleting a tenant (contract 3.8): the head marks it, then every item of its
partitions goes in batches, then the mark. Each step is idempotent, so a call that
dies halfway is resumed by the next one.

The mark is on the head, which every write conditions on and every sync's first
Query returns: while it is there, writes are cancelled and syncs refused with
TENANT_DELETED at no extra read or write on the request path."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from api.domain.errors import TenantDeleted, Unavailable
from api.storage import codecs, keys
from api.storage.errors import translated
from api.storage.models import HeadItem, RecordItem
from api.storage.reads import TOTAL_CAPACITY, connection

# The tenant's partitions (api.storage.keys); the log's holds the head, removed last.
_PARTITIONS: tuple[Callable[[str], str], ...] = (
    keys.tenant_pk,
    keys.history_pk,
    keys.subscriptions_pk,
    keys.export_pk,
    keys.blobs_pk,
    keys.log_pk,
)
# BatchWriteItem takes at most 25 requests per call.
_BATCH_WRITE = 25
_BATCH_WRITE_ROUNDS = 5


def mark_deleting(tenant_id: str, by: str, at_ms: int) -> int:
    """Mark the tenant as being deleted (by the first asker; a repeat keeps the mark)
    and return how many of its items are removed so far."""
    head = codecs.raw_key(keys.log_pk(tenant_id), keys.HEAD_SK)
    by_attr, at_attr = HeadItem.deleting_by.attr_name, HeadItem.deleting_at.attr_name
    with translated():
        answer = connection().client.update_item(
            ReturnConsumedCapacity=TOTAL_CAPACITY,
            TableName=RecordItem.Meta.table_name,
            Key=head,
            UpdateExpression="SET #by = if_not_exists(#by, :by), #at = if_not_exists(#at, :at)",
            ExpressionAttributeNames={"#by": by_attr, "#at": at_attr},
            ExpressionAttributeValues={":by": {"S": by}, ":at": {"N": str(at_ms)}},
            ReturnValues="ALL_NEW",
        )
    removed = answer["Attributes"].get(HeadItem.removed_items.attr_name, {"N": "0"})
    return int(removed["N"])


def remove_items(tenant_id: str, limit: int) -> int:
    """Delete up to `limit` items of the marked tenant (never its head, nor its blob
    usage item, which carries the blob store's mark and is ended last:
    `api.storage.blob_usage`); how many went. Fewer than `limit`: none is left but
    those two."""
    removed = 0
    for partition in _PARTITIONS:
        pk = partition(tenant_id)
        kept = keys.HEAD_SK if partition is not keys.blobs_pk else keys.USAGE_SK
        while removed < limit:
            page = _keys_page(pk, min(1000, limit - removed + 2))
            doomed = [k for k in page if k[codecs.SK]["S"] != kept][: limit - removed]
            if not doomed:
                break
            _delete_all(doomed)
            # Counted page by page: a call that dies leaves at most one page (1,000
            # items) removed and not counted.
            _count(tenant_id, len(doomed))
            removed += len(doomed)
        if removed >= limit:
            break
    return removed


def finish(tenant_id: str) -> tuple[str, int, int]:
    """Remove the mark (the last item): who asked for the deletion, when (epoch ms),
    and how many items it removed in all (the head included)."""
    name = HeadItem.removed_items.attr_name
    with translated():
        answer = connection().client.delete_item(
            ReturnConsumedCapacity=TOTAL_CAPACITY,
            TableName=RecordItem.Meta.table_name,
            Key=codecs.raw_key(keys.log_pk(tenant_id), keys.HEAD_SK),
            ReturnValues="ALL_OLD",
        )
    old = answer.get("Attributes", {})
    by = old.get(HeadItem.deleting_by.attr_name, {"S": ""})["S"]
    at = int(old.get(HeadItem.deleting_at.attr_name, {"N": "0"})["N"])
    return by, at, int(old.get(name, {"N": "0"})["N"]) + (1 if old else 0)


def _keys_page(pk: str, limit: int) -> list[dict[str, Any]]:
    with translated():
        answer = connection().client.query(
            ReturnConsumedCapacity=TOTAL_CAPACITY,
            TableName=RecordItem.Meta.table_name,
            KeyConditionExpression="#pk = :pk",
            ExpressionAttributeNames={"#pk": codecs.PK, "#sk": codecs.SK},
            ExpressionAttributeValues={":pk": {"S": pk}},
            ProjectionExpression="#pk, #sk",
            ConsistentRead=True,
            Limit=limit,
        )
    items: list[dict[str, Any]] = answer.get("Items", [])
    return items


def _delete_all(item_keys: list[dict[str, Any]]) -> None:
    table = RecordItem.Meta.table_name
    for start in range(0, len(item_keys), _BATCH_WRITE):
        pending = [{"DeleteRequest": {"Key": k}} for k in item_keys[start : start + _BATCH_WRITE]]
        for round_ in range(_BATCH_WRITE_ROUNDS):
            if round_:
                time.sleep(0.01 * 2**round_)  # throttled: back off before asking again
            with translated():
                answer = connection().client.batch_write_item(
                    RequestItems={table: pending}, ReturnConsumedCapacity=TOTAL_CAPACITY
                )
            pending = answer.get("UnprocessedItems", {}).get(table, [])
            if not pending:
                break
        else:
            raise Unavailable("the data store is busy; call deleteTenant again to continue")


def _count(tenant_id: str, removed: int) -> None:
    """Add to the mark's count (only while the mark is there)."""
    head = codecs.raw_key(keys.log_pk(tenant_id), keys.HEAD_SK)
    with translated():
        try:
            connection().client.update_item(
                ReturnConsumedCapacity=TOTAL_CAPACITY,
                TableName=RecordItem.Meta.table_name,
                Key=head,
                UpdateExpression="ADD #n :n",
                ConditionExpression="attribute_exists(#by)",
                ExpressionAttributeNames={
                    "#n": HeadItem.removed_items.attr_name,
                    "#by": HeadItem.deleting_by.attr_name,
                },
                ExpressionAttributeValues={":n": {"N": str(removed)}},
            )
        except connection().client.exceptions.ConditionalCheckFailedException:
            raise TenantDeleted("this tenant was deleted meanwhile") from None
