"""Who sees what, the write path (contract 3.12, docs/ordering.md "Who sees what"),
on DynamoDB Local: what each write stores in the main log and the streams, the
head's record of it, the next transaction's checks, and the refusals of writes
outside the caller's view (nothing written)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from api.domain.cursor import CursorCodec
from api.domain.errors import BadUserInput, NotFound, RoleForbidden
from api.domain.mutations import Mutation
from api.domain.records import Record
from api.domain.visibility import Visibility
from api.service import PushStatus, SyncService
from api.settings import Settings
from api.storage import codecs, keys
from api.storage.store import DynamoStore
from tests.support.family import MEMBER, PERSON
from tests.support.store_state import _query_all

Inject = Callable[[str, Callable[..., Any]], None]


def _service() -> SyncService:
    return SyncService(DynamoStore(), CursorCodec("x"))


class _Tenant:
    def __init__(self, ddb: Any, settings: Settings, tenant: str) -> None:
        self.ddb, self.table, self.tenant = ddb, settings.table_name, tenant

    def partition(self, pk: str) -> dict[str, dict[str, Any]]:
        return {i["sk"]["S"]: i for i in _query_all(self.ddb, self.table, pk)}

    def log(self) -> dict[str, dict[str, Any]]:
        return self.partition(keys.log_pk(self.tenant))

    def head(self) -> dict[str, Any]:
        return self.log()[keys.HEAD_SK]

    def stream(self, sub: str) -> dict[str, dict[str, Any]]:
        return self.partition(keys.stream_pk(self.tenant, f"m:{sub}"))


def _write(
    service: SyncService,
    mutation: Mutation,
    by: str,
    role: str = "writer",
) -> Record:
    (result,) = service.push(mutation.tenant_id, [mutation], by=by, role=role)
    if result.error is not None:
        raise result.error
    assert result.record is not None
    return result.record


def _create(tenant: str, entity_id: str, visibility: Visibility | None, **fields: str) -> Mutation:
    return Mutation(
        "create",
        PERSON,
        tenant,
        entity_id,
        None,
        {"givenName": "Ann", **fields},
        visibility=visibility,
        sets_visibility=True,
    )


def _share(record: Record, visibility: Visibility | None) -> Mutation:
    return Mutation(
        "share",
        PERSON,
        record.tenant_id,
        record.id,
        record.change_token,
        visibility=visibility,
        sets_visibility=True,
    )


def test_each_change_of_visibility_stores_the_entries_it_owes(
    ddb: Any, settings: Settings, tenant: str
) -> None:
    state = _Tenant(ddb, settings, tenant)
    service = _service()
    # Created private: in alice's stream only, owned by her; the main log holds none.
    v1 = _write(service, _create(tenant, "p1", Visibility("", ())), by="alice")
    assert v1.owner == "alice" and v1.visibility == Visibility("alice")
    entry = state.stream("alice")[v1.change_token]
    assert entry["ow"]["S"] == "alice" and entry["vw"]["L"] == []
    assert entry["f"]["M"]["givenName"]["S"] == "Ann"
    assert v1.change_token not in state.log()
    head = state.head()
    assert head["vis"]["BOOL"] is True
    assert head["mt"]["SS"] == ["0"] and head["lm"]["S"] == "0"
    assert head["vp"]["SS"] == [f"{v1.change_token}#m:alice"]
    entity = state.partition(keys.tenant_pk(tenant))[keys.entity_sk("p1")]
    assert entity["ow"]["S"] == "alice" and entity["vw"]["L"] == []

    # Shared with bob: the version in both streams, alice's old entry removed.
    v2 = _write(service, _share(v1, Visibility("", ("bob",))), by="alice")
    assert v2.visibility == Visibility("alice", ("bob",)) and v2.fields == v1.fields
    assert set(state.stream("alice")) == {v2.change_token}
    assert state.stream("bob")[v2.change_token]["vw"]["L"] == [{"S": "bob"}]
    head = state.head()
    assert set(head["vp"]["SS"]) == {f"{v2.change_token}#m:alice", f"{v2.change_token}#m:bob"}
    assert head["vx"]["SS"] == [f"{v1.change_token}#m:alice"]

    # Unshared: bob gets a LeftView sentinel (no fields, expires), alice the version.
    v3 = _write(service, _share(v2, Visibility("", ())), by="alice")
    left = state.stream("bob")[v3.change_token]
    assert left["lv"]["BOOL"] is True and "f" not in left and "exp" in left
    assert set(state.stream("bob")) == {v3.change_token}
    assert set(state.stream("alice")) == {v3.change_token}

    # Made tenant-wide: the main log's version, linked to the main log's last entry
    # (none: the tenant's first main entry); the streams' versions removed, bob's
    # sentinel kept until it expires.
    v4 = _write(service, _share(v3, None), by="alice")
    main = state.log()[v4.change_token]
    assert "pv" not in main and "vw" not in main and main["ow"]["S"] == "alice"
    assert state.stream("alice") == {}
    assert set(state.stream("bob")) == {v3.change_token}
    head = state.head()
    assert "mt" not in head and "lm" not in head and head["pm"]["S"] == "0"

    # Restricted again: the whole tenant gets a sentinel in the main log, and the
    # old main entry goes.
    v5 = _write(service, _share(v4, Visibility("", ("carol",))), by="alice")
    log = state.log()
    assert v4.change_token not in log
    assert log[v5.change_token]["lv"]["BOOL"] is True and "f" not in log[v5.change_token]
    assert log[v5.change_token]["pv"]["S"] == v4.change_token  # the last main entry
    assert set(state.stream("carol")) == {v5.change_token}

    # A tenant-wide write after it links to that sentinel, the last main entry.
    other = _write(service, _create(tenant, "p2", None), by="bob")
    assert state.log()[other.change_token]["pv"]["S"] == v5.change_token


def test_a_tenant_that_never_restricts_writes_as_before(
    ddb: Any, settings: Settings, tenant: str, inject: Inject
) -> None:
    sizes: list[int] = []
    inject(
        "provide-client-params.dynamodb.TransactWriteItems",
        lambda params, **_: sizes.append(len(params["TransactItems"])),
    )
    service = _service()
    v1 = _write(service, _create(tenant, "p1", None), by="alice")
    _write(
        service,
        Mutation("update", PERSON, tenant, "p1", v1.change_token, {"familyName": "Lee"}),
        by="bob",
    )
    head = _Tenant(ddb, settings, tenant).head()
    assert not {"vis", "lm", "pm", "mt", "vp", "vx"} & set(head)
    # entity, entry, copy, fence, head; then entity, old entry, entry, copy, version, head
    assert sizes == [5, 6]


def test_the_next_transaction_of_another_process_checks_the_stream_entries(
    ddb: Any, settings: Settings, tenant: str, inject: Inject
) -> None:
    v1 = _write(_service(), _create(tenant, "p1", Visibility("", ("bob",))), by="alice")
    sent: list[dict[str, Any]] = []
    inject(
        "provide-client-params.dynamodb.TransactWriteItems",
        lambda params, **_: sent.append(params),
    )
    # Another process (it did not write the head's transaction): it checks the two
    # stream entries that transaction put, and no main entry (it wrote none).
    v2 = _write(_service(), _create(tenant, "p2", None), by="bob")
    (params,) = sent
    checked = {
        (i["ConditionCheck"]["Key"]["pk"]["S"], i["ConditionCheck"]["Key"]["sk"]["S"])
        for i in params["TransactItems"]
        if "ConditionCheck" in i and i["ConditionCheck"]["Key"]["pk"]["S"] != keys.later_pk(tenant)
    }
    assert checked == {
        (keys.stream_pk(tenant, "m:alice"), v1.change_token),
        (keys.stream_pk(tenant, "m:bob"), v1.change_token),
    }
    # The next one, from a third process, checks v2's main entry and no stream entry.
    sent.clear()
    _write(_service(), _create(tenant, "p3", None), by="bob")
    (params,) = sent
    checked = {
        (i["ConditionCheck"]["Key"]["pk"]["S"], i["ConditionCheck"]["Key"]["sk"]["S"])
        for i in params["TransactItems"]
        if "ConditionCheck" in i and i["ConditionCheck"]["Key"]["pk"]["S"] != keys.later_pk(tenant)
    }
    assert checked == {(keys.log_pk(tenant), v2.change_token)}


def test_writes_outside_the_view_are_not_found_and_write_nothing(
    ddb: Any, settings: Settings, tenant: str
) -> None:
    state = _Tenant(ddb, settings, tenant)
    service = _service()
    v1 = _write(service, _create(tenant, "p1", Visibility("", ("bob",))), by="alice")
    before = state.head()
    for mutation in (
        Mutation("update", PERSON, tenant, "p1", v1.change_token, {"familyName": "X"}),
        Mutation("delete", PERSON, tenant, "p1", v1.change_token),
        _share(v1, None),
        _create(tenant, "p1", None),
    ):
        with pytest.raises(NotFound) as refused:
            _write(service, mutation, by="carol", role="owner")
        assert "Ann" not in str(refused.value)
    assert state.head() == before
    # bob sees it: may update it, not delete it nor change who sees it.
    v2 = _write(
        service,
        Mutation("update", PERSON, tenant, "p1", v1.change_token, {"familyName": "B"}),
        by="bob",
    )
    assert v2.visibility == v1.visibility and v2.owner == "alice"
    with pytest.raises(RoleForbidden):
        _write(service, Mutation("delete", PERSON, tenant, "p1", v2.change_token), by="bob")
    with pytest.raises(RoleForbidden):
        _write(service, _share(v2, None), by="bob")
    # Only a tenant OWNER creates a record owned by another.
    with pytest.raises(RoleForbidden):
        _write(service, _create(tenant, "p9", Visibility("bob", ())), by="alice")
    owned = _write(service, _create(tenant, "p9", Visibility("bob", ())), by="olga", role="owner")
    assert owned.owner == "bob" and set(state.stream("bob")) >= {owned.change_token}
    assert owned.change_token not in state.stream("olga")


def test_a_stale_write_that_lost_the_record_from_its_view_gets_no_current(
    tenant: str,
) -> None:
    service = _service()
    v1 = _write(service, _create(tenant, "p1", Visibility("", ("bob",))), by="alice")
    # bob edits from v1 while alice unshares; bob's push holds what he read.
    _write(service, _share(v1, Visibility("", ())), by="alice")
    (result,) = service.push(
        tenant,
        [Mutation("update", PERSON, tenant, "p1", v1.change_token, {"familyName": "B"})],
        by="bob",
        role="writer",
    )
    assert result.status is PushStatus.REJECTED and result.record is None
    assert isinstance(result.error, NotFound)


def test_a_write_whose_checks_do_not_fit_reads_the_previous_stream_entries_first(
    ddb: Any, settings: Settings, tenant: str, inject: Inject
) -> None:
    """A record shared with 20 shared anew with 20 others (its owner stays) puts 41
    stream entries and removes 21; the next such write of another server cannot
    check them in its own transaction (62 checks beside its 66 items): it reads them
    first (one BatchGetItem), then commits without those checks (docs/ordering.md,
    "Who sees what", 11)."""
    first, second = _service(), _service()
    v1 = _write(
        first, _create(tenant, "p1", Visibility.of(None, [f"a{i}" for i in range(20)])), by="o"
    )
    v2 = _write(first, _share(v1, Visibility.of(None, [f"b{i}" for i in range(20)])), by="o")
    head = _Tenant(ddb, settings, tenant).head()
    assert (len(head["vp"]["SS"]), len(head["vx"]["SS"])) == (41, 21)
    calls: list[tuple[str, int]] = []
    inject(
        "provide-client-params.dynamodb.TransactWriteItems",
        lambda params, **_: calls.append(("transact", len(params["TransactItems"]))),
    )
    inject(
        "provide-client-params.dynamodb.BatchGetItem",
        lambda params, **_: calls.append(
            ("batch get", sum(len(t["Keys"]) for t in params["RequestItems"].values()))
        ),
    )
    v3 = _write(second, _share(v2, Visibility.of(None, [f"c{i}" for i in range(20)])), by="o")
    # The push's read of the entity, the read of the 62 stream entries, one transaction
    # of its own items (21 removed, 41 put, entity, copy, version, head) and no checks
    # of the previous stream entries.
    assert calls == [("batch get", 1), ("batch get", 62), ("transact", 66)], calls
    assert set(_Tenant(ddb, settings, tenant).stream("c0")) == {v3.change_token}


def test_a_deleted_tenants_streams_go_and_its_next_life_shows_nothing_of_them(
    ddb: Any, settings: Settings, tenant: str
) -> None:
    """A deletion removes the streams of every member in the audience of one of the
    tenant's records; and a member's first sync of the tenant written again reads its
    stream from the tenant's new first token only (sentinels of a member that left
    every audience are not swept: they expire)."""
    state = _Tenant(ddb, settings, tenant)
    service = _service()
    _write(service, _create(tenant, "old", Visibility("", ())), by="alice")
    _write(service, _create(tenant, "shared", Visibility("", ("bob",))), by="carol")
    assert state.stream("alice") and state.stream("bob") and state.stream("carol")
    while not service.delete_tenant(tenant, tenant, "alice").done:
        pass
    assert (state.stream("alice"), state.stream("bob"), state.stream("carol")) == ({}, {}, {})
    _write(service, _create(tenant, "old2", Visibility("", ())), by="alice")
    # Not swept (as one a deletion missed would be): read from the new first token.
    ddb.put_item(
        TableName=settings.table_name,
        Item={
            **codecs.raw_key(keys.stream_pk(tenant, "m:alice"), "01" + "0" * 24),
            "ty": {"S": "PERSON"},
            "id": {"S": "old"},
            "tok": {"S": "01" + "0" * 24},
            "ca": {"N": "0"},
            "ow": {"S": "alice"},
            "vw": {"L": []},
        },
    )
    new = _write(service, _create(tenant, "new", Visibility("", ())), by="alice")
    page = service.changes(tenant, sub="alice")
    assert [r.id for r in page.items] == ["old2", "new"]
    assert page.change_token == new.change_token


def test_what_a_private_or_shared_write_costs_beside_a_tenant_wide_one(
    settings: Settings, tenant: str, inject: Inject
) -> None:
    """Write units by AWS's rules, 2 per item of a transaction under 1 KB (a
    ConditionCheck too; DynamoDB Local does not report them per item): a create,
    then an update by another server (which checks the create's entries), per
    visibility; then a create of another record by a third server, which checks
    what the update put and removed. Private: the same as tenant-wide, but for the
    tenant's first restricted write, which sets the flag on its blob usage item too
    (one item more, once per tenant: attachments read it there); shared with
    k members: 2k more for the create (k more stream entries), 4k more for the
    update (k more put, k more removed, the checks riding on the removals), 4k more
    for the next transaction of another server (k more entries checked present, k
    more checked gone)."""
    sizes: list[int] = []
    inject(
        "provide-client-params.dynamodb.TransactWriteItems",
        lambda params, **_: sizes.append(len(params["TransactItems"])),
    )

    def units(visibility: Visibility | None, name: str) -> tuple[int, int, int]:
        v1 = _write(_service(), _create(f"{tenant}-{name}", "p1", visibility), by="o")
        created = 2 * sizes[-1]
        changes = {"familyName": "L"}
        update = Mutation("update", PERSON, v1.tenant_id, "p1", v1.change_token, changes)
        _write(_service(), update, by="o")
        updated = 2 * sizes[-1]
        _write(_service(), _create(v1.tenant_id, "p2", None), by="o")
        return created, updated, 2 * sizes[-1]

    wide = units(None, "wide")
    private = units(Visibility("", ()), "private")
    shared = {
        k: units(Visibility.of(None, [f"m{i}" for i in range(k)]), f"k{k}") for k in (1, 5, 20)
    }
    print("write units (create, update, next server's create):", wide, private, shared)
    assert private == (wide[0] + 2, wide[1], wide[2]), (private, wide)
    for k, written in shared.items():
        assert written == (private[0] + 2 * k, private[1] + 4 * k, private[2] + 4 * k), k


def test_a_push_packs_at_most_40_stream_entries_in_a_transaction_of_several_writes(
    settings: Settings, tenant: str, inject: Inject
) -> None:
    """Three creations shared with 19 members (20 stream entries each): 66 items would
    fit one transaction, but the next would then check 60 stream entries; two go
    together (40), the third alone (STREAM_ITEMS_CAP)."""
    sizes: list[int] = []
    inject(
        "provide-client-params.dynamodb.TransactWriteItems",
        lambda params, **_: sizes.append(len(params["TransactItems"])),
    )
    shared = Visibility.of(None, [f"m{i}" for i in range(19)])
    creates = [_create(tenant, f"p{i}", shared) for i in range(3)]
    results = _service().push(tenant, creates, by="o", role="writer")
    assert [r.status for r in results] == [PushStatus.APPLIED] * 3
    # Each write: entity, 20 stream entries, copy; the first transaction also the
    # fence and the flag on the blob usage item (the tenant's first restricted
    # write), each its head.
    assert sizes == [2 * 22 + 3, 22 + 1], sizes


def test_a_member_record_takes_no_visibility(settings: Settings, tenant: str) -> None:
    mutation = Mutation(
        "create",
        MEMBER,
        tenant,
        "olga",
        None,
        {"role": "OWNER"},
        visibility=Visibility("", ()),
        sets_visibility=True,
    )
    with pytest.raises(BadUserInput, match="Member"):
        _write(_service(), mutation, by="olga", role="owner")


def test_a_write_whose_record_leaves_the_view_before_it_commits_gets_no_current(
    settings: Settings, tenant: str, inject: Inject
) -> None:
    """bob's update read the record shared with him; alice unshares it before bob's
    transaction commits: its entity's condition fails and the cancellation carries
    the current version, which bob no longer sees: NOT_FOUND, never that version."""
    alice_service, bob_service = _service(), _service()
    v1 = _write(alice_service, _create(tenant, "p1", Visibility("", ("bob",))), by="alice")
    raced: list[Record] = []
    started: list[bool] = []

    def unshare_once(**_: Any) -> None:
        if not started:  # alice's own write reads too: once
            started.append(True)
            raced.append(_write(alice_service, _share(v1, Visibility("", ())), by="alice"))

    inject("after-call.dynamodb.BatchGetItem", unshare_once)
    update = Mutation("update", PERSON, tenant, "p1", v1.change_token, {"familyName": "B"})
    (result,) = bob_service.push(tenant, [update], by="bob", role="writer")
    assert raced, "the race did not happen"
    assert result.status is PushStatus.REJECTED and result.record is None
    assert isinstance(result.error, NotFound) and "Ann" not in str(result.error)
