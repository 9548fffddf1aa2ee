"""A tenant's blob usage item and the registry of tenants with blobs, in the single
table (`api.storage.keys`): the quota's room, and the state of the sweep of
unreferenced blobs (`api.service.blob_sweep`), which holds the item by a lease
while it works. Also the sweep's reads of the tenant's records (entities, then
earlier versions), consistent, page by page."""

from __future__ import annotations

import json
from typing import Any

from botocore.exceptions import ClientError

from api.domain.attachments import BlobKeys
from api.domain.deletion import link_expiry
from api.domain.errors import TenantDeleted, Unavailable
from api.domain.records import Record
from api.storage import codecs, keys, reads
from api.storage.errors import error_code, translated
from api.storage.models import BlobUsageItem, RecordItem
from api.storage.reads import TOTAL_CAPACITY, connection
from api.storage.restricted_flag import from_head

ROOM = "room"
REGISTERED = "reg"
GENERATION = "gen"
DELETING = "xat"
_STATE = "st"
_HOLDER = "lh"
_UNTIL = "lu"
REGISTRY_DUE = "due"
# The bytes reserved while the links of the tenant's latest reservations may still be
# used, and when the last of those links expires (epoch s): a deletion holds them
# against the tenant written again (`api.storage.deletion_usage`).
LINK_BYTES = "lb"
LINKS_EXPIRE = "le"
# Held for the uploads of earlier generations (bytes, and until when they may land,
# epoch s): the room a deletion left already lacks them; the sweep gives them back
# once it has removed those generations after that (`reset_room`).
HELD_BYTES = "hb"
HELD_UNTIL = "hu"
_ENTITIES, _HISTORY = "entities", "history"
# The tenant has (had) a restricted record: set with the head's flag, removed with the
# head by the tenant's deletion (`api.storage.deletion_usage`).
RESTRICTED = BlobUsageItem.restricted.attr_name


