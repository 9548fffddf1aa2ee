"""Bob tries to read, infer or keep what only Alice sees (contract 3.12): with her
private record's id, its tokens, cursors, its photo's hash, an export, a catch-up,
a subscription, through the API of a real server on DynamoDB Local and the S3
engine. Both are owners of the tenant (a tenant OWNER does not see another's
private record). Nothing of Alice's private record reaches Bob: not its data, not
its existence.

Alice's records are written through the service (the same table the server reads),
as a device of hers would write them, so that these tests hold whatever the API's
inputs for visibilities look like."""

from __future__ import annotations

import gzip
import json
import os
from typing import Any

import httpx2
import pytest
from starlette.testclient import TestClient

from api.domain import catalog
from api.domain.audiences import UNTOLD, Audience
from api.domain.cursor import CursorCodec
from api.domain.membership import OWNER
from api.domain.mutations import Mutation, Verb
from api.domain.records import Record
from api.domain.visibility import Visibility
from api.graphql.context import RELEASE_HEADER
from api.realtime.streams import publish_heads
from api.service import SyncService
from api.settings import Settings
from api.storage import keys
from api.storage.blob_usage import BlobUsageTable
from api.storage.blobs import S3Blobs
from api.storage.export_files import S3ExportFiles
from api.storage.exports import ExportTable
from api.storage.store import DynamoStore
from tests.integration.test_realtime import _connect, _init, _receive, _subscribe
from tests.support import family
from tests.support.blobs import REQUEST_UPLOAD, reference, sha256_of
from tests.support.gql import GraphQLClient, bearer

ALICE, BOB = "alice", "bob"
ATTACHMENT = """
query($t: ID!, $sha: String!, $id: ID) {
  attachment(tenantID: $t, sha256: $sha, id: $id) { sha256 url }
}"""
EXPORT = (
    "mutation($t: ID!, $e: ID) { exportTenant(tenantID: $t, exportID: $e) "
    "{ exportID done entities versions downloadURL } }"
)
CATCH_UP = (
    "query($t: ID!, $u: ID!, $c: String, $l: Int) { catchUp(tenantID: $t, upTo: $u, "
    "types: [PERSON], cursor: $c, limit: $l) { items { id changeToken } cursor } }"
)
PAGE = (
    "query($t: ID!, $c: String) { changes(tenantID: $t, cursor: $c, limit: 1) "
    "{ items { __typename id ... on Person { givenName } } cursor changeToken } }"
)
CREATE = (
    "mutation($i: CreatePersonInput!) { createPerson(input: $i) { person { id changeToken } } }"
)
UPDATE = (
    "mutation($i: UpdatePersonInput!) { updatePerson(input: $i) { person { id changeToken } } }"
)
DELETE = "mutation($i: DeletePersonInput!) { deletePerson(input: $i) { deletedItem { id } } }"
SHARE = "mutation($i: SetVisibilityInput!) { setVisibility(input: $i) { item { id } } }"
PERSON = "query($t: ID!, $id: ID!) { person(tenantID: $t, id: $id) { id givenName } }"
HISTORY = (
    "query($t: ID!, $id: ID!) { history(tenantID: $t, id: $id) "
    "{ items { ... on Person { givenName } } } }"
)


def _as(sub: str, tenant: str) -> dict[str, str]:
    return bearer([tenant], sub=sub)


def _call(gql: GraphQLClient, sub: str, tenant: str, query: str, **variables: Any) -> Any:
    return gql.execute(query, {"t": tenant, **variables}, headers=_as(sub, tenant))


def _code(body: dict[str, Any]) -> str:
    assert body.get("data") is None or not any(body["data"].values()), body
    return str(body["errors"][0]["extensions"]["code"])


@pytest.fixture
def service(settings: Settings) -> SyncService:
    """Writes as a device of Alice's would, on the table the server reads."""
    blobs = S3Blobs(settings.s3_client(), settings.blob_bucket, hashes_bytes=True)
    return SyncService(
        DynamoStore(), CursorCodec(settings.cursor_secret), blobs=blobs, quota=BlobUsageTable()
    )


