"""Entities referencing blobs (contract 3.10): `Person.photo` and `Reminder.file`
hold `{sha256, size, contentType}`, checked against the blob store before a write
touches the table; a sync carries each with a download link made at read time.

Against the local S3 engine and DynamoDB Local, through the API."""

from __future__ import annotations

import dataclasses
import os
import socket
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx2
import pytest

from api.domain.cursor import CursorCodec
from api.domain.mutations import Mutation
from api.service import SyncService
from api.settings import Settings
from api.storage.blobs import S3Blobs
from api.storage.keys import blob_key
from api.storage.store import DynamoStore
from tests.support import family
from tests.support.blobs import reference, upload
from tests.support.gql import GraphQLClient, bearer
from tests.support.store_state import tenant_state

# A capability beyond the sync core: scripts/test --all (pyproject's `slow`).
pytestmark = pytest.mark.slow

PHOTO = "photo { sha256 size contentType url urlExpiresAt }"
PERSON = f"__typename id changeToken givenName {PHOTO}"
CREATE = f"""
mutation($i: CreatePersonInput!) {{ createPerson(input: $i) {{ person {{ {PERSON} }} }} }}"""
UPDATE = f"""
mutation($i: UpdatePersonInput!) {{ updatePerson(input: $i) {{ person {{ {PERSON} }} }} }}"""
CHANGES = f"""
query($t: ID!) {{ changes(tenantID: $t) {{
  items {{ ... on Person {{ {PERSON} }} ... on Reminder {{ id title file {{ sha256 url }} }} }}
}} }}"""
PUSH_REPLAYED = """
mutation($i: PushChangesInput!) { pushChanges(input: $i) { results {
  status replayed error { code message }
} } }"""
PUSH = f"""
mutation($i: PushChangesInput!) {{ pushChanges(input: $i) {{ results {{
  status error {{ code message }} item {{ ... on Person {{ {PERSON} }} }}
}} }} }}"""


def _create(gql: GraphQLClient, tenant: str, fields: dict[str, Any], **kw: Any) -> dict[str, Any]:
    return gql.execute(CREATE, {"i": {"tenantID": tenant, "person": fields}}, **kw)


def _code(body: dict[str, Any]) -> str:
    assert body.get("data") is None, body
    return str(body["errors"][0]["extensions"]["code"])


def _reference_of(photo: dict[str, Any]) -> dict[str, Any]:
    return {k: photo[k] for k in ("sha256", "size", "contentType")}


def _nothing_written(settings: Settings, tenant: str) -> bool:
    state = tenant_state(settings.dynamodb_client(), settings.table_name, tenant)
    return not state.entities and not state.log and state.head is None


def test_an_uploaded_photo_is_referenced_synced_and_its_link_downloads_the_bytes(
    gql: GraphQLClient, tenant: str
) -> None:
    data = os.urandom(3000)
    ref = upload(gql, tenant, data)
    body = _create(gql, tenant, {"givenName": "Ann", "photo": ref})
    assert "errors" not in body, body
    assert _reference_of(body["data"]["createPerson"]["person"]["photo"]) == ref

    (item,) = gql.execute(CHANGES, {"t": tenant})["data"]["changes"]["items"]
    assert _reference_of(item["photo"]) == ref
    # The link is made at read time, for this tenant's key, and downloads the bytes.
    assert f"/tenants/{tenant}/blobs/{ref['sha256']}" in item["photo"]["url"]
    downloaded = httpx2.get(item["photo"]["url"])
    assert downloaded.status_code == 200 and downloaded.content == data


def test_a_reference_to_bytes_not_uploaded_is_attachment_missing_and_writes_nothing(
    gql: GraphQLClient, tenant: str, settings: Settings
) -> None:
    body = _create(gql, tenant, {"givenName": "Ann", "photo": reference(os.urandom(100))})
    assert _code(body) == "ATTACHMENT_MISSING"
    assert "requestUpload" in body["errors"][0]["message"]
    assert _nothing_written(settings, tenant)


