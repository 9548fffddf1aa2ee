"""Adversarial probes of the groups' markers and the kept access items (docs/ordering.md
"Groups", contract 3.12): many markers between two pages of a sync, pages of one item
cut at a marker, a marker beside the Member version the main log still holds, a
catch-up of Member records, the export check's reads of the caller's stream, a tenant
restricted only after its member joined, a member removed from ten groups, a Member
record deleted then created anew, a push of many Member writes that each join a group.
Each follows the service on DynamoDB Local, as the tests it imports do; among them, a
Member write giving no role (REMOVED) keeps the member's earlier joins and leaves and
is checked for its groups as any Member write, and a tenant's deletion removes the
markers of a member in no record's audience."""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest

from api.domain.errors import NotAMember, ResyncRequired
from api.domain.membership import OWNER
from api.domain.mutations import Mutation
from api.domain.visibility import Visibility, member_principal
from api.service import SyncService
from api.settings import Settings
from api.storage import keys, members, streams
from api.storage.exports import ExportTable
from api.storage.store import DynamoStore
from tests.integration.test_group_paths import DAVE, OLGA, ZED, kids
from tests.integration.test_group_paths import KIDS as ZEDS_KIDS
from tests.integration.test_groups_adversarial import KIDS, _Family
from tests.integration.test_groups_race_adversarial import _Device, _fresh, _member, _synced
from tests.integration.test_visibility_leaks import EXPORT, _call, _exported, service
from tests.integration.test_visibility_leaks import _write as _write_as
from tests.integration.test_visibility_writes import _create, _service, _write
from tests.support.family import MEMBER as MEMBER_TYPE
from tests.support.gql import GraphQLClient
from tests.support.short_retention import EXPIRED_S, Clock, short_retention_service
from tests.support.store_state import _query_all

__all__ = ["kids", "service"]  # the fixtures


def _markers(family: _Family, sub: str = "bob") -> list[str]:
    """The tokens of the markers in `sub`'s own stream."""
    items, more = streams.stream_range(family.tenant, member_principal(sub), None, "~", 1000)
    assert not more
    return [r.change_token for r in items if r.marks]


def _every_item(family: _Family, sub: str, limit: int) -> list[Any]:
    """Every item a new device of `sub` is sent, `limit` a page."""
    device = _Device(family, sub, limit=limit)
    pages = device.sync()
    return [r for page in pages for r in page.items]


def _count_sync(device: _Device) -> int:
    """One sync of `device` at its limit, followed to its end (at most 500 requests):
    how many requests it took; what it was sent is applied."""
    service, tenant = device.family.service, device.family.tenant
    page = service.changes(tenant, since=device.token, limit=device.limit, sub=device.viewer())
    pages = [page]
    while page.cursor is not None and len(pages) < 500:
        page = service.changes(tenant, cursor=page.cursor, limit=device.limit, sub=device.viewer())
        pages.append(page)
    assert page.cursor is None, "the sync did not end within 500 requests"
    for record in (r for p in pages for r in p.items):
        if record.left_view:
            device.left.append(record.id)
        if record.deleted or record.left_view:
            device.held.pop(record.id, None)
        else:
            device.held[record.id] = record.change_token
    device.token = page.change_token or device.token
    return len(pages)


def test_thirty_moves_between_two_pages_settle_the_device_as_a_new_one(
    settings: Settings, tenant: str
) -> None:
    """Between the first and second page of bob's sync (one item a page), o moves him
    into kids and out again 30 times, renaming him between each (every move's main
    entry gone): 60 markers in his stream. His device settles within the usual syncs,
    holding what a new device of his holds; no page sends a marker."""
    family, device = _synced([], tenant)
    device.limit = 1
    moves: list[str] = []

    def churn(n: int, page: Any) -> None:
        if n != 1:
            return
        for i in range(30):
            moves.append(family.groups(["kids"]))
            _member(family, "bob", {"displayName": f"in{i}"})
            moves.append(family.groups([]))
            _member(family, "bob", {"displayName": f"out{i}"})
        moves.append(family.groups(["kids"]))

    device.sync(between=churn)
    requests = _count_sync(device)
    device.limit = 100
    device.settle()
    assert _markers(family) == moves
    # One request a marker at most (each read and dropped, a page of one item), and
    # the sync ends: 61 markers, 122 renames and moves superseded in bob's stream.
    assert requests <= len(moves) + 10, requests
    assert "letter" in device.held and device.held == _fresh(family)
    assert not any(r.marks for r in _every_item(family, "bob", 1))
    # o's view: bob's latest version, never a marker (o reads no stream of bob's).
    o_items = _every_item(family, "o", 1)
    assert [r.change_token for r in o_items if r.id == "bob"] == [family.bob]


