"""What the stream's silent pushes read off a batch of head records: each tenant's
newest token and the device that wrote every change of it (api.realtime.push_fanout)."""

from __future__ import annotations

from typing import Any

from api.realtime.push_fanout import writes
from api.storage import keys


def _head(
    tenant: str, token: str, device: str | None = None, extra: dict[str, Any] | None = None
) -> dict[str, Any]:
    image: dict[str, Any] = {"tok": {"S": token}, **(extra or {})}
    if device is not None:
        image["dv"] = {"S": device}
    return {
        "eventName": "MODIFY",
        "dynamodb": {
            "Keys": {"pk": {"S": keys.log_pk(tenant)}, "sk": {"S": keys.HEAD_SK}},
            "NewImage": image,
        },
    }


def test_a_tenants_writes_of_one_device_name_it_and_of_several_name_none() -> None:
    records = [
        _head("a", "01A", "phone"),
        _head("a", "01C", "phone"),
        _head("b", "01B", "phone"),
        _head("b", "01D", "tablet"),
        _head("c", "01E"),
    ]
    assert writes(records) == {"a": ("01C", "phone"), "b": ("01D", None), "c": ("01E", None)}


def test_a_tenant_being_deleted_is_pushed_nothing() -> None:
    deleting = {keys.DELETING_ATTRIBUTE: {"S": "ann"}}
    assert writes([_head("a", "01A", "phone"), _head("a", "01B", extra=deleting)]) == {}
    removed = {"eventName": "REMOVE", "dynamodb": _head("b", "01C")["dynamodb"]}
    assert writes([removed]) == {}