def test_a_reference_whose_size_or_type_differs_is_attachment_missing(
    gql: GraphQLClient, tenant: str, settings: Settings
) -> None:
    data = os.urandom(500)
    ref = upload(gql, tenant, data, "image/jpeg")
    for wrong in ({**ref, "size": ref["size"] + 1}, {**ref, "contentType": "image/png"}):
        assert _code(_create(gql, tenant, {"photo": wrong})) == "ATTACHMENT_MISSING"
    assert _nothing_written(settings, tenant)
    # An update is checked the same way, and leaves the entity as it was.
    person = _create(gql, tenant, {"givenName": "Ann", "photo": ref})["data"]["createPerson"]
    changes = {"photo": {**ref, "size": 1}}
    update = {"tenantID": tenant, "id": person["person"]["id"], "changes": changes}
    update["changeToken"] = person["person"]["changeToken"]
    assert _code(gql.execute(UPDATE, {"i": update})) == "ATTACHMENT_MISSING"
    (item,) = gql.execute(CHANGES, {"t": tenant})["data"]["changes"]["items"]
    assert item["changeToken"] == person["person"]["changeToken"]


def test_another_tenants_blob_cannot_be_referenced(gql: GraphQLClient, tenant: str) -> None:
    ref = upload(gql, tenant, os.urandom(700))
    other = f"{tenant}-b"
    body = _create(gql, other, {"photo": ref}, headers=bearer([tenant, other]))
    assert _code(body) == "ATTACHMENT_MISSING"


def test_a_malformed_reference_is_bad_user_input(gql: GraphQLClient, tenant: str) -> None:
    ref = reference(os.urandom(10))
    for wrong in (
        {**ref, "sha256": "ABC"},
        {**ref, "size": 0},
        {**ref, "contentType": "image/svg+xml"},
    ):
        assert _code(_create(gql, tenant, {"photo": wrong})) == "BAD_USER_INPUT"


def test_a_push_rejects_only_the_entry_whose_attachment_is_missing(
    gql: GraphQLClient, tenant: str, settings: Settings
) -> None:
    ref = upload(gql, tenant, os.urandom(900))
    file = upload(gql, tenant, b"%PDF-1.7 a scan", "application/pdf")
    mutations = [
        {"createPerson": {"tenantID": tenant, "person": {"givenName": "A", "photo": ref}}},
        {"createPerson": {"tenantID": tenant, "person": {"photo": reference(b"never sent")}}},
        {"createReminder": {"tenantID": tenant, "reminder": {"title": "sign", "file": file}}},
    ]
    body = gql.execute(PUSH, {"i": {"tenantID": tenant, "mutations": mutations}})
    results = body["data"]["pushChanges"]["results"]
    assert [r["status"] for r in results] == ["APPLIED", "REJECTED", "APPLIED"]
    assert results[1]["error"]["code"] == "ATTACHMENT_MISSING"
    items = gql.execute(CHANGES, {"t": tenant})["data"]["changes"]["items"]
    assert sorted(i.get("givenName") or i["title"] for i in items) == ["A", "sign"]
    (reminder,) = [i for i in items if i.get("title")]
    assert httpx2.get(reminder["file"]["url"]).content == b"%PDF-1.7 a scan"


def test_a_put_that_keeps_its_assumed_attachment_does_not_check_it_again(
    gql: GraphQLClient, tenant: str, settings: Settings
) -> None:
    """A state-based write (RxDB) sends every field each time: a reference it keeps as
    the server holds it was checked when written, and costs no HeadObject now. Shown
    by removing the blob behind the server's back (only deleting the tenant does)."""
    ref = upload(gql, tenant, os.urandom(400))
    before = {"person": {"givenName": "Ann", "photo": ref}}
    first = [{"putPerson": {"tenantID": tenant, "id": "p1", "assumed": None, "state": before}}]
    body = gql.execute(PUSH, {"i": {"tenantID": tenant, "mutations": first}})
    assert body["data"]["pushChanges"]["results"][0]["status"] == "APPLIED"
    settings.s3_client().delete_object(
        Bucket=settings.blob_bucket, Key=blob_key(tenant, ref["sha256"])
    )

    after = {"person": {"givenName": "Anna", "photo": ref}}
    kept = [{"putPerson": {"tenantID": tenant, "id": "p1", "assumed": before, "state": after}}]
    body = gql.execute(PUSH, {"i": {"tenantID": tenant, "mutations": kept}})
    assert body["data"]["pushChanges"]["results"][0]["status"] == "APPLIED"
    # A changed reference is checked: the blob is gone.
    changed = {"person": {"givenName": "Anna", "photo": {**ref, "contentType": "image/png"}}}
    put = {"tenantID": tenant, "id": "p1", "assumed": after, "state": changed}
    body = gql.execute(PUSH, {"i": {"tenantID": tenant, "mutations": [{"putPerson": put}]}})
    (result,) = body["data"]["pushChanges"]["results"]
    assert (result["status"], result["error"]["code"]) == ("REJECTED", "ATTACHMENT_MISSING")