def test_pages_of_one_item_cut_at_each_marker_end_as_a_new_device(
    settings: Settings, tenant: str
) -> None:
    """bob joins kids (his Member version still the main log's entry: the marker at
    its token stands beside it), then leaves and is renamed (that marker alone at
    its token); a device of bob synced before each, one item a page: it is sent the
    join's Member version itself (with its fields), then ends as a new device."""
    family, device = _synced([], tenant)
    device.limit = 1
    device.settle()
    joined = family.groups(["kids"])
    pages = device.sync()
    sent = {r.change_token: r for p in pages for r in p.items if r.id == "bob"}
    assert joined in sent and sent[joined].fields and not sent[joined].marks, sorted(sent)
    device.settle()
    assert "letter" in device.held
    family.groups([])
    _member(family, "bob", {"displayName": "Bobby"})
    device.settle()
    assert "letter" not in device.held and "letter" in device.left
    assert device.held == _fresh(family)
    for limit in (1, 2, 3):
        items = _every_item(family, "bob", limit)
        assert all(r.fields or r.deleted or r.left_view for r in items), limit
        assert not any(r.marks for r in items)


def test_a_catch_up_of_member_records_sends_no_marker(settings: Settings, tenant: str) -> None:
    """bob's device catches up Member records (one a page) after bob joined kids, was
    renamed, and left: every item it is sent holds its fields; none is a marker."""
    family, device = _synced([], tenant)
    device.sync()
    up_to = device.token
    assert up_to is not None
    family.groups(["kids"])
    _member(family, "bob", {"displayName": "Bobby"})
    family.groups([])
    device.settle()
    now = device.token
    assert now is not None
    items: list[Any] = []
    cursor: str | None = None
    for _ in range(30):
        page = family.service.catch_up(
            tenant, now, types=[MEMBER_TYPE], cursor=cursor, limit=1, by=device.viewer()
        )
        items += page.items
        cursor = page.cursor
        if cursor is None:
            break
    assert cursor is None
    assert not any(r.marks for r in items) and "bob" in {r.id for r in items}
    assert all(r.fields or r.deleted for r in items), [(r.id, r.change_token) for r in items]


def test_the_export_check_reads_a_marker_as_a_sentinel_of_the_member_himself(
    settings: Settings, tenant: str
) -> None:
    """The export check (`ExportJobs.left_view`) keeps the LeftView sentinels above a
    token in the caller's stream: a marker is stored as one (no fields, leftView), so
    bob's own id is among what it finds. He sees his own Member record, so his export
    is not refused for it (`Reading.seen`); each marker costs the check a read."""
    family, device = _synced([], tenant)
    device.sync()
    since = device.token
    assert since is not None
    family.groups(["kids"])
    _member(family, "bob", {"displayName": "Bobby"})
    left, complete, _ = ExportTable().left_view(tenant, [member_principal("bob")], since, 100.0)
    assert complete
    assert left <= {"bob"}
    assert family.service.reading.seen(tenant, left, family.viewer()) == left


def test_a_tenant_restricted_only_after_bob_joined_brings_him_the_letter(
    settings: Settings, tenant: str
) -> None:
    """bob joins kids while no record of the tenant is restricted (no marker), is
    renamed (the join's main entry gone), then olga's letter is shared with kids: his
    device, synced before the join, gets the letter and ends as a new device."""
    family = _Family(tenant, [])
    family.person("p", None)
    device = _Device(family)
    device.settle()
    family.groups(["kids"])
    _member(family, "bob", {"displayName": "Bobby"})
    assert _markers(family) == []
    family.person("letter", KIDS)
    device.settle()
    assert "letter" in device.held and device.held == _fresh(family)


