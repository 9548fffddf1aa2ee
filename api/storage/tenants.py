"""Deleting a tenant (contract 3.8): a mark on its blob usage item and its head, then
every item of its partitions goes in batches, then the marks, ended in one
transaction that also raises the tenant id's fence. Each step is idempotent, so a
call that dies halfway is resumed by the next one.

The mark is on the head, which every write conditions on and every sync's first
Query returns: while it is there, writes are cancelled and syncs refused with
TENANT_DELETED at no extra read or write on the request path. It carries a random
id, the same on both items from the first call to the last: each call reads it, and
conditions every removal and rewrite on it (`DeletionMark`), so a call that runs late
(an app's retry, two devices of the owner) finds its deletion over and touches
nothing of the tenant written again, or of a later deletion. The mark itself is
written only on the life of the tenant its call read (`mark_deleting`)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Any

from botocore.exceptions import ClientError

from api.domain.deletion import DeletionEnd, DeletionMark, DeletionOver
from api.domain.errors import Unavailable
from api.storage import codecs, deletion_usage, keys
from api.storage.errors import error_code, translated
from api.storage.models import HeadItem, RecordItem
from api.storage.reads import TOTAL_CAPACITY, connection
from api.storage.stream_sweep import restricted, stream_partitions

# The tenant's partitions (api.storage.keys); the log's holds the head, removed last.
# Not its fence (`keys.fence_pk`), which outlives every deletion.
_PARTITIONS: tuple[Callable[[str], str], ...] = (
    keys.tenant_pk,
    keys.history_pk,
    keys.later_pk,
    keys.subscriptions_pk,
    keys.export_pk,
    keys.members_pk,
    keys.blobs_pk,
    keys.log_pk,
)
# BatchWriteItem takes at most 25 requests per call.
_BATCH_WRITE = 25
_BATCH_WRITE_ROUNDS = 5
_BY, _AT = HeadItem.deleting_by.attr_name, HeadItem.deleting_at.attr_name
_REMOVED, _TOKEN = HeadItem.removed_items.attr_name, HeadItem.token.attr_name
_BORN = HeadItem.born.attr_name
# The deletion's id, on the head and on the blob usage item.
_MARK = deletion_usage.MARK_ID


def mark_deleting(tenant_id: str, by: str, at_ms: int) -> DeletionMark | None:
    """Mark the tenant as being deleted (by the first asker; a repeat keeps the mark):
    its head and its blob usage item (from then on `requestUpload` and `attachment`
    refuse), in one transaction; the mark this call takes part in. None: the life of
    the tenant this call found is over (its deletion ended, or it was written again
    since: nothing is left to do for this call).

    The call deletes the life it reads (the head, consistent): a mark it finds on it,
    or else a new one, written only on that life. The head's condition pins what was
    read (no head; or the first token `born`, which every life has its own of, above
    the last life's tokens), so a call read while the tenant's last deletion ended,
    whose mark would land after a member wrote the tenant again, is refused by
    DynamoDB (a condition is evaluated at the transaction's place in the serial
    order, docs/ordering.md, G1) instead of burying that acknowledged write."""
    client = connection().client
    head = _item(keys.log_pk(tenant_id), keys.HEAD_SK)
    found = _mark_of(head)
    if found is not None:
        return found
    usage = _item(keys.blobs_pk(tenant_id), keys.USAGE_SK) or {}
    # A usage item marked alone: a call of an earlier release, cut between its two
    # writes (it marked the usage item first); this call takes that mark on.
    mark_id = deletion_usage.mark_id(usage) or uuid.uuid4().hex
    life, names, values = _life_of(head)
    try:
        with translated():
            client.transact_write_items(
                ReturnConsumedCapacity=TOTAL_CAPACITY,
                TransactItems=[
                    deletion_usage.marking(
                        tenant_id, at_ms, mark_id, fresh=deletion_usage.mark_id(usage) is None
                    ),
                    {
                        "Update": {
                            "TableName": _table(),
                            "Key": _head_key(tenant_id),
                            "UpdateExpression": "SET #by = if_not_exists(#by, :by), "
                            "#at = if_not_exists(#at, :at), #id = :id",
                            "ConditionExpression": f"attribute_not_exists(#id) AND {life}",
                            "ExpressionAttributeNames": {
                                "#by": _BY,
                                "#at": _AT,
                                "#id": _MARK,
                                **names,
                            },
                            "ExpressionAttributeValues": {
                                ":by": {"S": by},
                                ":at": {"N": str(at_ms)},
                                ":id": {"S": mark_id},
                                **values,
                            },
                        }
                    },
                ],
            )
    except ClientError as exc:
        if not (_refused_by(exc, 0) or _refused_by(exc, 1)):
            raise _cancelled(exc) from exc
        # Another call marked the tenant meanwhile, or its life changed: the call
        # takes part in that mark if it is on the life it read, else it is over.
        now = _item(keys.log_pk(tenant_id), keys.HEAD_SK)
        if _life_of(now) != (life, names, values):
            return None
        return _mark_of(now)
    return DeletionMark(mark_id, 0)


def _mark_of(head: dict[str, Any] | None) -> DeletionMark | None:
    if head is None or _MARK not in head:
        return None
    return DeletionMark(head[_MARK]["S"], int(head.get(_REMOVED, {"N": "0"})["N"]))


def _life_of(head: dict[str, Any] | None) -> tuple[str, dict[str, str], dict[str, Any]]:
    """The condition that the head is of the life `head` (as read) is of: no head
    written yet (a head holding only a mark has no token), or the same first token."""
    if head is None or _TOKEN not in head:
        return "attribute_not_exists(#tok)", {"#tok": _TOKEN}, {}
    if _BORN not in head:  # a head written before heads recorded their first token
        return (
            "attribute_exists(#tok) AND attribute_not_exists(#b)",
            {
                "#tok": _TOKEN,
                "#b": _BORN,
            },
            {},
        )
    return "#b = :b", {"#b": _BORN}, {":b": head[_BORN]}


def check_mark(tenant_id: str, mark: DeletionMark) -> None:
    """DeletionOver unless the tenant's head still carries this mark (one consistent
    GetItem): what a call asks before each batch of removals."""
    head = _item(keys.log_pk(tenant_id), keys.HEAD_SK)
    if head is None or head.get(_MARK, {}).get("S") != mark.id:
        raise DeletionOver()


def remove_items(tenant_id: str, mark: DeletionMark, limit: int) -> int:
    """Delete up to `limit` items of the marked tenant (never its head, nor its blob
    usage item, which carries the other mark: both are ended last); how many went.
    Fewer than `limit`: none is left but those two. Each page of keys is removed only
    once the head is found still marked by `mark` (else DeletionOver): a call held
    between its pages removes nothing of the tenant written again meanwhile."""
    removed = 0
    head = _item(keys.log_pk(tenant_id), keys.HEAD_SK)
    # Its streams first: they are found from its entity items (api.storage.stream_sweep).
    streams = stream_partitions(tenant_id) if restricted(head) else []
    for pk in [*streams, *(partition(tenant_id) for partition in _PARTITIONS)]:
        kept = keys.USAGE_SK if pk == keys.blobs_pk(tenant_id) else keys.HEAD_SK
        while removed < limit:
            page = _keys_page(pk, min(1000, limit - removed + 2))
            doomed = [k for k in page if k[codecs.SK]["S"] != kept][: limit - removed]
            if not doomed:
                break
            check_mark(tenant_id, mark)
            _delete_all(doomed)
            # Counted page by page: a call that dies leaves at most one page (1,000
            # items) removed and not counted.
            _count(tenant_id, mark, len(doomed))
            removed += len(doomed)
        if removed >= limit:
            break
    return removed


def finish(tenant_id: str, mark: DeletionMark, quota_bytes: int, now_s: int) -> DeletionEnd | None:
    """End the deletion, in one TransactWriteItems each of whose writes is conditioned
    on `mark`: the head deleted; the blob usage item ended (a new generation of blob
    keys, and the room the tenant written again starts with, `deletion_usage.ending`);
    the tenant id's fence raised to the head's token, the highest the tenant had (its
    tokens ascend in commit order, and the head holds the latest); the registry entry
    of a tenant whose old links may still upload, due when they cannot. None: another
    call ended this deletion (nothing is touched)."""
    head = _item(keys.log_pk(tenant_id), keys.HEAD_SK)
    if head is None or head.get(_MARK, {}).get("S") != mark.id:
        return None
    usage = _item(keys.blobs_pk(tenant_id), keys.USAGE_SK) or {}
    actions: list[dict[str, Any]] = [
        {
            "Delete": {
                "TableName": _table(),
                "Key": _head_key(tenant_id),
                "ConditionExpression": "#id = :id",
                "ExpressionAttributeNames": {"#id": _MARK},
                "ExpressionAttributeValues": {":id": {"S": mark.id}},
            }
        },
        *deletion_usage.ending(tenant_id, mark.id, usage, quota_bytes, now_s),
    ]
    if _TOKEN in head:
        # Unconditional: the fence only rises. The tenant's first transaction checked
        # its first token was above the fence then (`api.storage.transactions`).
        actions.append(
            {
                "Update": {
                    "TableName": _table(),
                    "Key": codecs.raw_key(keys.fence_pk(tenant_id), keys.FENCE_SK),
                    "UpdateExpression": "SET #tok = :tok",
                    "ExpressionAttributeNames": {"#tok": keys.FENCE_ATTRIBUTE},
                    "ExpressionAttributeValues": {":tok": head[_TOKEN]},
                }
            }
        )
    try:
        with translated():
            connection().client.transact_write_items(
                ReturnConsumedCapacity=TOTAL_CAPACITY, TransactItems=actions
            )
    except ClientError as exc:
        if _refused_by(exc, 0):
            return None
        raise _cancelled(exc) from exc
    by = head.get(_BY, {"S": ""})["S"]
    at = int(head.get(_AT, {"N": "0"})["N"])
    return DeletionEnd(by, at, int(head.get(_REMOVED, {"N": "0"})["N"]) + 1)


def _item(pk: str, sk: str) -> dict[str, Any] | None:
    with translated():
        answer = connection().client.get_item(
            ReturnConsumedCapacity=TOTAL_CAPACITY,
            TableName=_table(),
            Key=codecs.raw_key(pk, sk),
            ConsistentRead=True,
        )
    item: dict[str, Any] | None = answer.get("Item")
    return item


def _refused_by(exc: ClientError, action: int) -> bool:
    """Whether a cancelled transaction's action at `action` failed its condition."""
    if error_code(exc) != "TransactionCanceledException":
        return False
    reasons = exc.response.get("CancellationReasons", [])
    return len(reasons) > action and reasons[action].get("Code") == "ConditionalCheckFailed"