def _write(
    service: SyncService,
    tenant: str,
    sub: str,
    fields: dict[str, Any],
    visibility: Visibility | None = None,
    entity_id: str | None = None,
    token: str | None = None,
) -> Record:
    """A person created (or updated, with `token`) by `sub`; `visibility`: its new one
    (None: tenant-wide)."""
    verb: Verb = "create" if token is None else "update"
    mutation = Mutation(
        verb,
        family.PERSON,
        tenant,
        entity_id,
        token,
        fields,
        visibility=visibility,
        sets_visibility=verb == "create",
    )
    return service.apply(mutation, sub, OWNER).record


def _edit(service: SyncService, sub: str, record: Record, fields: dict[str, Any]) -> Record:
    """`record` updated by `sub` (its visibility kept)."""
    return _write(service, record.tenant_id, sub, fields, None, record.id, record.change_token)


def _share(service: SyncService, sub: str, record: Record, visibility: Visibility) -> Record:
    """`record` given `visibility` by `sub` (setVisibility)."""
    mutation = Mutation(
        "share",
        record.item_type,
        record.tenant_id,
        record.id,
        record.change_token,
        {},
        visibility=visibility,
        sets_visibility=True,
    )
    return service.apply(mutation, sub, OWNER).record


def versions_of(versions: list[dict[str, Any]], entity_id: str) -> str:
    """The one earlier version of `entity_id` among an export's version lines."""
    (token,) = [v["changeToken"] for v in versions if v["id"] == entity_id]
    return str(token)


def _upload(gql: GraphQLClient, sub: str, tenant: str, data: bytes) -> dict[str, Any]:
    """`data` uploaded by `sub` (unless the tenant says it holds it); its reference."""
    ref = reference(data)
    variables = {"sha": ref["sha256"], "size": ref["size"], "type": ref["contentType"]}
    answer = _call(gql, sub, tenant, REQUEST_UPLOAD, **variables)["data"]["requestUpload"]
    if not answer["alreadyPresent"]:
        put = answer["upload"]
        headers = {h["name"]: h["value"] for h in put["headers"]}
        assert httpx2.put(put["url"], content=data, headers=headers).status_code == 200
    return ref


def _alices_private_photo(
    gql: GraphQLClient, service: SyncService, tenant: str
) -> tuple[Record, bytes]:
    """A tenant-wide person of Bob's, then Alice's private person with her photo."""
    _write(service, tenant, BOB, {"givenName": "Bob"})
    photo = os.urandom(3000)
    ref = _upload(gql, ALICE, tenant, photo)
    record = _write(
        service, tenant, ALICE, {"givenName": "Secret", "photo": ref}, Visibility.of(ALICE, [])
    )
    return record, photo


def test_a_blob_of_a_private_record_is_linked_only_through_it_and_only_to_who_sees_it(
    gql: GraphQLClient, service: SyncService, tenant: str
) -> None:
    record, photo = _alices_private_photo(gql, service, tenant)
    sha = sha256_of(photo)
    # Alice, through her record: a link to her photo.
    mine = _call(gql, ALICE, tenant, ATTACHMENT, sha=sha, id=record.id)
    assert "errors" not in mine, mine
    assert httpx2.get(mine["data"]["attachment"]["url"]).content == photo
    # Bob, by its hash alone: the tenant has private records, so a record is needed.
    bare = _call(gql, BOB, tenant, ATTACHMENT, sha=sha)
    assert _code(bare) == "BAD_USER_INPUT", bare
    # Bob, through Alice's record (its id is all he has): as if it did not exist, in
    # the same words as for an id nobody wrote.
    through = _call(gql, BOB, tenant, ATTACHMENT, sha=sha, id=record.id)
    unknown = _call(gql, BOB, tenant, ATTACHMENT, sha=sha, id="no-such-record")
    assert _code(through) == _code(unknown) == "NOT_FOUND"
    assert through["errors"][0]["message"] == unknown["errors"][0]["message"]
    # Nor through his own record, which does not reference it.
    own = service.changes(tenant).items[0]
    assert own.fields["givenName"] == "Bob"
    mixed = _call(gql, BOB, tenant, ATTACHMENT, sha=sha, id=own.id)
    assert _code(mixed) == "NOT_FOUND"