def test_a_member_removed_from_ten_groups_then_re_added_in_none_leaves_them_all(
    settings: Settings, tenant: str
) -> None:
    """bob in ten groups, a letter shared with each; o writes him REMOVED in none and
    re-adds him in none: his kept access item holds ten histories, the roster counts
    him in no group, and his device is sent a LeftViewItem of each letter."""
    groups = [f"g{i}" for i in range(10)]
    family = _Family(tenant, groups)
    for group in groups:
        family.person(f"l{group}", Visibility.of(None, [], [group]))
    device = _Device(family, limit=3)
    device.settle()
    assert {f"l{g}" for g in groups} <= set(device.held)
    _member(family, "bob", {"role": "REMOVED", "groups": []})
    roster = members.roster(tenant)
    assert sorted(roster.changed["bob"]) == groups and "bob" not in roster.groups
    assert all("bob" not in roster.members_of(g) for g in groups)
    _member(family, "bob", {"role": "READER", "groups": []})
    device.settle()
    assert sorted(device.left) == sorted(f"l{g}" for g in groups), device.left
    assert device.held == _fresh(family)


def test_a_member_record_deleted_cannot_be_created_anew_and_keeps_its_history(
    settings: Settings, tenant: str
) -> None:
    """bob (in kids) deleted: his id stays deleted (a create of it is ALREADY_EXISTS,
    contract 3.2), his access item gives no role and no group (a request of his is
    refused), keeps kids' history, and the roster counts him in no group."""
    family, device = _synced(["kids"], tenant)
    device.settle()
    deleted = family._member(Mutation("delete", MEMBER_TYPE, tenant, "bob", family.bob, {}))
    fields = {"role": "READER", "groups": []}
    create = Mutation("create", MEMBER_TYPE, tenant, "bob", None, fields)
    (result,) = family.service.push(tenant, [create], by="o", role="owner", moved=True)
    assert result.error is not None and result.error.code == "ALREADY_EXISTS", result.error
    access = family.service.membership.access(tenant, "bob")
    assert access.role is None and access.viewer("bob").groups == ()
    roster = members.roster(tenant)
    assert "bob" not in roster.members_of("kids") and "bob" not in (roster.roles or {})
    assert roster.changed["bob"]["kids"].split()[-1] == deleted
    assert _markers(family)[-1] == deleted


def test_one_push_of_many_member_writes_each_joining_a_group_puts_each_marker(
    settings: Settings, tenant: str
) -> None:
    """In a tenant with a restricted record, one push of 40 Member creates each in
    kids (each write: its record, log entry, access item and marker): every write
    succeeds and each member's stream holds one marker, at its write's token."""
    family, _ = _synced([], tenant)
    subs = [f"m{i:02d}" for i in range(40)]
    batch = [
        Mutation("create", MEMBER_TYPE, tenant, sub, None, {"role": "READER", "groups": ["kids"]})
        for sub in subs
    ]
    results = family.service.push(tenant, batch, by="o", role="owner", moved=True)
    assert all(r.error is None and r.record is not None for r in results), [
        r.error for r in results if r.error is not None
    ]
    for sub, result in zip(subs, results, strict=True):
        assert result.record is not None
        assert _markers(family, sub) == [result.record.change_token], sub
    assert members.roster(tenant).members_of("kids") == set(subs)


def _delete_tenant(family: _Family) -> None:
    while not family.service.delete_tenant(family.tenant, family.tenant, "o").done:
        pass


def test_a_deleted_tenants_next_life_holds_no_access_history_and_no_cut(
    settings: Settings, tenant: str
) -> None:
    """bob joins kids, leaves it as he is REMOVED (markers, a kept access item); the tenant
    is deleted and written again with bob in no group: his access item holds no
    history of the first life, and a new device of his ends at the tenant's head
    (the first life's markers are below the new first token)."""
    family, device = _synced([], tenant)
    family.groups(["kids"])
    _member(family, "bob", {"role": "REMOVED", "groups": []})
    assert "bob" in members.roster(tenant).changed
    _delete_tenant(family)
    again = _Family(tenant, [])
    again.person("letter", KIDS)
    assert "bob" not in members.roster(tenant).changed
    items = _every_item(again, "bob", 1)
    assert not any(r.marks for r in items)
    assert {r.id for r in items} == {"o", "bob"}