def _cancelled(exc: ClientError) -> Exception:
    if error_code(exc) == "TransactionCanceledException":
        # A racing write on one of its items (TransactionConflict): the next call goes on.
        return Unavailable("the deletion's step met another write; call deleteTenant again")
    return exc


def _keys_page(pk: str, limit: int) -> list[dict[str, Any]]:
    with translated():
        answer = connection().client.query(
            ReturnConsumedCapacity=TOTAL_CAPACITY,
            TableName=_table(),
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
    table = _table()
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


def _count(tenant_id: str, mark: DeletionMark, removed: int) -> None:
    """Add to the mark's count (only while this mark is there)."""
    with translated():
        try:
            connection().client.update_item(
                ReturnConsumedCapacity=TOTAL_CAPACITY,
                TableName=_table(),
                Key=_head_key(tenant_id),
                UpdateExpression="ADD #n :n",
                ConditionExpression="#id = :id",
                ExpressionAttributeNames={"#n": _REMOVED, "#id": _MARK},
                ExpressionAttributeValues={":n": {"N": str(removed)}, ":id": {"S": mark.id}},
            )
        except connection().client.exceptions.ConditionalCheckFailedException:
            raise DeletionOver() from None


def _head_key(tenant_id: str) -> dict[str, Any]:
    return codecs.raw_key(keys.log_pk(tenant_id), keys.HEAD_SK)


def _table() -> str:
    return str(RecordItem.Meta.table_name)
