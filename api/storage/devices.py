"""DeviceTable: the devices registered for a tenant's silent pushes, their counts
(bounded per member and per tenant) and each one's last push (`api.storage.keys`:
T#<tenant>#DEV; swept with the tenant by its deletion, `api.storage.tenants`)."""

from __future__ import annotations

from typing import Any

from botocore.exceptions import ClientError

from api.domain.devices import PushDevice
from api.domain.errors import Forbidden, TenantDeleted, TooManyDevices, Unavailable
from api.storage import codecs, keys
from api.storage.deletion_usage import MARK_ID
from api.storage.errors import error_code, translated
from api.storage.models import RecordItem
from api.storage.reads import TOTAL_CAPACITY, connection

# On a head: the tenant has no push device (set by a fan-out round that found none
# while the tenant's count of devices was 0, removed by the next registration's
# transaction; kept by every write's update of the head): the stream's fan-out runs
# no round for a head carrying it. A head without it (any written before it existed)
# has its devices read.
NO_PUSH_DEVICES_ATTRIBUTE = "nd"


def _table() -> str:
    return str(RecordItem.Meta.table_name)


def _client() -> Any:
    return connection().client


def _key(tenant_id: str, sk: str) -> dict[str, Any]:
    return codecs.raw_key(keys.devices_pk(tenant_id), sk)


def _reasons(exc: ClientError) -> list[str]:
    if error_code(exc) != "TransactionCanceledException":
        raise exc
    return [r.get("Code", "None") for r in exc.response.get("CancellationReasons", [])]