def test_a_tenant_deletion_removes_the_markers_of_its_members(
    ddb: Any, settings: Settings, tenant: str
) -> None:
    """bob (no record shared with him) joins and leaves kids, which holds the letter:
    two markers in his stream. Deleting the tenant removes every item of it (contract
    3.8), his stream's too."""
    family, _ = _synced([], tenant)
    family.groups(["kids"])
    family.groups([])
    stream = keys.stream_pk(tenant, member_principal("bob"))
    assert len(_query_all(ddb, settings.table_name, stream)) == 2
    _delete_tenant(family)
    assert [i["sk"]["S"] for i in _query_all(ddb, settings.table_name, stream)] == []


def test_a_member_left_kids_then_removed_then_re_added_loses_the_letter(
    settings: Settings, tenant: str
) -> None:
    """bob (in kids) holds the letter, his device then offline; o moves him out of kids,
    then writes him REMOVED (no group changed by that write), then re-adds him in no
    group. His device must be sent a LeftViewItem of the letter, as a new device."""
    family, device = _synced(["kids"], tenant)
    device.settle()
    assert "letter" in device.held
    family.groups([])
    _member(family, "bob", {"role": "REMOVED", "groups": []})
    _member(family, "bob", {"role": "READER", "groups": []})
    device.settle()
    assert "letter" not in device.held and "letter" in device.left, (
        f"holds {sorted(device.held)}, was sent LeftViewItems of {device.left}"
    )
    assert device.held == _fresh(family)