def test_uploading_the_hash_of_a_private_photo_does_not_tell_that_it_exists(
    gql: GraphQLClient, service: SyncService, tenant: str
) -> None:
    _, photo = _alices_private_photo(gql, service, tenant)
    ref = reference(photo)
    variables = {"sha": ref["sha256"], "size": ref["size"], "type": ref["contentType"]}
    probe = _call(gql, BOB, tenant, REQUEST_UPLOAD, **variables)
    fresh = os.urandom(3000)
    other = {"sha": sha256_of(fresh), "size": len(fresh), "type": "image/jpeg"}
    control = _call(gql, BOB, tenant, REQUEST_UPLOAD, **other)
    # Bob's probe of Alice's photo is answered as the bytes nobody uploaded are.
    assert "errors" not in probe and "errors" not in control, (probe, control)
    answers = [b["data"]["requestUpload"] for b in (probe, control)]
    assert [a["alreadyPresent"] for a in answers] == [False, False]
    assert all(a["upload"]["method"] == "PUT" for a in answers)
    # His upload of the same bytes is the same content under the same key: Alice's
    # photo is still hers, as it was.
    put = answers[0]["upload"]
    headers = {h["name"]: h["value"] for h in put["headers"]}
    assert httpx2.put(put["url"], content=photo, headers=headers).status_code == 200


