"""What the stream's silent pushes read off a batch of head records: each tenant's
newest token, the device that wrote every change of it and whose view the changes
are in, as the pokes read it (api.realtime.push_fanout)."""

from __future__ import annotations

from typing import Any

from api.domain.audiences import UNTOLD
from api.domain.chain import NO_MAIN
from api.domain.visibility import member_principal
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
    assert writes(records) == {
        "a": ("01C", "phone", None),
        "b": ("01D", None, None),
        "c": ("01E", None, None),
    }


def test_a_tenant_being_deleted_is_pushed_nothing() -> None:
    deleting = {keys.DELETING_ATTRIBUTE: {"S": "ann"}}
    assert writes([_head("a", "01A", "phone"), _head("a", "01B", extra=deleting)]) == {}
    removed = {"eventName": "REMOVE", "dynamodb": _head("b", "01C")["dynamodb"]}
    assert writes([removed]) == {}


def test_a_batchs_pushes_are_for_whose_view_its_changes_are_in_as_its_pokes() -> None:
    """The head's `vis`, `mt`, `vp` (the pokes' rule, `streams.audience_of`): a change
    in Alice's stream alone is for her devices; coalesced with a newer one in Bob's,
    the newer token is Bob's and UNTOLD for Alice (her devices read their view
    first); with a newer tenant-wide one, every member's; a tenant that never
    restricted: every member's."""
    alice, bob = member_principal("alice"), member_principal("bob")
    only = {"vis": {"BOOL": True}, "mt": {"SS": [NO_MAIN]}}
    records = [
        _head("plain", "01A", "phone"),
        _head("one", "01A", "phone", {**only, "vp": {"SS": [f"01A#{alice}"]}}),
        _head("two", "01A", None, {**only, "vp": {"SS": [f"01A#{alice}"]}}),
        _head("two", "01B", None, {**only, "vp": {"SS": [f"01B#{bob}"]}}),
        _head("mixed", "01A", None, {**only, "vp": {"SS": [f"01A#{alice}"]}}),
        _head("mixed", "01B", None, {"vis": {"BOOL": True}, "mt": {"SS": ["01B"]}}),
    ]
    assert writes(records) == {
        "plain": ("01A", "phone", None),
        "one": ("01A", "phone", frozenset({alice})),
        "two": ("01B", None, frozenset({bob}) | UNTOLD),
        "mixed": ("01B", None, None),
    }