class BlobUsageTable:
    """The `Quota` port (`api.service.attachments`) and the `SweepTable` port
    (`api.service.sweep_ports`) on the single table."""

    # The quota (requestUpload) and the blob keys' generation.

    def generation(self, tenant_id: str) -> str:
        """The generation of the tenant's blob keys ("" for a tenant never deleted
        after it reserved): one consistent GetItem of its usage item. TenantDeleted
        while the tenant is being deleted."""
        return self.keys(tenant_id).generation

    def keys(self, tenant_id: str) -> BlobKeys:
        """The generation and the tenant's flag of restricted records (set with its
        head's in one transaction: `api.storage.stream_writes`), from one consistent
        GetItem of its usage item. TenantDeleted while it is being deleted."""
        with translated():
            answer = connection().client.get_item(
                ReturnConsumedCapacity=TOTAL_CAPACITY,
                TableName=_table(),
                Key=_usage_key(tenant_id),
                ConsistentRead=True,
            )
        item = answer.get("Item", {})
        generation = _generation_of(item)  # TenantDeleted while it is being deleted
        if RESTRICTED not in item:  # a tenant whose item never got it: its head says
            return BlobKeys(
                generation, from_head(_table(), tenant_id, _usage_key(tenant_id), DELETING)
            )
        return BlobKeys(generation, item[RESTRICTED]["BOOL"])

    def reserve(self, tenant_id: str, size: int, quota: int, now_s: int) -> str | None:
        """Take `size` bytes of the tenant's room (a tenant without an item starts with
        `quota`), in one conditional UpdateItem: the generation of the blob keys it
        reserved in; None when the room is smaller. TenantDeleted while the tenant is
        being deleted (the condition reads the mark on the same item, so a
        reservation is either before the deletion's mark or refused).

        The same update counts the bytes whose upload links may still be used, for a
        deletion to hold them against the tenant written again (`LINK_BYTES`): added
        while the last link counted has not expired, else counted afresh. Which of the
        two the item needs, the refusal of the other says (its item as it was): the
        first reservation of a window costs two updates, the others one."""
        client = connection().client
        fits = "attribute_not_exists(#x) AND (attribute_not_exists(#room) OR #room >= :size)"
        attempts = (
            ("#lb = #lb + :size", "#le >= :now"),  # the window is open: add to it
            ("#lb = :size", "(attribute_not_exists(#le) OR #le < :now)"),  # a new one
        )
        for attempt in range(4):
            counted, window = attempts[attempt % 2]
            try:
                with translated():
                    answer = client.update_item(
                        ReturnConsumedCapacity=TOTAL_CAPACITY,
                        TableName=_table(),
                        Key=_usage_key(tenant_id),
                        UpdateExpression="SET #room = if_not_exists(#room, :quota) - :size, "
                        f"{counted}, #le = :expires",
                        ConditionExpression=f"{fits} AND {window}",
                        ExpressionAttributeNames={
                            "#room": ROOM,
                            "#x": DELETING,
                            "#lb": LINK_BYTES,
                            "#le": LINKS_EXPIRE,
                        },
                        ExpressionAttributeValues={
                            ":quota": {"N": str(quota)},
                            ":size": {"N": str(size)},
                            ":now": {"N": str(now_s)},
                            ":expires": {"N": str(link_expiry(now_s))},
                        },
                        # The item is some 150 bytes (the sweep's state is an item of
                        # its own): one write unit; its `reg` says if it is registered
                        # (this update leaves it as it was), its `gen` where the blob goes.
                        ReturnValues="ALL_NEW",
                        ReturnValuesOnConditionCheckFailure="ALL_OLD",
                    )
            except ClientError as exc:
                if error_code(exc) != "ConditionalCheckFailedException":
                    raise
                item = exc.response.get("Item", {})
                _generation_of(item)  # TenantDeleted when that is why
                if int(item.get(ROOM, {"N": str(quota)})["N"]) < size:
                    return None
                continue  # the window was in the other state: the other update
            item = answer.get("Attributes", {})
            if not item.get(REGISTERED, {}).get("BOOL", False):
                self._register(tenant_id)
            return _generation_of(item)
        raise Unavailable("the tenant's quota is being updated by many requests; retry")

    def _register(self, tenant_id: str) -> None:
        """List the tenant in the registry (due for a sweep now), then note on its item
        that it is: a call that dies between the two registers it again next time."""
        with translated():
            connection().client.put_item(
                ReturnConsumedCapacity=TOTAL_CAPACITY,
                TableName=_table(),
                Item={**_registry_key(tenant_id), REGISTRY_DUE: {"N": "0"}},
            )
            connection().client.update_item(
                ReturnConsumedCapacity=TOTAL_CAPACITY,
                TableName=_table(),
                Key=_usage_key(tenant_id),
                UpdateExpression="SET #reg = :yes",
                ExpressionAttributeNames={"#reg": REGISTERED},
                ExpressionAttributeValues={":yes": {"BOOL": True}},
            )

    def room(self, tenant_id: str) -> int | None:
        """The tenant's room (None: no item, so the whole quota)."""
        with translated():
            answer = connection().client.get_item(
                ReturnConsumedCapacity=TOTAL_CAPACITY,
                TableName=_table(),
                Key=_usage_key(tenant_id),
                ConsistentRead=True,
            )
        item = answer.get("Item", {})
        return int(item[ROOM]["N"]) if ROOM in item else None

    # The sweep.

    def take(self, tenant_id: str, holder: str, now: int, until: int) -> dict[str, Any] | None:
        """Hold the tenant's sweep item until `until` (epoch s) unless another sweep
        holds it; the sweep's state as stored ({} before its first pass). None: held
        by another sweep. TenantDeleted: the tenant has no usage item (it never
        reserved, or was deleted): its sweep item goes, and it leaves the registry."""
        try:
            with translated():
                answer = connection().client.update_item(
                    ReturnConsumedCapacity=TOTAL_CAPACITY,
                    TableName=_table(),
                    Key=_sweep_key(tenant_id),
                    UpdateExpression="SET #h = :me, #u = :until",
                    ConditionExpression="attribute_not_exists(#u) OR #u < :now OR #h = :me",
                    ExpressionAttributeNames={"#h": _HOLDER, "#u": _UNTIL},
                    ExpressionAttributeValues={
                        ":me": {"S": holder},
                        ":until": {"N": str(until)},
                        ":now": {"N": str(now)},
                    },
                    ReturnValues="ALL_NEW",
                )
        except ClientError as exc:
            if error_code(exc) != "ConditionalCheckFailedException":
                raise
            return None
        if self.room(tenant_id) is None:
            with translated():
                connection().client.delete_item(
                    ReturnConsumedCapacity=TOTAL_CAPACITY,
                    TableName=_table(),
                    Key=_sweep_key(tenant_id),
                )
            self.forget(tenant_id)
            raise TenantDeleted("the tenant has no blob usage item")
        raw = answer["Attributes"].get(_STATE)
        state: dict[str, Any] = {} if raw is None else json.loads(raw["S"])
        return state

    def save(self, tenant_id: str, holder: str, state: dict[str, Any]) -> None:
        """Store the sweep's state, only while this sweep holds the item; TenantDeleted
        when it does not (deleted meanwhile, or its lease lapsed and another sweep
        took it: this one stops)."""
        try:
            with translated():
                connection().client.update_item(
                    ReturnConsumedCapacity=TOTAL_CAPACITY,
                    TableName=_table(),
                    Key=_sweep_key(tenant_id),
                    UpdateExpression="SET #st = :st",
                    ConditionExpression="#h = :me",
                    ExpressionAttributeNames={"#st": _STATE, "#h": _HOLDER},
                    ExpressionAttributeValues={
                        ":st": {"S": json.dumps(state, separators=(",", ":"))},
                        ":me": {"S": holder},
                    },
                )
        except ClientError as exc:
            if error_code(exc) == "ConditionalCheckFailedException":
                raise TenantDeleted("the sweep no longer holds the tenant's sweep item") from None
            raise

    def reset_room(self, tenant_id: str, room: int, others_gone_at: int | None) -> int | None:
        """Set the tenant's room to what a pass of the sweep counted, less what is held
        for the uploads of its earlier generations (`HELD_BYTES`), unless the usage
        item is gone (the tenant deleted meanwhile: nothing is written back). The hold
        is given back once the pass removed those generations after the last of their
        uploads could land: `others_gone_at` is when the listing that found none of
        them began (None: not known, keep it). Until when a hold remains (None: none)."""
        client = connection().client
        cleared = -1 if others_gone_at is None else others_gone_at
        common: dict[str, Any] = {
            "ReturnConsumedCapacity": TOTAL_CAPACITY,
            "TableName": _table(),
            "Key": _usage_key(tenant_id),
            "ExpressionAttributeNames": {"#room": ROOM, "#hb": HELD_BYTES, "#hu": HELD_UNTIL},
            "ExpressionAttributeValues": {
                ":room": {"N": str(room)},
                ":cleared": {"N": str(cleared)},
            },
        }
        try:
            with translated():
                client.update_item(
                    **common,
                    UpdateExpression="SET #room = :room REMOVE #hb, #hu",
                    ConditionExpression="attribute_exists(#room) AND "
                    "(attribute_not_exists(#hu) OR #hu <= :cleared)",
                    ReturnValuesOnConditionCheckFailure="ALL_OLD",
                )
            return None
        except ClientError as exc:
            if error_code(exc) != "ConditionalCheckFailedException":
                raise
            if ROOM not in exc.response.get("Item", {}):
                return None
        try:
            with translated():
                answer = client.update_item(
                    **common,
                    UpdateExpression="SET #room = :room - #hb",
                    ConditionExpression="attribute_exists(#room) AND #hu > :cleared",
                    ReturnValues="ALL_NEW",
                )
        except ClientError as exc:
            if error_code(exc) != "ConditionalCheckFailedException":
                raise
            return None  # deleted, or given back, meanwhile
        return int(answer["Attributes"][HELD_UNTIL]["N"])

    def release(self, tenant_id: str, holder: str, due: int) -> None:
        """Let go of the item and say when the tenant's next sweep is due."""
        client = connection().client
        try:
            with translated():
                client.update_item(
                    ReturnConsumedCapacity=TOTAL_CAPACITY,
                    TableName=_table(),
                    Key=_sweep_key(tenant_id),
                    UpdateExpression="REMOVE #h, #u",
                    ConditionExpression="#h = :me",
                    ExpressionAttributeNames={"#h": _HOLDER, "#u": _UNTIL},
                    ExpressionAttributeValues={":me": {"S": holder}},
                )
        except ClientError as exc:
            if error_code(exc) != "ConditionalCheckFailedException":
                raise
            return
        with translated():
            client.put_item(
                ReturnConsumedCapacity=TOTAL_CAPACITY,
                TableName=_table(),
                Item={**_registry_key(tenant_id), REGISTRY_DUE: {"N": str(due)}},
            )

    def forget(self, tenant_id: str) -> None:
        """Take a tenant without blob usage (deleted) off the registry, in one
        transaction with a check that it still has none: a tenant re-created under
        the same id whose first `reserve` ran since `take` read no usage item is
        registered (and its item says so, so it would never register again)."""
        client = connection().client
        try:
            with translated():
                client.transact_write_items(
                    ReturnConsumedCapacity=TOTAL_CAPACITY,
                    TransactItems=[
                        {
                            "ConditionCheck": {
                                "TableName": _table(),
                                "Key": _usage_key(tenant_id),
                                "ConditionExpression": "attribute_not_exists(#room)",
                                "ExpressionAttributeNames": {"#room": ROOM},
                            }
                        },
                        {"Delete": {"TableName": _table(), "Key": _registry_key(tenant_id)}},
                    ],
                )
        except ClientError as exc:
            if error_code(exc) != "TransactionCanceledException":
                raise
            # Usage again (or a conflicting write): it stays listed, and a later sweep
            # that finds no usage item tries again.

    def due(self, shard: int, now: int, after: str | None) -> tuple[list[str], str | None]:
        """One page of the tenants of a registry shard whose sweep is due; and the
        tenant to go on after (None: the end). Registry items are some 50 bytes, so a
        page of 1 MB holds about 20,000 of them for 128 read units."""
        kwargs: dict[str, Any] = {
            "TableName": _table(),
            "KeyConditionExpression": "#pk = :pk",
            "FilterExpression": "#due <= :now",
            "ExpressionAttributeNames": {"#pk": codecs.PK, "#due": REGISTRY_DUE},
            "ExpressionAttributeValues": {
                ":pk": {"S": keys.registry_pk(shard)},
                ":now": {"N": str(now)},
            },
        }
        if after is not None:
            kwargs["ExclusiveStartKey"] = codecs.raw_key(keys.registry_pk(shard), after)
        with translated():
            page = connection().client.query(**kwargs, ReturnConsumedCapacity=TOTAL_CAPACITY)
        tenants = [str(item[codecs.SK]["S"]) for item in page.get("Items", [])]
        last = page.get("LastEvaluatedKey")
        return tenants, None if last is None else str(last[codecs.SK]["S"])

    def records_page(
        self, tenant_id: str, partition: str, after: str | None, limit: int
    ) -> tuple[list[Record], str | None]:
        """Up to `limit` records of the tenant's entities ("entities") or earlier
        versions ("history"), in key order after the sort key `after`, read
        consistently; and the sort key to go on from (None: the end)."""
        if partition == _ENTITIES:
            pk, prefix = keys.tenant_pk(tenant_id), keys.entity_sk("")
        else:
            assert partition == _HISTORY, partition
            pk, prefix = keys.history_pk(tenant_id), ""
        return reads.records_page(tenant_id, pk, prefix, after, limit)


def _generation_of(item: dict[str, Any]) -> str:
    if DELETING in item:
        raise TenantDeleted("this tenant is being deleted")
    return str(item.get(GENERATION, {"S": ""})["S"])


def _usage_key(tenant_id: str) -> dict[str, Any]:
    return codecs.raw_key(keys.blobs_pk(tenant_id), keys.USAGE_SK)


def _sweep_key(tenant_id: str) -> dict[str, Any]:
    return codecs.raw_key(keys.blobs_pk(tenant_id), keys.SWEEP_SK)


def _registry_key(tenant_id: str) -> dict[str, Any]:
    return codecs.raw_key(keys.registry_pk(keys.registry_shard(tenant_id)), tenant_id)


def _table() -> str:
    return str(RecordItem.Meta.table_name)
