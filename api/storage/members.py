"""A tenant's access items (contract 6, membership as data; keys in
`api.storage.keys`): what they say of one caller, in one Query of 1 read unit, and
every live member at once (realtime's check of its subscribers)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pynamodb.transactions import TransactWrite

from api.domain.membership import OWNER, Access, MemberGuard, Roster, member_groups
from api.domain.mutations import Write
from api.domain.records import Record
from api.storage import codecs, keys, reads
from api.storage.models import MemberItem


def access(tenant_id: str, sub: str) -> Access:
    """One consistent Query, sk >= U#<sub>, Limit 1: the caller's own item (a member,
    its role), another (a later member's, or the marker V, which sorts after every
    U# key: a moved tenant, not a member), or none (a claim tenant)."""
    own = keys.member_sk(sub)
    items, _ = reads._query_page(keys.members_pk(tenant_id), reads._sk("#sk >= :s", s=own), 1)
    if not items:
        return Access()
    item = items[0]
    if item[codecs.SK]["S"] != own:
        return Access(moved=True)
    token = item.get("tok", {}).get("S")
    return Access(True, _role(item), _groups(item), _changed(item), token)


def roster(tenant_id: str) -> Roster:
    """Every access item of the tenant, page by page (about 60 bytes each: a 4 KB
    read unit holds about 60 members)."""
    roles: dict[str, str] = {}
    groups: dict[str, tuple[str, ...]] = {}
    changed: dict[str, dict[str, str]] = {}
    moved = False
    start: dict[str, Any] | None = None
    prefix = keys.member_sk("")
    while True:
        items, start = reads._query_page(keys.members_pk(tenant_id), None, 1000, start_key=start)
        for item in items:
            moved = True
            sk = item[codecs.SK]["S"]
            role = _role(item)
            if not sk.startswith(prefix):
                continue
            if item_changed := _changed(item):
                # A removed member's too: a re-add's write carries them on.
                changed[sk[len(prefix) :]] = item_changed
            if role is not None:
                roles[sk[len(prefix) :]] = role
                if item_groups := _groups(item):
                    groups[sk[len(prefix) :]] = item_groups
        if start is None:
            return Roster(moved, roles, groups, changed)


def access_item(
    tx: TransactWrite,
    tenant_id: str,
    member: tuple[str, str | None],
    record: Record,
    guard: MemberGuard | None,
    group_changes: tuple[tuple[str, str], ...] = (),
) -> tuple[str, str]:
    """A Member write's access item, in its transaction: put with its role, or, the
    record deleted or REMOVED, with no role (a request refuses it as it refuses no
    item) and no groups, its joins and leaves kept (the groups the write left among
    them: a device of the member from before is sent what it held through them, once
    re-added; docs/ordering.md, "Groups"), or deleted when it has none; the writer's
    own (an owner keeps only the owner role) carries the guard. Its action (delete,
    put) and role in the transaction (guard, member)."""
    sub, role = member
    own = guard is not None and not guard.moving and sub == guard.writer
    condition = MemberItem.role == OWNER if own else None
    item = MemberItem(keys.members_pk(tenant_id), keys.member_sk(sub))
    if role is None and not group_changes:
        tx.delete(item, condition=condition)
        return "delete", "guard" if own else "member"
    item.role, item.token = role, record.change_token
    item.groups = list(member_groups(record.fields)) or None  # type: ignore[arg-type]
    if role is None:
        item.groups = None
    item.changed = dict(group_changes) or None
    tx.save(item, condition=condition)
    return "put", "guard" if own else "member"


def guard(
    tx: TransactWrite, tenant_id: str, guard: MemberGuard, writes: Sequence[Write]
) -> tuple[str, str] | None:
    """The move's marker, put conditioned absent (two claim owners moving at once: one
    wins), or the check that the writer is still an owner, unless its own item's put
    carries it (None). Its action (put, check) and role (marker, guard)."""
    pk = keys.members_pk(tenant_id)
    if guard.moving:
        tx.save(MemberItem(pk, keys.MOVED_SK), condition=MemberItem.pk.does_not_exist())
        return "put", "marker"
    if any(w.member is not None and w.member[0] == guard.writer for w in writes):
        return None
    tx.condition_check(MemberItem, pk, keys.member_sk(guard.writer), MemberItem.role == OWNER)
    return "check", "guard"


def _changed(item: dict[str, Any]) -> dict[str, str]:
    return {g: str(v["S"]) for g, v in item.get("gt", {}).get("M", {}).items()}


def _groups(item: dict[str, Any]) -> tuple[str, ...]:
    return tuple(sorted(str(v["S"]) for v in item.get("gr", {}).get("L", [])))


def _role(item: dict[str, Any]) -> str | None:
    value = item.get("role", {}).get("S")
    return value if isinstance(value, str) else None
