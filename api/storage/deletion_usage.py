"""The blob usage item's part in a tenant's deletion (`api.storage.tenants`): marked
in the transaction that marks the head, so that `requestUpload` and `attachment`
refuse from the first call on (they read this item, not the head), and ended last,
in the transaction that deletes the head, with the deletion's own mark as the
condition of every write.

Its end gives a tenant that reserved a new generation of blob keys (an upload
presigned before the deletion lands where the tenant written again never looks,
docs/attachments.md), and holds against the tenant written again the bytes that the
links of its latest reservations may still upload: a tenant id's bytes under all
its generations stay within one quota, however often it is deleted and written
again (issue 48, finding 4)."""

from __future__ import annotations

import uuid
from typing import Any

from api.domain.deletion import LinkWindow, links_of_reservations
from api.storage import codecs, keys
from api.storage.blob_usage import (
    DELETING,
    GENERATION,
    HELD_BYTES,
    HELD_UNTIL,
    LINK_BYTES,
    LINKS_EXPIRE,
    REGISTERED,
    REGISTRY_DUE,
    RESTRICTED,
    ROOM,
)
from api.storage.models import RecordItem

# The deletion's id: on the usage item from its first call, and on the head.
MARK_ID = "xid"


def mark_id(usage: dict[str, Any]) -> str | None:
    """The deletion's id the usage item (as read) carries, if any."""
    found = usage.get(MARK_ID, {}).get("S")
    return None if found is None else str(found)


def marking(tenant_id: str, at_ms: int, mark_id: str, fresh: bool) -> dict[str, Any]:
    """A transaction's write of the deletion's mark on the tenant's usage item (made
    if absent), beside the head's (`api.storage.tenants.mark_deleting`): `fresh`, on
    an item that carries no mark; else on one that carries this one already."""
    return {
        "Update": {
            "TableName": _table(),
            "Key": _usage_key(tenant_id),
            "UpdateExpression": "SET #x = if_not_exists(#x, :at), #id = :id",
            "ConditionExpression": "attribute_not_exists(#id)" if fresh else "#id = :id",
            "ExpressionAttributeNames": {"#x": DELETING, "#id": MARK_ID},
            "ExpressionAttributeValues": {":at": {"N": str(at_ms)}, ":id": {"S": mark_id}},
        }
    }


def ending(
    tenant_id: str, mark_id: str, usage: dict[str, Any], quota: int, now_s: int
) -> list[dict[str, Any]]:
    """The writes that end the usage item's mark, given the item as read (consistent)
    while it carried `mark_id`; each conditioned on that mark and on the state read.

    - It has a room (some reservation was taken since the item was made or last
      ended, so an upload may have been presigned for its generation): a new random
      generation, and what the old links may still upload (`LinkWindow`: the latest
      reservations' bytes until their last link expired and an hour more, and what
      was held already and is still) taken off the new room and held until then,
      with its registry entry due then, so that the sweep removes the old
      generations and gives the room back (`BlobUsageTable.reset_room`).
    - A generation but no room: only the mark goes (nothing was presigned for it).
    - Neither (the tenant never reserved): the item goes."""
    # The flag of restricted records goes with the head (the tenant written again
    # starts without).
    names = {"#x": DELETING, "#id": MARK_ID, "#room": ROOM, "#gen": GENERATION, "#vis": RESTRICTED}
    values: dict[str, Any] = {":id": {"S": mark_id}}
    condition = "#id = :id AND "
    if ROOM not in usage:
        if GENERATION not in usage:
            condition += "attribute_not_exists(#room) AND attribute_not_exists(#gen)"
            return [_write("Delete", tenant_id, condition, names, values)]
        names["#reg"] = REGISTERED
        condition += "attribute_not_exists(#room) AND attribute_exists(#gen)"
        return [_write("Update", tenant_id, condition, names, values, "REMOVE #x, #id, #reg, #vis")]
    held = _window(usage, LINK_BYTES, LINKS_EXPIRE, now_s).plus(
        LinkWindow(_number(usage, HELD_BYTES), _number(usage, HELD_UNTIL)).at(now_s)
    )
    names |= {"#lb": LINK_BYTES, "#le": LINKS_EXPIRE, "#hb": HELD_BYTES, "#hu": HELD_UNTIL}
    names["#reg"] = REGISTERED
    values[":gen"] = {"S": uuid.uuid4().hex}
    condition += "attribute_exists(#room)"
    if not held.bytes:
        update = "SET #gen = :gen REMOVE #x, #id, #vis, #room, #reg, #lb, #le, #hb, #hu"
        return [_write("Update", tenant_id, condition, names, values, update)]
    values |= {
        ":room": {"N": str(max(0, quota - held.bytes))},
        ":hb": {"N": str(held.bytes)},
        ":hu": {"N": str(held.until)},
        ":yes": {"BOOL": True},
    }
    update = "SET #gen = :gen, #room = :room, #hb = :hb, #hu = :hu, #reg = :yes "
    update += "REMOVE #x, #id, #vis, #lb, #le"
    registry = {
        **codecs.raw_key(keys.registry_pk(keys.registry_shard(tenant_id)), tenant_id),
        REGISTRY_DUE: {"N": str(held.until)},
    }
    return [
        _write("Update", tenant_id, condition, names, values, update),
        {"Put": {"TableName": _table(), "Item": registry}},
    ]


def _window(usage: dict[str, Any], amount: str, expires: str, now_s: int) -> LinkWindow:
    return links_of_reservations(_number(usage, amount), _number(usage, expires)).at(now_s)


def _number(item: dict[str, Any], name: str) -> int:
    return int(item[name]["N"]) if name in item else 0


def _write(
    kind: str,
    tenant_id: str,
    condition: str,
    names: dict[str, str],
    values: dict[str, Any],
    update: str | None = None,
) -> dict[str, Any]:
    """A transaction's write of the usage item; only the names and values its
    expressions use (DynamoDB refuses others)."""
    text = condition + (update or "")
    action: dict[str, Any] = {
        "TableName": _table(),
        "Key": _usage_key(tenant_id),
        "ConditionExpression": condition,
        "ExpressionAttributeNames": {k: v for k, v in names.items() if k in text},
        "ExpressionAttributeValues": {k: v for k, v in values.items() if k in text},
    }
    if update is not None:
        action["UpdateExpression"] = update
    return {kind: action}


def _usage_key(tenant_id: str) -> dict[str, Any]:
    return codecs.raw_key(keys.blobs_pk(tenant_id), keys.USAGE_SK)


def _table() -> str:
    return str(RecordItem.Meta.table_name)