def test_two_servers_moving_members_at_once_put_every_marker_and_a_sound_chain(
    settings: Settings, tenant: str
) -> None:
    """Two servers (two services on one table) each move their own five members in and
    out of kids ten times at once, in a tenant with a restricted record: each member's
    stream holds a marker at each of his moving writes' tokens, o's device holds
    every member's latest version, each server writes on after them, and a new
    device of each member holds the letter exactly when he ends in kids."""
    family, _ = _synced([], tenant)
    servers = [family.service, _service()]
    subs = {n: [f"s{n}m{i}" for i in range(5)] for n in range(2)}
    tokens: dict[str, list[str]] = {}
    current = {
        sub: _member(family, sub, {"role": "READER", "groups": []}, create=True)
        for names in subs.values()
        for sub in names
    }
    errors: list[BaseException] = []

    def run(n: int) -> None:
        try:
            for round_ in range(10):
                batch = [
                    Mutation(
                        "update",
                        MEMBER_TYPE,
                        tenant,
                        sub,
                        current[sub],
                        {"groups": ["kids"] if round_ % 2 == 0 else []},
                    )
                    for sub in subs[n]
                ]
                results = servers[n].push(tenant, batch, by="o", role="owner", moved=True)
                for sub, result in zip(subs[n], results, strict=True):
                    assert result.error is None and result.record is not None, result.error
                    current[sub] = result.record.change_token
                    tokens.setdefault(sub, []).append(result.record.change_token)
        except BaseException as error:  # noqa: BLE001 - re-raised by the test thread
            errors.append(error)

    threads = [threading.Thread(target=run, args=(n,)) for n in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors
    for sub, written in tokens.items():
        assert _markers(family, sub) == written, sub
        # Ten rounds: in kids after the even ones, so out of it at the end.
        assert "letter" not in _fresh(family, sub), sub
    # o's device (the tenant-wide view) holds every member's latest version, and each
    # server's next write goes in after the markers (its chain check reads them).
    held = _fresh(family, "o")
    assert all(held[sub] == current[sub] for sub in tokens), (held, current)
    for server in servers:
        _write(server, _create(tenant, f"after{id(server)}", None), by="o")


def test_a_push_of_member_joins_takes_transactions_within_the_limit(
    settings: Settings, tenant: str, inject: Any
) -> None:
    """One push of 100 Member creates in kids (each write five items or so with its
    marker): every TransactWriteItems sent holds at most 100 items, and each member
    has his marker."""
    family, _ = _synced([], tenant)
    sizes: list[int] = []
    inject(
        "provide-client-params.dynamodb.TransactWriteItems",
        lambda params, **_: sizes.append(len(params["TransactItems"])),
    )
    subs = [f"n{i:03d}" for i in range(100)]
    batch = [
        Mutation("create", MEMBER_TYPE, tenant, sub, None, {"role": "READER", "groups": ["kids"]})
        for sub in subs
    ]
    results = family.service.push(tenant, batch, by="o", role="owner", moved=True)
    assert all(r.error is None for r in results), {r.error for r in results}
    assert sizes and max(sizes) <= 100, sizes
    assert all(len(_markers(family, sub)) == 1 for sub in subs)


def _push_member(family: _Family, mutation: Mutation) -> Any:
    (result,) = family.service.push(family.tenant, [mutation], by="o", role="owner", moved=True)
    return result


def test_a_removed_members_groups_are_checked_as_a_members_are(
    settings: Settings, tenant: str
) -> None:
    """A Member record written REMOVED with a group whose name is no id's (or one more
    than a tenant's 100 groups) is refused BAD_USER_INPUT as a member's write is, or
    else a later write giving him a role without changing his groups makes him a
    member of it unchecked."""
    family = _Family(tenant, [])
    fields = {"role": "REMOVED", "groups": ["no way!"]}
    removed = _push_member(family, Mutation("create", MEMBER_TYPE, tenant, "eve", None, fields))
    if removed.error is None:
        token = removed.record.change_token
        back = Mutation("update", MEMBER_TYPE, tenant, "eve", token, {"role": "READER"})
        result = _push_member(family, back)
        groups = members.roster(tenant).groups.get("eve")
        raise AssertionError(f"REMOVED in 'no way!' accepted; re-added: {result.error}, {groups}")
    assert removed.error.code == "BAD_USER_INPUT", removed.error


def test_a_removed_member_cannot_take_a_tenant_past_its_100_groups(
    settings: Settings, tenant: str
) -> None:
    """Ten members in ten groups each: the tenant's 100 groups. eve written REMOVED in
    a 101st is refused BAD_USER_INPUT (contract 3.12's bound), or else re-adding her
    as a READER without changing her groups makes 101."""
    family = _Family(tenant, [])
    for n in range(10):
        groups = [f"g{n}x{i}" for i in range(10)]
        _member(family, f"m{n}", {"role": "READER", "groups": groups}, create=True)
    assert len(set().union(*members.roster(tenant).groups.values())) == 100
    fields = {"role": "REMOVED", "groups": ["extra"]}
    removed = _push_member(family, Mutation("create", MEMBER_TYPE, tenant, "eve", None, fields))
    if removed.error is None:
        token = removed.record.change_token
        back = Mutation("update", MEMBER_TYPE, tenant, "eve", token, {"role": "READER"})
        result = _push_member(family, back)
        names = set().union(*members.roster(tenant).groups.values())
        raise AssertionError(
            f"a REMOVED member's group past the 100: None; re-added: {result.error}, "
            f"{len(names)} groups"
        )
    assert removed.error.code == "BAD_USER_INPUT", removed.error


def _dave_moves_olga(service: SyncService, tenant: str, fields: dict[str, Any]) -> str:
    base = service.membership.access(tenant, OLGA).viewer(OLGA).token
    update = Mutation("update", MEMBER_TYPE, tenant, OLGA, base, fields)
    record = service.apply(update, DAVE, OWNER, moved=True).record
    assert record is not None
    return record.change_token


def test_an_export_holds_no_marker_and_a_later_join_keeps_its_link(
    gql: GraphQLClient, service: SyncService, kids: str, unhurried_exports: None
) -> None:
    """dave moves olga out of kids and back, renaming her between (a marker alone at
    its token), then olga exports: her file has no line of a marker (each olga line
    her entity or a version of it, with its role). dave then moves her into teens too
    (one more marker in her stream, which the export's check reads): her link is
    still given."""
    record = _write_as(service, kids, ZED, {"givenName": "kids-only"}, ZEDS_KIDS)
    _dave_moves_olga(service, kids, {"groups": []})
    _dave_moves_olga(service, kids, {"displayName": "Olga"})
    _dave_moves_olga(service, kids, {"groups": ["kids"]})
    payload, lines = _exported(gql, OLGA, kids)
    assert record.id in {line["entity"]["id"] for line in lines if "entity" in line}
    olgas = [line for line in lines if OLGA in json.dumps(line) and "export" not in line]
    kinds = [next(iter(line)) for line in olgas]
    assert "entity" in kinds and set(kinds) <= {"entity", "version"}, olgas
    assert all(line[kind].get("role") for line, kind in zip(olgas, kinds, strict=True)), olgas
    _dave_moves_olga(service, kids, {"groups": ["kids", "teens"]})
    body = dict(_call(gql, OLGA, kids, EXPORT, e=payload["exportID"]))
    assert "errors" not in body, body
    assert body["data"]["exportTenant"]["downloadURL"] is not None


def test_a_device_away_past_the_retention_is_resync_required_whatever_its_markers(
    ddb: Any, settings: Settings, tenant: str
) -> None:
    """bob's device synced; bob joins kids and is renamed (the join's entry gone from
    the main log, its marker left); the retention passes and TTL removes the marker:
    the device's next sync is RESYNC_REQUIRED, and a new device of bob gets the
    letter."""
    clock = Clock()
    service = short_retention_service(DynamoStore(), clock)

    def member(verb: str, sub: str, token: str | None, fields: dict[str, Any]) -> str:
        mutation = Mutation(verb, MEMBER_TYPE, tenant, sub, token, fields)  # type: ignore[arg-type]
        (result,) = service.push(tenant, [mutation], by="o", role="owner", moved=True)
        assert result.error is None and result.record is not None, result.error
        return result.record.change_token

    owner = Mutation("create", MEMBER_TYPE, tenant, "o", None, {"role": "OWNER", "groups": []})
    _write(service, owner, by="o", role="owner")
    bob = member("create", "bob", None, {"role": "READER", "groups": []})
    _write(service, _create(tenant, "letter", KIDS), by="o")

    def viewer() -> Any:
        return service.membership.access(tenant, "bob").viewer("bob")

    since = service.changes(tenant, sub=viewer()).change_token
    assert since is not None
    clock.advance(1)
    bob = member("update", "bob", bob, {"groups": ["kids"]})
    clock.advance(1)
    member("update", "bob", bob, {"displayName": "Bobby"})
    clock.advance(EXPIRED_S)
    stream = keys.stream_pk(tenant, member_principal("bob"))
    markers = _query_all(ddb, settings.table_name, stream)
    assert len(markers) == 1 and int(markers[0]["exp"]["N"]) < clock() // 1000
    ddb.delete_item(
        TableName=settings.table_name, Key={"pk": markers[0]["pk"], "sk": markers[0]["sk"]}
    )
    with pytest.raises(ResyncRequired):
        service.changes(tenant, since=since, sub=viewer())
    page = service.changes(tenant, sub=viewer())
    assert page.cursor is None and "letter" in {r.id for r in page.items}


def test_the_history_of_a_moved_member_lists_his_versions_and_no_marker(
    settings: Settings, tenant: str
) -> None:
    """bob joins kids, is renamed, leaves: the history of his Member record (his own
    view, then o's) lists his three earlier versions, newest first, each with its
    fields; a removed bob's request is refused NOT_A_MEMBER."""
    family, _ = _synced([], tenant)
    created = family.bob
    joined = family.groups(["kids"])
    renamed = _member(family, "bob", {"displayName": "Bobby"})
    family.groups([])
    for sub in (family.viewer(), "o"):
        versions = family.service.versions(tenant, "bob", sub=sub)
        assert [r.change_token for r in versions.items] == [renamed, joined, created]
        assert all(r.fields.get("role") and not r.marks for r in versions.items)
    _member(family, "bob", {"role": "REMOVED"})
    access = family.service.membership.access(tenant, "bob")
    with pytest.raises(NotAMember):
        access.role_of(lambda: "reader")