def _exported(
    gql: GraphQLClient, sub: str, tenant: str
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    payload = _call(gql, sub, tenant, EXPORT, e=None)["data"]["exportTenant"]
    while not payload["done"]:
        body = _call(gql, sub, tenant, EXPORT, e=payload["exportID"])
        assert "errors" not in body, body
        payload = body["data"]["exportTenant"]
    lines = gzip.decompress(httpx2.get(payload["downloadURL"]).content).splitlines()
    return payload, [json.loads(line) for line in lines]


def test_an_export_holds_the_callers_view_and_is_continued_only_by_its_caller(
    gql: GraphQLClient, service: SyncService, tenant: str, unhurried_exports: None
) -> None:
    shared = _write(service, tenant, BOB, {"givenName": "Both"})
    # A record of Alice's, private and edited, then shared with Bob and edited again.
    diary = _write(service, tenant, ALICE, {"givenName": "private-one"}, Visibility.of(ALICE, []))
    diary = _edit(service, ALICE, diary, {"givenName": "private-two"})
    diary = _share(service, ALICE, diary, Visibility.of(ALICE, [BOB]))
    shared_at = diary.change_token
    diary = _edit(service, ALICE, diary, {"givenName": "shared-three"})
    # And one she keeps private.
    secret = _write(service, tenant, ALICE, {"givenName": "secret-one"}, Visibility.of(ALICE, []))
    secret = _edit(service, ALICE, secret, {"givenName": "secret-two"})
    shared = _edit(service, BOB, shared, {"givenName": "Both2"})

    _, lines = _exported(gql, BOB, tenant)
    leaked = [
        line
        for line in lines
        if secret.id in json.dumps(line) or "secret-" in str(line) or "private-one" in str(line)
    ]
    assert not leaked, leaked
    entities = {line["entity"]["id"]: line["entity"] for line in lines if "entity" in line}
    versions = [line["version"] for line in lines if "version" in line]
    assert sorted(entities) == sorted([shared.id, diary.id]), lines
    assert entities[diary.id]["givenName"] == "shared-three"
    # Of the diary's earlier versions, only the one shared with Bob (its own visibility).
    seen = sorted((v["id"], v["changeToken"]) for v in versions)
    assert seen == sorted([(shared.id, versions_of(versions, shared.id)), (diary.id, shared_at)])
    assert lines[-1]["end"]["entities"] == 2 and lines[-1]["end"]["versions"] == 2

    # Alice's export holds all of hers: both records, every earlier version.
    _, hers = _exported(gql, ALICE, tenant)
    her_entities = sorted(line["entity"]["id"] for line in hers if "entity" in line)
    assert her_entities == sorted([shared.id, diary.id, secret.id]), hers
    assert hers[-1]["end"]["versions"] == 1 + 3 + 1  # Bob's record's, the diary's, the secret's
    # Alice's export id is hers: Bob cannot go on with it, nor get its link.
    started = _call(gql, ALICE, tenant, EXPORT, e=None)["data"]["exportTenant"]
    taken = _call(gql, BOB, tenant, EXPORT, e=started["exportID"])
    assert _code(taken) == "NOT_FOUND", taken


def test_a_catch_up_returns_only_the_callers_view(
    gql: GraphQLClient, service: SyncService, tenant: str
) -> None:
    shared = _write(service, tenant, BOB, {"givenName": "Both"})
    secret = _write(service, tenant, ALICE, {"givenName": "Secret"}, Visibility.of(ALICE, []))
    head = _write(service, tenant, BOB, {"givenName": "Last"})

    up_to = head.change_token
    assert _caught_up(gql, BOB, tenant, up_to, 1) == sorted([shared.id, head.id])
    assert _caught_up(gql, ALICE, tenant, up_to, 1) == sorted([shared.id, secret.id, head.id])


def _caught_up(gql: GraphQLClient, sub: str, tenant: str, up_to: str, limit: int) -> list[str]:
    ids: list[str] = []
    cursor = None
    while True:
        body = _call(gql, sub, tenant, CATCH_UP, u=up_to, c=cursor, l=limit)
        assert "errors" not in body, body
        page = body["data"]["catchUp"]
        ids += [item["id"] for item in page["items"]]
        cursor = page["cursor"]
        if cursor is None:
            return sorted(ids)


def test_the_head_transactions_private_record_is_caught_up_from_the_owners_stream(
    gql: GraphQLClient, service: SyncService, tenant: str, settings: Settings, ddb: Any
) -> None:
    """Alice's private record is the head's transaction: its copy may not be applied
    yet when a catch-up's Query reads the copies (a Query is not isolated from a
    transaction), modelled by its copy removed; only its stream entry is proven by
    the head. So the catch-up reads it from her stream: for her, not for Bob."""
    shared = _write(service, tenant, BOB, {"givenName": "Both"})
    secret = _write(service, tenant, ALICE, {"givenName": "Secret"}, Visibility.of(ALICE, []))
    _remove_copies(settings, ddb, tenant, secret.id)
    assert _caught_up(gql, ALICE, tenant, secret.change_token, 100) == sorted(
        [shared.id, secret.id]
    )
    assert _caught_up(gql, BOB, tenant, secret.change_token, 100) == [shared.id]


def test_a_tenant_without_copies_is_caught_up_from_its_log_then_the_callers_stream(
    gql: GraphQLClient, service: SyncService, tenant: str, settings: Settings, ddb: Any
) -> None:
    """A tenant whose head lacks the copies' mark is caught up from its log; its
    restricted records are not in the log but in their audience's streams: each
    caller's stream is read after the log, page by page."""
    wide = [_write(service, tenant, BOB, {"givenName": f"w{n}"}) for n in range(3)]
    private = Visibility.of(ALICE, [])
    secrets = [_write(service, tenant, ALICE, {"givenName": f"s{n}"}, private) for n in range(3)]
    last = _write(service, tenant, BOB, {"givenName": "last"})
    _remove_copies(settings, ddb, tenant)
    ddb.update_item(
        TableName=settings.table_name,
        Key={"pk": {"S": keys.log_pk(tenant)}, "sk": {"S": keys.HEAD_SK}},
        UpdateExpression="REMOVE cp",
    )
    everyone = sorted(r.id for r in [*wide, last])
    for limit in (1, 2, 100):
        mine = _caught_up(gql, ALICE, tenant, last.change_token, limit)
        assert mine == sorted([*everyone, *(r.id for r in secrets)]), limit
        assert _caught_up(gql, BOB, tenant, last.change_token, limit) == everyone, limit


def _remove_copies(settings: Settings, ddb: Any, tenant: str, entity_id: str = "") -> None:
    """Remove the tenant's copies (of `entity_id` alone, if named)."""
    copies = ddb.query(
        TableName=settings.table_name,
        KeyConditionExpression="pk = :pk",
        ExpressionAttributeValues={":pk": {"S": keys.later_pk(tenant)}},
        ConsistentRead=True,
    )["Items"]
    for copy in copies:
        if not entity_id or copy["sk"]["S"].endswith(f"#{entity_id}"):
            ddb.delete_item(TableName=settings.table_name, Key={"pk": copy["pk"], "sk": copy["sk"]})


def _as3(sub: str, tenant: str) -> dict[str, str]:
    """A device of catalog release 3 (visibilities) of `sub`."""
    return {**_as(sub, tenant), RELEASE_HEADER: "3"}


def _create_private(gql: GraphQLClient, sub: str, tenant: str, entity_id: str, name: str) -> str:
    """A person private to `sub`, created through the API; its change token."""
    i = {"tenantID": tenant, "id": entity_id, "person": {"givenName": name}, "visibility": {}}
    body = gql.execute(CREATE, {"i": i}, headers=_as3(sub, tenant))
    assert "errors" not in body, body
    return str(body["data"]["createPerson"]["person"]["changeToken"])


def _follow(gql: GraphQLClient, tenant: str, cursor: str) -> list[dict[str, Any]]:
    """Bob's pages of `changes` from `cursor` to the end."""
    pages = []
    while cursor:
        body = gql.execute(PAGE, {"t": tenant, "c": cursor}, headers=_as3(BOB, tenant))
        pages.append(body)
        cursor = body["data"]["changes"]["cursor"]
    return pages


def test_bobs_probes_with_alices_id_token_and_cursors_get_nothing_of_her_record(
    gql: GraphQLClient, tenant: str
) -> None:
    """Every read and write Bob can aim at Alice's private record, with what he may
    hold of it (its id, its change token, cursors minted under her view), answers as
    for a record that does not exist: no field of it, no version, no `current`."""
    for n in range(3):
        gql.execute(
            CREATE,
            {"i": {"tenantID": tenant, "id": f"w{n}", "person": {"givenName": f"w{n}"}}},
            headers=_as3(BOB, tenant),
        )
    token = _create_private(gql, ALICE, tenant, "diary", "Dear-Diary")
    # Cursors of Alice's: a sync's first page (1 of 4 records), a catch-up's.
    first = gql.execute(PAGE, {"t": tenant, "c": None}, headers=_as3(ALICE, tenant))
    sync_cursor = first["data"]["changes"]["cursor"]
    caught = _call(gql, ALICE, tenant, CATCH_UP, u=token, c=None, l=1)
    catch_up_cursor = caught["data"]["catchUp"]["cursor"]
    assert sync_cursor and catch_up_cursor
    answers = {
        "person": gql.execute(PERSON, {"t": tenant, "id": "diary"}, headers=_as3(BOB, tenant)),
        "history": gql.execute(HISTORY, {"t": tenant, "id": "diary"}, headers=_as3(BOB, tenant)),
        "update": gql.execute(
            UPDATE,
            {"i": {"tenantID": tenant, "id": "diary", "changeToken": token, "changes": {}}},
            headers=_as3(BOB, tenant),
        ),
        "create": gql.execute(
            CREATE,
            {"i": {"tenantID": tenant, "id": "diary", "person": {"givenName": "mine"}}},
            headers=_as3(BOB, tenant),
        ),
        "delete": gql.execute(
            DELETE,
            {"i": {"tenantID": tenant, "id": "diary", "changeToken": token}},
            headers=_as3(BOB, tenant),
        ),
        "share": gql.execute(
            SHARE,
            {"i": {"tenantID": tenant, "id": "diary", "changeToken": token, "visibility": None}},
            headers=_as3(BOB, tenant),
        ),
        "sync": _follow(gql, tenant, sync_cursor),
        "catchUp": _call(gql, BOB, tenant, CATCH_UP, u=token, c=catch_up_cursor, l=100),
        "attachment": _call(gql, BOB, tenant, ATTACHMENT, sha="0" * 64, id="diary"),
    }
    for name, body in answers.items():
        text = json.dumps(body)
        assert "Dear-Diary" not in text and '"current"' not in text, (name, body)
    assert answers["person"]["data"]["person"] is None
    for refused in ("history", "update", "delete", "share", "attachment"):
        assert _code(answers[refused]) == "NOT_FOUND", (refused, answers[refused])
    assert _code(answers["create"]) in ("NOT_FOUND", "ALREADY_EXISTS"), answers["create"]
    synced = [i["id"] for page in answers["sync"] for i in page["data"]["changes"]["items"]]
    assert "diary" not in synced and len(synced) == 2, synced  # the rest of the tenant
    assert "diary" not in [i["id"] for i in answers["catchUp"]["data"]["catchUp"]["items"]]


@pytest.mark.slow
@pytest.mark.serial
def test_a_private_change_pokes_only_its_audiences_subscriptions(
    app_client: TestClient, gql: GraphQLClient, service: SyncService, tenant: str
) -> None:
    first = _write(service, tenant, BOB, {"givenName": "Both"})
    with _connect(app_client) as bobs, _connect(app_client) as alices:
        for ws, sub in ((bobs, BOB), (alices, ALICE)):
            _init(ws, _as(sub, tenant)["Authorization"])
            assert _receive(ws) == {"type": "connection_ack"}
            _subscribe(ws, sub, tenant, since=first.change_token)
        # Both subscribed and poked: a tenant-wide change reaches both.
        both = gql.create(tenant, "Person", {"givenName": "Both"})
        for ws in (bobs, alices):
            event = _receive(ws)["payload"]["data"]["changesAvailable"]
            assert event["changeToken"] == both["changeToken"]
        # Alice's private changes: one committed by this server (its own poke), one by
        # another process (the table's stream). Each pokes her.
        mine = _create_private(gql, ALICE, tenant, "diary", "Dear-Diary")
        assert _token_of(_receive(alices)) == mine
        other = _write(service, tenant, ALICE, {"givenName": "x"}, Visibility.of(ALICE, []))
        assert _token_of(_receive(alices)) == other.change_token
        # Bob subscribes again from before them: no first event (nothing in his view).
        _subscribe(bobs, "again", tenant, since=both["changeToken"])
        # His first events are the next tenant-wide change's, never a private one's.
        after = gql.create(tenant, "Person", {"givenName": "Later"})
        his = [_receive(bobs) for _ in range(2)]
        assert {m["id"] for m in his} == {BOB, "again"}
        assert [_token_of(m) for m in his] == [after["changeToken"]] * 2


def _token_of(message: dict[str, Any]) -> str:
    return str(message["payload"]["data"]["changesAvailable"]["changeToken"])


def test_a_record_that_leaves_the_callers_view_during_its_export_leaves_the_file(
    settings: Settings, service: SyncService, tenant: str, unhurried_exports: None
) -> None:
    """Bob's export reads the first sync, then Alice unshares her diary and shares it
    again, then the export's sync from the first one's token gets the diary's
    LeftView and its version: a `leftView` line, then its `entity` line, so the file
    applied in order holds Bob's view at its end token. (Unshared and not shared
    again, the export is not continued: tests/integration/test_export_view.py.)"""
    kept = _write(service, tenant, BOB, {"givenName": "Both"})
    diary = _write(service, tenant, ALICE, {"givenName": "diary"}, Visibility.of(ALICE, [BOB]))
    exporting = SyncService(
        DynamoStore(),
        CursorCodec(settings.cursor_secret),
        exports=ExportTable(),
        export_files=S3ExportFiles(settings.s3_client(), settings.blob_bucket),
    )
    assert exporting.exports is not None
    job = exporting.exports.export_tenant(tenant, None, BOB, steps=1)  # the first sync
    assert job.entities == 2
    diary = _share(service, ALICE, diary, Visibility.of(ALICE, []))
    diary = _share(service, ALICE, diary, Visibility.of(ALICE, [BOB]))
    while not job.done:
        job = exporting.exports.export_tenant(tenant, job.export_id, BOB)
    body = (
        settings.s3_client()
        .get_object(Bucket=settings.blob_bucket, Key=keys.export_key(tenant, job.export_id))["Body"]
        .read()
    )
    lines = [json.loads(line) for line in gzip.decompress(body).splitlines()]
    # A LeftViewItem for a server of the app's visibilitySince release on (the family
    # app's 3), else a DeletedItem (what a client of its release is sent: the same
    # local effect).
    known = catalog.VISIBILITY_RELEASE
    kind = "leftView" if known is not None and known <= catalog.RELEASE else "deleted"
    (left,) = [line[kind] for line in lines if kind in line]
    left_kind = kind
    typename = "LeftViewItem" if kind == "leftView" else "DeletedItem"
    assert left["id"] == diary.id and left["__typename"] == typename
    assert left["type"] == "PERSON" and "givenName" not in left
    held: dict[str, Any] = {}
    for line in lines:
        for kind in ("entity", "deleted", "leftView"):
            if kind in line:
                if kind == "entity":
                    held[line[kind]["id"]] = line[kind]
                else:
                    held.pop(line[kind]["id"], None)
    assert list(held) == [kept.id, diary.id]
    syncs = [k for line in lines for k in line if k != "version" and line[k].get("id") == diary.id]
    assert syncs == ["entity", left_kind, "entity"]
    assert lines[-1]["end"]["entities"] == 3  # both of the first sync, the diary again


def test_a_record_once_shared_with_bob_answers_him_as_one_he_never_saw(
    gql: GraphQLClient, service: SyncService, tenant: str
) -> None:
    """Shared with Bob, then private again: its history, its link, its export and
    catch-up are Alice's alone, though Bob once saw (and may hold) its versions."""
    photo = os.urandom(2000)
    ref = _upload(gql, ALICE, tenant, photo)
    letter = _write(
        service, tenant, ALICE, {"givenName": "Letter", "photo": ref}, Visibility.of(ALICE, [BOB])
    )
    seen = _call(gql, BOB, tenant, ATTACHMENT, sha=ref["sha256"], id=letter.id)
    assert "errors" not in seen, seen  # while shared: his link
    letter = _share(service, ALICE, letter, Visibility.of(ALICE, []))
    gone = {
        "history": gql.execute(HISTORY, {"t": tenant, "id": letter.id}, headers=_as3(BOB, tenant)),
        "person": gql.execute(PERSON, {"t": tenant, "id": letter.id}, headers=_as3(BOB, tenant)),
        "attachment": _call(gql, BOB, tenant, ATTACHMENT, sha=ref["sha256"], id=letter.id),
        "catchUp": _call(gql, BOB, tenant, CATCH_UP, u=letter.change_token, c=None, l=100),
    }
    for name, body in gone.items():
        assert "Letter" not in json.dumps(body), (name, body)
    assert _code(gone["history"]) == _code(gone["attachment"]) == "NOT_FOUND"
    assert gone["person"]["data"]["person"] is None
    assert gone["catchUp"]["data"]["catchUp"]["items"] == []


def test_a_catch_up_pokes_the_heads_audience_and_leaves_the_others_untold(
    settings: Settings, service: SyncService, tenant: str
) -> None:
    """A catch-up reads the heads: the head's transaction's audience is told, the
    others must check their own view (UNTOLD); a tenant whose head's transaction
    was every member's (or that never restricted a record) pokes every member."""
    plain, shared = f"{tenant}-plain", f"{tenant}-wide"
    _write(service, plain, BOB, {"givenName": "Both"})
    _write(service, shared, ALICE, {"givenName": "x"}, Visibility.of(ALICE, []))
    _write(service, shared, BOB, {"givenName": "Both"})
    _write(service, tenant, BOB, {"givenName": "Both"})
    _write(service, tenant, ALICE, {"givenName": "x"}, Visibility.of(ALICE, []))
    told: dict[str, Audience] = {}
    publish_heads(
        settings.dynamodb_client(),
        settings.table_name,
        {tenant, plain, shared},
        lambda t, _token, audience: told.update({t: audience}),
    )
    assert told == {tenant: frozenset({"m:alice"}) | UNTOLD, plain: None, shared: None}
