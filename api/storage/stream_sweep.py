"""A deleted tenant's streams (who sees what, `keys.stream_pk`): the stream of each
member and group in the audience of one of its records, found from its entity items'
owners and shares, and of each member with an access item (a removed member's kept
item too: his stream holds his markers, and the sentinels of records whose audience
he left), all found before those items go (`api.storage.tenants`). Not found: the
stream of a sub with no access item and in no audience now (a claim tenant's share
taken back): it holds only sentinels, which expire (TTL, the retention), and a tenant
written again reads its streams from its new first token only."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from api.domain.visibility import group_principal, member_principal
from api.storage import codecs, keys, reads
from api.storage.models import HeadItem, RecordItem

_OWNER = RecordItem.owner.attr_name
_SHARED = RecordItem.shared.attr_name
_GROUPS = RecordItem.groups.attr_name
_RESTRICTED = HeadItem.restricted.attr_name


def restricted(head: dict[str, Any] | None) -> bool:
    """Whether a head (DynamoDB's JSON) says its tenant has had a restricted record."""
    return head is not None and _RESTRICTED in head


def stream_partitions(tenant_id: str) -> list[str]:
    """The streams of every member and group in the audience of one of the tenant's
    records (its entity items' `ow`, `vw` and `vg`), and of every member with an
    access item, a removed one's kept item too (its stream holds the markers of his
    joins and leaves): read in consistent Query pages."""
    subs: set[str] = set()
    groups: set[str] = set()
    for item in _items(keys.tenant_pk(tenant_id), {"#ow": _OWNER, "#vw": _SHARED, "#vg": _GROUPS}):
        if _SHARED in item and _OWNER in item:
            subs.add(item[_OWNER]["S"])
            subs.update(value["S"] for value in item[_SHARED]["L"])
            groups.update(value["S"] for value in item.get(_GROUPS, {}).get("L", []))
    prefix = keys.member_sk("")
    for item in _items(keys.members_pk(tenant_id), {"#sk": codecs.SK}):
        if item[codecs.SK]["S"].startswith(prefix):
            subs.add(item[codecs.SK]["S"][len(prefix) :])
    principals = [member_principal(s) for s in sorted(subs)]
    principals += [group_principal(g) for g in sorted(groups)]
    return [keys.stream_pk(tenant_id, p) for p in principals]


def _items(pk: str, names: dict[str, str]) -> Iterator[dict[str, Any]]:
    """The items of partition `pk`, projected on the attributes `names`, page by page."""
    start: dict[str, Any] | None = None
    while True:
        answer = reads.query(pk, start_key=start, projected=names)
        yield from answer.get("Items", [])
        start = answer.get("LastEvaluatedKey")
        if start is None:
            return