class DeviceTable:
    """The Store side of push devices (`api.service.pushes.Devices`)."""

    def get(self, tenant_id: str, device_id: str) -> PushDevice | None:
        with translated():
            item = (
                _client()
                .get_item(
                    TableName=_table(),
                    Key=_key(tenant_id, keys.device_sk(device_id)),
                    ConsistentRead=True,
                    ReturnConsumedCapacity=TOTAL_CAPACITY,
                )
                .get("Item")
            )
        return None if item is None else _device(tenant_id, item)

    def register(self, device: PushDevice, per_member: int, per_tenant: int, new: bool) -> None:
        """Put the device (`new`: absent, and both counts raised within their bounds;
        else it must be the same member's). Forbidden: another member's device id;
        TooManyDevices: a count at its bound; TenantDeleted: the tenant is being
        deleted (its head is marked), so nothing outlives its sweep."""
        t = device.tenant_id
        item = {
            **_key(t, keys.device_sk(device.device_id)),
            "by": {"S": device.sub},
            "pf": {"S": device.platform},
            "dt": {"S": device.device_token},
            "arn": {"S": device.endpoint},
            "at": {"N": str(device.registered_at_ms)},
        }
        put: dict[str, Any] = {
            "TableName": _table(),
            "Item": item,
            "ExpressionAttributeNames": {"#by": "by"},
        }
        if new:
            put["ConditionExpression"] = "attribute_not_exists(#by)"
        else:
            put["ConditionExpression"] = "#by = :by"
            put["ExpressionAttributeValues"] = {":by": {"S": device.sub}}
        counts = (
            [
                _count(t, keys.DEVICE_COUNT_SK, 1, per_tenant),
                _count(t, keys.member_devices_sk(device.sub), 1, per_member),
            ]
            if new
            else []
        )
        for _ in range(_HEAD_TRIES):
            try:
                with translated():
                    _client().transact_write_items(
                        TransactItems=[_head_check(t), {"Put": put}, *counts],
                        ReturnConsumedCapacity=TOTAL_CAPACITY,
                    )
                return
            except ClientError as exc:
                reasons = _reasons(exc)
                if reasons[0] != "ConditionalCheckFailed":
                    _refused(reasons, exc, per_member, per_tenant)
                    raise
                # The head changed since it was read (written first, or marked).
        raise Unavailable("the tenant's head kept changing; retry")

    def remove(
        self,
        tenant_id: str,
        device_id: str,
        sub: str | None,
        registered_at_ms: int | None = None,
        former: bool = False,
    ) -> bool:
        """Delete the device (`sub`: only if that member's; `registered_at_ms`: only
        the registration of that instant, not one made again since; `former`: only
        while its member has no access item, in the same transaction, so that a
        member re-added since the roster was read keeps it) and lower both counts;
        False if it was not there (or another member's, or another one, or its
        member's again)."""
        device = self.get(tenant_id, device_id)
        if device is None or (sub is not None and device.sub != sub):
            return False
        delete: dict[str, Any] = {
            "TableName": _table(),
            "Key": _key(tenant_id, keys.device_sk(device_id)),
            "ConditionExpression": "#by = :by",
            "ExpressionAttributeNames": {"#by": "by"},
            "ExpressionAttributeValues": {":by": {"S": device.sub}},
        }
        if registered_at_ms is not None:
            delete["ConditionExpression"] += " AND #at = :at"
            delete["ExpressionAttributeNames"]["#at"] = "at"
            delete["ExpressionAttributeValues"][":at"] = {"N": str(registered_at_ms)}
        member = (
            [
                {
                    "ConditionCheck": {
                        "TableName": _table(),
                        "Key": codecs.raw_key(
                            keys.members_pk(tenant_id), keys.member_sk(device.sub)
                        ),
                        "ConditionExpression": "attribute_not_exists(#p)",
                        "ExpressionAttributeNames": {"#p": codecs.PK},
                    }
                }
            ]
            if former
            else []
        )
        try:
            with translated():
                _client().transact_write_items(
                    TransactItems=[
                        {"Delete": delete},
                        _count(tenant_id, keys.DEVICE_COUNT_SK, -1),
                        _count(tenant_id, keys.member_devices_sk(device.sub), -1),
                        *member,
                    ],
                    ReturnConsumedCapacity=TOTAL_CAPACITY,
                )
        except ClientError as exc:
            if "ConditionalCheckFailed" in _reasons(exc):
                return False  # removed meanwhile (or its member re-added)
            raise
        return True

    def mark_empty(self, tenant_id: str) -> bool:
        return mark_empty(tenant_id)

    def devices(self, tenant_id: str) -> list[PushDevice]:
        """Every device of the tenant (one consistent Query a page)."""
        found: list[PushDevice] = []
        start: dict[str, Any] | None = None
        while True:
            query: dict[str, Any] = {
                "TableName": _table(),
                "KeyConditionExpression": "pk = :pk AND begins_with(sk, :d)",
                "ExpressionAttributeValues": {
                    ":pk": {"S": keys.devices_pk(tenant_id)},
                    ":d": {"S": keys.device_sk()},
                },
                "ConsistentRead": True,
                "ReturnConsumedCapacity": TOTAL_CAPACITY,
            }
            if start is not None:
                query["ExclusiveStartKey"] = start
            with translated():
                page = _client().query(**query)
            found += [_device(tenant_id, item) for item in page.get("Items", [])]
            start = page.get("LastEvaluatedKey")
            if start is None:
                return found

    def claim(self, device: PushDevice, token: str, now_ms: int, window_ms: int) -> bool:
        """Take `token` for a push to `device` now: only if it is newer than the one
        last pushed and that push is out of the window (one push per device per
        window, whichever process sends it). Clears the waiting token it sends."""
        return self._update(
            device,
            "SET pt = :t, pa = :now REMOVE nx",
            "attribute_exists(#by) AND (attribute_not_exists(pt) OR pt < :t) "
            "AND (attribute_not_exists(pa) OR pa <= :edge) "
            "AND (attribute_not_exists(nx) OR nx <= :t)",
            {
                ":t": {"S": token},
                ":now": {"N": str(now_ms)},
                ":edge": {"N": str(now_ms - window_ms)},
            },
        )

    def defer(self, device: PushDevice, token: str) -> bool:
        """Keep `token` for the end of the device's window (the last one wins)."""
        return self._update(
            device,
            "SET nx = :t",
            "attribute_exists(#by) AND (attribute_not_exists(pt) OR pt < :t) "
            "AND (attribute_not_exists(nx) OR nx < :t)",
            {":t": {"S": token}},
        )

    def release(self, device: PushDevice, token: str) -> None:
        """Give back a claim whose push failed: the token waits again, so that the
        next round (a retry, the window's flush) sends it."""
        self._update(
            device,
            "SET nx = :t"
            + ("" if device.pushed is None else ", pt = :p, pa = :a")
            + ("" if device.pushed is not None else " REMOVE pt, pa"),
            "pt = :t",
            {
                ":t": {"S": token},
                **(
                    {}
                    if device.pushed is None
                    else {":p": {"S": device.pushed}, ":a": {"N": str(device.pushed_at_ms)}}
                ),
            },
        )

    def _update(
        self, device: PushDevice, update: str, condition: str, values: dict[str, Any]
    ) -> bool:
        names = {"#by": "by"} if "#by" in condition else {}
        try:
            with translated():
                _client().update_item(
                    TableName=_table(),
                    Key=_key(device.tenant_id, keys.device_sk(device.device_id)),
                    UpdateExpression=update,
                    ConditionExpression=condition,
                    ExpressionAttributeValues=values,
                    ReturnConsumedCapacity=TOTAL_CAPACITY,
                    **({"ExpressionAttributeNames": names} if names else {}),
                )
        except ClientError as exc:
            if error_code(exc) == "ConditionalCheckFailedException":
                return False
            raise
        return True


# A registration's transaction tried again when the head changed meanwhile.
_HEAD_TRIES = 3