def test_clearing_a_photo_needs_no_blob(gql: GraphQLClient, tenant: str) -> None:
    ref = upload(gql, tenant, os.urandom(300))
    person = _create(gql, tenant, {"givenName": "Ann", "photo": ref})["data"]["createPerson"]
    update = {
        "tenantID": tenant,
        "id": person["person"]["id"],
        "changeToken": person["person"]["changeToken"],
        "changes": {"photo": None},
    }
    body = gql.execute(UPDATE, {"i": update})
    assert body["data"]["updatePerson"]["person"]["photo"] is None


def test_a_resend_of_an_applied_write_is_its_replay_even_if_the_blob_changed_since(
    gql: GraphQLClient, tenant: str
) -> None:
    """A device that lost the answer resends: it gets the first outcome, never an
    ATTACHMENT_MISSING for a write that applied (here the same bytes were uploaded
    again as another type meanwhile, which replaces the stored type)."""
    data = os.urandom(600)
    ref = upload(gql, tenant, data, "image/jpeg")
    mutation = {
        "createPerson": {
            "tenantID": tenant,
            "id": "p1",
            "person": {"photo": ref},
            "clientMutationID": "m-1",
        }
    }
    push = {"i": {"tenantID": tenant, "mutations": [mutation]}}
    (first,) = gql.execute(PUSH_REPLAYED, push)["data"]["pushChanges"]["results"]
    assert first["status"] == "APPLIED"
    upload(gql, tenant, data, "image/png")
    (again,) = gql.execute(PUSH_REPLAYED, push)["data"]["pushChanges"]["results"]
    assert (again["status"], again["replayed"], again["error"]) == ("APPLIED", True, None)


def test_a_write_keeping_the_photo_its_entity_holds_does_not_check_it_again(
    gql: GraphQLClient, tenant: str, settings: Settings
) -> None:
    ref = upload(gql, tenant, os.urandom(800))
    person = _create(gql, tenant, {"givenName": "Ann", "photo": ref})["data"]["createPerson"]
    settings.s3_client().delete_object(
        Bucket=settings.blob_bucket, Key=blob_key(tenant, ref["sha256"])
    )
    update = {
        "tenantID": tenant,
        "id": person["person"]["id"],
        "changeToken": person["person"]["changeToken"],
        "changes": {"givenName": "Anna", "photo": ref},  # a form sends every field
    }
    body = gql.execute(UPDATE, {"i": update})
    assert body["data"]["updatePerson"]["person"]["givenName"] == "Anna"


def test_a_silent_blob_store_refuses_only_the_entries_with_new_references(
    settings: Settings, tenant: str
) -> None:
    """Each entry whose blob could not be checked is UNAVAILABLE alone (nothing
    written for it), the others apply, and the push answers before the API's 10 s
    Lambda timeout however many blobs wait."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(128)
        stalled = dataclasses.replace(
            settings, s3_endpoint=f"http://127.0.0.1:{silent.getsockname()[1]}"
        )
        blobs = S3Blobs(stalled.s3_client(), stalled.blob_bucket)
        service = SyncService(DynamoStore(), CursorCodec(settings.cursor_secret), blobs=blobs)
        photos = [reference(os.urandom(50)) for _ in range(20)]
        mutations = [
            Mutation("create", family.PERSON, tenant, changes={"photo": p}) for p in photos
        ]
        mutations.insert(3, Mutation("create", family.PERSON, tenant, changes={"givenName": "Bo"}))
        started = time.monotonic()
        results = service.push(tenant, mutations)
        elapsed = time.monotonic() - started
    statuses = [(r.status.value, r.error.code if r.error else None) for r in results]
    assert statuses[3] == ("APPLIED", None)
    assert statuses[:3] + statuses[4:] == [("REJECTED", "UNAVAILABLE")] * 20
    assert elapsed < 10  # a deadline, not a speed


def test_a_link_is_reused_while_ten_of_its_fifteen_minutes_remain(
    gql: GraphQLClient, tenant: str
) -> None:
    ref = upload(gql, tenant, os.urandom(90))
    _create(gql, tenant, {"photo": ref})
    links = [
        gql.execute(CHANGES, {"t": tenant})["data"]["changes"]["items"][0]["photo"]
        for _ in range(2)
    ]
    assert links[0]["url"] == links[1]["url"]
    left = datetime.fromisoformat(links[1]["urlExpiresAt"]) - datetime.now(UTC)
    assert timedelta(minutes=10) <= left <= timedelta(minutes=15)
