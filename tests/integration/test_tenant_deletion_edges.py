"""A tenant being deleted, and deleted, at its edges (contract 3.8, issue 36): every
read and write of it is TENANT_DELETED and writes nothing; an upload presigned
before the deletion and sent during or after it is never read by the tenant
written again; a device that held the deleted tenant cannot write it again with
its old token. Against DynamoDB Local and the local S3 engine."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx2
import pytest
from starlette.testclient import TestClient
from sync_client import SyncClient

from api.domain.cursor import CursorCodec
from api.domain.errors import NotFound, TenantDeleted
from api.domain.mutations import StoredOutcome
from api.service import SyncService
from api.settings import Settings
from api.storage.blob_usage import BlobUsageTable
from api.storage.blobs import S3Blobs
from api.storage.export_files import S3ExportFiles
from api.storage.exports import ExportTable
from api.storage.store import DynamoStore
from tests.integration.test_export import EXPORT
from tests.integration.test_realtime import _acked, _connect, _receive, _subscribe
from tests.integration.test_tenant_deletion import DELETE, _code, _InProcess, _items_of, _left_of
from tests.support.blobs import REQUEST_UPLOAD, reference, upload
from tests.support.gql import GraphQLClient

PUSH = (
    "mutation($i: PushChangesInput!) { pushChanges(input: $i) "
    "{ results { status replayed error { code } } } }"
)
ATTACHMENT = "query($t: ID!, $sha: String!) { attachment(tenantID: $t, sha256: $sha) { url } }"
RESTORE = (
    "mutation($i: RestoreVersionInput!) { restoreVersion(input: $i) { item { changeToken } } }"
)


def _service(settings: Settings) -> SyncService:
    """A service as the app builds it (blobs, quota, exports), to delete in small calls."""
    s3 = settings.s3_client()
    return SyncService(
        DynamoStore(),
        CursorCodec(settings.cursor_secret),
        exports=ExportTable(),
        export_files=S3ExportFiles(s3, settings.blob_bucket),
        blobs=S3Blobs(s3, settings.blob_bucket, hashes_bytes=not settings.s3_verifies_checksums),
        quota=BlobUsageTable(),
        quota_bytes=settings.blob_quota_bytes,
    )


def _presign(gql: GraphQLClient, tenant: str, data: bytes) -> dict[str, Any]:
    """requestUpload of `data`: its presigned PUT, not sent yet."""
    ref = reference(data)
    answer = gql.data(
        REQUEST_UPLOAD,
        {"t": tenant, "sha": ref["sha256"], "size": ref["size"], "type": ref["contentType"]},
    )["requestUpload"]
    assert not answer["alreadyPresent"]
    put: dict[str, Any] = answer["upload"]
    return put


def _send(put: dict[str, Any], data: bytes) -> None:
    headers = {h["name"]: h["value"] for h in put["headers"]}
    assert httpx2.put(put["url"], content=data, headers=headers).status_code == 200


def _push(gql: GraphQLClient, tenant: str, entries: list[dict[str, Any]], **extra: Any) -> Any:
    body = gql.execute(PUSH, {"i": {"tenantID": tenant, "mutations": entries, **extra}})
    assert "errors" not in body, body
    return body["data"]["pushChanges"]["results"]


def _until_gone(service: SyncService, ddb: Any, settings: Settings, tenant: str, sk: str) -> None:
    """Delete the tenant in calls of one item until the item `sk` of its entity
    partition is gone: the deletion is then half done."""
    for _ in range(200):
        items = _items_of(ddb, settings.table_name, tenant)
        if not any(i["sk"]["S"] == sk for i in items):
            return
        assert not service.delete_tenant(tenant, tenant, "owner", limit=1).done
    raise AssertionError(f"{sk} was never removed")


def _half_deleted(
    gql: GraphQLClient, tenant: str, ddb: Any, settings: Settings
) -> tuple[dict[str, Any], dict[str, Any], str, dict[str, Any]]:
    """A tenant with a photo, a person updated once (its earlier token), and a person
    `held` by the device, deleted until `held` is gone: (person, held, the earlier
    token, the photo's reference)."""
    photo = upload(gql, tenant, b"a photo before the deletion")
    person = gql.create(tenant, "Person", {"givenName": "Ann", "photo": photo})
    older = person["changeToken"]
    person = gql.update(tenant, "Person", person["id"], older, {"givenName": "Anne"})
    held = gql.create(tenant, "Person", {"givenName": "Bob"})
    _until_gone(_service(settings), ddb, settings, tenant, f"I#{held['id']}")
    return person, held, older, photo


def _upload_vars(tenant: str, data: bytes) -> dict[str, Any]:
    ref = reference(data)
    return {"t": tenant, "sha": ref["sha256"], "size": ref["size"], "type": ref["contentType"]}


@pytest.mark.slow
def test_every_write_during_a_deletion_is_tenant_deleted_and_stores_nothing(
    gql: GraphQLClient, tenant: str, ddb: Any, settings: Settings
) -> None:
    person, held, older, _ = _half_deleted(gql, tenant, ddb, settings)
    before = _items_of(ddb, settings.table_name, tenant)

    # The device holds `held` (and `person`), and sends updates and deletes.
    assert _code(lambda: gql.update(tenant, "Person", held["id"], held["changeToken"], {})) == (
        "TENANT_DELETED"
    )
    entries = [
        {
            "updatePerson": {
                "tenantID": tenant,
                "id": held["id"],
                "changeToken": held["changeToken"],
                "changes": {"givenName": "B"},
                "clientMutationID": "cm-update",
            }
        },
        {
            "deletePerson": {
                "tenantID": tenant,
                "id": held["id"],
                "changeToken": held["changeToken"],
                "clientMutationID": "cm-delete",
            }
        },
        {"createPerson": {"tenantID": tenant, "person": {}, "clientMutationID": "cm-create"}},
    ]
    results = _push(gql, tenant, entries)
    assert [(r["status"], r["error"]["code"]) for r in results] == [
        ("REJECTED", "TENANT_DELETED")
    ] * 3
    restore = {
        "tenantID": tenant,
        "id": person["id"],
        "changeToken": person["changeToken"],
        "version": older,
        "clientMutationID": "cm-restore",
    }
    assert _code(lambda: gql.data(RESTORE, {"i": restore})) == "TENANT_DELETED"
    assert _code(lambda: gql.data(EXPORT, {"t": tenant, "e": None})) == "TENANT_DELETED"
    fresh = _upload_vars(tenant, b"bytes sent during the deletion")
    assert _code(lambda: gql.data(REQUEST_UPLOAD, fresh)) == "TENANT_DELETED"

    # Nothing was written: no outcome stored, no usage reserved, no new item.
    after = _items_of(ddb, settings.table_name, tenant)
    assert sorted(map(str, after)) == sorted(map(str, before))


@pytest.mark.slow
def test_every_read_during_a_deletion_is_tenant_deleted(
    gql: GraphQLClient, app_client: TestClient, tenant: str, ddb: Any, settings: Settings
) -> None:
    person, held, _, photo = _half_deleted(gql, tenant, ddb, settings)
    before = _items_of(ddb, settings.table_name, tenant)
    # One entity, removed already or not yet.
    assert _code(lambda: gql.get(tenant, "Person", held["id"])) == "TENANT_DELETED"
    assert _code(lambda: gql.get(tenant, "Person", person["id"])) == "TENANT_DELETED"
    # An attachment, removed already or never uploaded.
    for sha in (photo["sha256"], reference(b"never uploaded")["sha256"]):
        assert _code(lambda: gql.data(ATTACHMENT, {"t": tenant, "sha": sha})) == "TENANT_DELETED"  # noqa: B023
    # A new subscription.
    with _connect(app_client) as ws:
        _acked(ws, tenant)
        _subscribe(ws, "s", tenant)
        message = _receive(ws)
        payload = message["payload"]
        errors = payload if message["type"] == "error" else payload["errors"]
        assert errors[0]["extensions"]["code"] == "TENANT_DELETED", message
    assert sorted(map(str, _items_of(ddb, settings.table_name, tenant))) == sorted(map(str, before))


@pytest.mark.slow
def test_an_upload_presigned_before_a_deletion_is_never_read_by_the_tenant_written_again(
    gql: GraphQLClient, tenant: str, settings: Settings
) -> None:
    """Two uploads presigned before the deletion: one sent between its calls, one
    after its last; another user then writes the tenant id again and uploads."""
    during, late = b"sent while the deletion runs", b"sent after the deletion is done"
    put_during, put_late = _presign(gql, tenant, during), _presign(gql, tenant, late)
    upload(gql, tenant, b"uploaded before")
    gql.create(tenant, "Person", {"givenName": "Ann"})
    service = _service(settings)
    assert not service.delete_tenant(tenant, tenant, "owner", limit=1).done
    _send(put_during, during)
    while not gql.data(DELETE, {"t": tenant, "c": tenant})["deleteTenant"]["done"]:
        pass
    _send(put_late, late)

    # The tenant written again: by another user, with a blob of its own.
    assert gql.sync(tenant).items == []
    gql.create(tenant, "Person", {"givenName": "new life"})
    own = upload(gql, tenant, b"the new tenant's photo")
    assert gql.data(ATTACHMENT, {"t": tenant, "sha": own["sha256"]})["attachment"]["url"]
    for data in (during, late, b"uploaded before"):
        ref = reference(data)
        code = _code(lambda: gql.data(ATTACHMENT, {"t": tenant, "sha": ref["sha256"]}))  # noqa: B023
        assert code == "NOT_FOUND"
        answer = gql.data(
            REQUEST_UPLOAD,
            {"t": tenant, "sha": ref["sha256"], "size": ref["size"], "type": ref["contentType"]},
        )["requestUpload"]
        assert not answer["alreadyPresent"]
        # A write referencing the old bytes is refused: the new tenant holds none.
        body = gql.execute(
            "mutation($input: CreatePersonInput!) "
            "{ createPerson(input: $input) { person { id } } }",
            {"input": {"tenantID": tenant, "person": {"givenName": "x", "photo": ref}}},
        )
        assert body["errors"][0]["extensions"]["code"] == "ATTACHMENT_MISSING"
    # Its quota lacks its own upload and the three requests, and, until their links
    # expire, what the old tenant's may still upload (its three reservations).
    room = BlobUsageTable().room(tenant)
    own_size = len(b"the new tenant's photo")
    old_links = sum(len(d) for d in (during, late, b"uploaded before"))
    reserved = own_size + old_links
    assert room == settings.blob_quota_bytes - reserved - old_links


@pytest.mark.slow
def test_a_device_that_held_the_deleted_tenant_cannot_write_it_again_with_its_old_token(
    gql: GraphQLClient, tenant: str, ddb: Any, settings: Settings
) -> None:
    held = gql.create(tenant, "Person", {"givenName": "Ann"})
    since = gql.sync(tenant).change_token
    assert gql.data(DELETE, {"t": tenant, "c": tenant})["deleteTenant"]["done"]
    create = [{"createPerson": {"tenantID": tenant, "person": {}, "clientMutationID": "c1"}}]
    update = [
        {
            "updatePerson": {
                "tenantID": tenant,
                "id": held["id"],
                "changeToken": held["changeToken"],
                "changes": {"givenName": "B"},
                "clientMutationID": "u1",
            }
        }
    ]
    # Deleted and not written again: an update from before is refused (not NOT_FOUND),
    # and with the device's since so is every entry of its push, creates included.
    assert _push(gql, tenant, update)[0]["error"]["code"] == "TENANT_DELETED"
    for entries in (create, update):
        results = _push(gql, tenant, entries, since=since)
        assert [r["error"]["code"] for r in results] == ["TENANT_DELETED"]
    assert _left_of(ddb, settings.table_name, tenant) == since
    # A device that dropped its copy (no since) writes the tenant again.
    assert _push(gql, tenant, create)[0]["status"] == "APPLIED"
    # Then an old token is refused the same way, whatever the entry.
    for entries in (create, update):
        results = _push(gql, tenant, entries, since=since)
        assert [r["error"]["code"] for r in results] == ["TENANT_DELETED"]
    assert _push(gql, tenant, update)[0]["error"]["code"] == "TENANT_DELETED"
    assert len(gql.sync(tenant).items) == 1


@pytest.mark.slow
def test_the_reference_client_drops_its_outbox_instead_of_writing_the_deleted_tenant_again(
    gql: GraphQLClient,
    tenant: str,
    tmp_path: Path,
    app_client: TestClient,
    ddb: Any,
    settings: Settings,
) -> None:
    device = SyncClient(tmp_path / "d.sqlite3", tenant, _InProcess(app_client, tenant))
    device.create("Person", {"givenName": "Ann"})
    device.sync()
    device.create("Person", {"givenName": "queued"})
    assert gql.data(DELETE, {"t": tenant, "c": tenant})["deleteTenant"]["done"]
    report = device.sync()
    assert report.tenant_deleted and device.items() == {} and device.pending() == 0
    assert _left_of(ddb, settings.table_name, tenant) is not None
    # Having dropped its copy, it writes the tenant again.
    device.create("Person", {"givenName": "new life"})
    device.sync()
    assert [i["givenName"] for i in gql.sync(tenant).items] == ["new life"]


def test_no_outcome_is_stored_once_the_tenant_is_marked(
    gql: GraphQLClient, tenant: str, ddb: Any, settings: Settings
) -> None:
    """A push decided before the mark stores its refusal after it: refused, so no
    outcome outlives the deletion's sweep of the tenant's partition."""
    gql.create(tenant, "Person", {"givenName": "Ann"})
    store = DynamoStore()
    outcome = StoredOutcome("cm-late", "fp", error=NotFound("gone"), expires_at=2**31)
    store.put_outcome(tenant, outcome)  # not marked: stored
    assert store.get_outcome(tenant, "cm-late") is not None
    store.mark_deleting(tenant, "owner", 0)
    late = StoredOutcome("cm-later", "fp", error=NotFound("gone"), expires_at=2**31)
    with pytest.raises(TenantDeleted):
        store.put_outcome(tenant, late)
    assert not any(
        i["sk"]["S"] == "M#cm-later" for i in _items_of(ddb, settings.table_name, tenant)
    )