def _head_check(tenant_id: str) -> dict[str, Any]:
    """A registration's action on the tenant's head, read now (strongly consistent):
    it holds no deletion mark, and no longer says the tenant has no push device
    (`NO_PUSH_DEVICES_ATTRIBUTE`: removed here where present, so the fan-out
    reads the devices from this transaction on; else checked still absent, on a head
    or where the tenant has none yet). TenantDeleted: the head is marked."""
    head_key = codecs.raw_key(keys.log_pk(tenant_id), keys.HEAD_SK)
    names = {"#x": MARK_ID, "#n": NO_PUSH_DEVICES_ATTRIBUTE}
    with translated():
        head = (
            _client()
            .get_item(
                TableName=_table(),
                Key=head_key,
                ConsistentRead=True,
                ProjectionExpression="#x, #n",
                ExpressionAttributeNames=names,
                ReturnConsumedCapacity=TOTAL_CAPACITY,
            )
            .get("Item")
        )
    if head is not None and MARK_ID in head:
        raise TenantDeleted("this tenant is being deleted")
    check = {"TableName": _table(), "Key": head_key, "ExpressionAttributeNames": names}
    if head is not None and NO_PUSH_DEVICES_ATTRIBUTE in head:
        return {
            "Update": {
                **check,
                "UpdateExpression": "REMOVE #n",
                "ConditionExpression": "attribute_exists(#n) AND attribute_not_exists(#x)",
            }
        }
    cond = "attribute_not_exists(#n) AND attribute_not_exists(#x)"
    return {"ConditionCheck": {**check, "ConditionExpression": cond}}


def _refused(reasons: list[str], exc: ClientError, per_member: int, per_tenant: int) -> None:
    """A registration's refusal by its transaction's cancellation reasons (the head's
    aside): Forbidden (another member's device id) or TooManyDevices."""
    if reasons[1] == "ConditionalCheckFailed":
        raise Forbidden("this deviceID is registered by another member") from exc
    if "ConditionalCheckFailed" in reasons[2:]:
        which = "tenant" if reasons[2] == "ConditionalCheckFailed" else "member"
        bound = per_tenant if which == "tenant" else per_member
        raise TooManyDevices(
            f"at most {bound} push devices per {which}; unregister one first"
        ) from exc


def mark_empty(tenant_id: str) -> bool:
    """Say on the tenant's head that it has no push device, in one transaction with the
    check that its count of devices is 0 (so a registration committed since the
    round's read of the devices leaves the head as it is: it then removes the mark
    itself, `_head_check`); False when it was not set (a device, the mark there
    already, or the tenant being deleted)."""
    count = codecs.raw_key(keys.devices_pk(tenant_id), keys.DEVICE_COUNT_SK)
    try:
        with translated():
            _client().transact_write_items(
                TransactItems=[
                    {
                        "ConditionCheck": {
                            "TableName": _table(),
                            "Key": count,
                            "ConditionExpression": "attribute_not_exists(n) OR n <= :zero",
                            "ExpressionAttributeValues": {":zero": {"N": "0"}},
                        }
                    },
                    {
                        "Update": {
                            "TableName": _table(),
                            "Key": codecs.raw_key(keys.log_pk(tenant_id), keys.HEAD_SK),
                            "UpdateExpression": "SET #n = :one",
                            "ConditionExpression": "attribute_exists(#t) AND "
                            "attribute_not_exists(#n) AND attribute_not_exists(#x)",
                            "ExpressionAttributeNames": {
                                "#t": "tok",
                                "#n": NO_PUSH_DEVICES_ATTRIBUTE,
                                "#x": MARK_ID,
                            },
                            "ExpressionAttributeValues": {":one": {"N": "1"}},
                        }
                    },
                ],
                ReturnConsumedCapacity=TOTAL_CAPACITY,
            )
    except ClientError as exc:
        _reasons(exc)  # raises anything but a cancellation
        return False
    return True


def _count(tenant_id: str, sk: str, step: int, bound: int | None = None) -> dict[str, Any]:
    update: dict[str, Any] = {
        "TableName": _table(),
        "Key": _key(tenant_id, sk),
        "UpdateExpression": "ADD n :step",
        "ExpressionAttributeValues": {":step": {"N": str(step)}},
    }
    if bound is not None:
        update["ConditionExpression"] = "attribute_not_exists(n) OR n < :bound"
        update["ExpressionAttributeValues"][":bound"] = {"N": str(bound)}
    return {"Update": update}


def _device(tenant_id: str, item: dict[str, Any]) -> PushDevice:
    return PushDevice(
        tenant_id=tenant_id,
        device_id=item[codecs.SK]["S"][len(keys.device_sk()) :],
        platform=item["pf"]["S"],
        device_token=item["dt"]["S"],
        sub=item["by"]["S"],
        endpoint=item["arn"]["S"],
        registered_at_ms=int(item["at"]["N"]),
        pushed=item.get("pt", {}).get("S"),
        pushed_at_ms=int(item.get("pa", {}).get("N", "0")),
        pending=item.get("nx", {}).get("S"),
    )
