"""Whether a tenant has restricted records, as attachments learn it (contract 3.10):
from the blob usage item `requestUpload` and `attachment` read anyway, whose flag the
transaction that first sets the head's sets too, and a tenant's deletion removes with
the head. A tenant that never restricts a record reads its head in neither call."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import httpx2
import pytest

from api.settings import Settings
from api.storage import keys, models
from api.storage.blob_usage import RESTRICTED
from tests.integration.test_visibility_sync import Member
from tests.support.blobs import REQUEST_UPLOAD, reference
from tests.support.gql import GraphQLClient

ATTACHMENT = """
query($t: ID!, $sha: String!, $id: ID) {
  attachment(tenantID: $t, sha256: $sha, id: $id) { sha256 url }
}"""
PUSH = (
    "mutation($i: PushChangesInput!) { pushChanges(input: $i) "
    "{ results { status error { code message } } } }"
)
DELETE_TENANT = (
    "mutation($t: ID!) { deleteTenant(tenantID: $t, confirm: $t) { removedItems done } }"
)


def _flag(ddb: Any, settings: Settings, tenant: str) -> bool | None:
    """The usage item's flag as stored (None: absent, or no item)."""
    key = {"pk": {"S": keys.blobs_pk(tenant)}, "sk": {"S": keys.USAGE_SK}}
    item = ddb.get_item(TableName=settings.table_name, Key=key, ConsistentRead=True)
    found = item.get("Item", {}).get(RESTRICTED)
    return None if found is None else bool(found["BOOL"])


def _offer(member: Member, data: bytes) -> dict[str, Any]:
    ref = reference(data)
    variables = {"t": member.tenant, "sha": ref["sha256"], "size": ref["size"]}
    body = member.call(REQUEST_UPLOAD, {**variables, "type": ref["contentType"]}, None)
    assert not body.get("errors"), body
    return dict(body["data"]["requestUpload"])


def _put(answer: dict[str, Any], data: bytes) -> None:
    put = answer["upload"]
    headers = {h["name"]: h["value"] for h in put["headers"]}
    assert httpx2.put(put["url"], content=data, headers=headers).status_code == 200


@contextlib.contextmanager
def _keys_read() -> Iterator[list[str]]:
    """The partition keys of every GetItem the store's client sends meanwhile."""
    read: list[str] = []

    def collect(params: dict[str, Any], **_: Any) -> None:
        read.append(params["Key"]["pk"]["S"])

    events = models.RecordItem._get_connection().connection.client.meta.events
    events.register("provide-client-params.dynamodb.GetItem", collect)
    try:
        yield read
    finally:
        events.unregister("provide-client-params.dynamodb.GetItem", collect)


def test_a_tenant_wide_tenants_attachment_calls_read_no_head(
    gql: GraphQLClient, tenant: str, ddb: Any, settings: Settings
) -> None:
    """requestUpload and attachment learn the flag from the usage item they read for
    the generation: no GetItem of the head (it was one each, 1 read unit a call), but
    the first call of a tenant whose item has no flag yet."""
    alice = Member(gql, tenant, "alice")
    alice.create("p1", None)  # a tenant-wide record: the tenant has a head
    photo = b"tenant-wide photo"
    _offer(alice, b"a first call")  # its item had no flag: the head's answer kept
    assert _flag(ddb, settings, tenant) is False
    with _keys_read() as read:
        offered = _offer(alice, photo)
        body = alice.call(ATTACHMENT, {"t": tenant, "sha": reference(photo)["sha256"]}, None)
    assert offered["alreadyPresent"] is False
    assert body["errors"][0]["extensions"]["code"] == "NOT_FOUND"  # never uploaded
    assert keys.log_pk(tenant) not in read, read
    assert read == [keys.blobs_pk(tenant)] * 2, read


def test_a_tenants_first_record_restricted_hides_its_blobs_from_the_next_call(
    gql: GraphQLClient, tenant: str, ddb: Any, settings: Settings
) -> None:
    """The tenant's first transaction writes a private record: its usage item's flag
    is set in it, so bob's next requestUpload of alice's bytes is not told they are
    there, and his attachment without a record is refused."""
    alice, bob = Member(gql, tenant, "alice"), Member(gql, tenant, "bob")
    photo = b"alice's private photo"
    answer = _offer(alice, photo)  # before any record: a tenant-wide tenant
    assert answer["alreadyPresent"] is False and _flag(ddb, settings, tenant) is False
    _put(answer, photo)
    assert _offer(bob, photo)["alreadyPresent"] is True  # tenant-wide: deduplicated
    alice.create("mine", [])  # the tenant's first record, private to alice
    assert _flag(ddb, settings, tenant) is True
    assert _offer(bob, photo)["alreadyPresent"] is False
    body = bob.call(ATTACHMENT, {"t": tenant, "sha": reference(photo)["sha256"]}, None)
    assert body["errors"][0]["extensions"]["code"] == "BAD_USER_INPUT", body


@pytest.mark.parametrize("tenant_wide", [0, 1, 2, 3])
def test_a_full_transaction_whose_write_first_restricts_the_tenant_still_fits(
    gql: GraphQLClient, tenant: str, ddb: Any, settings: Settings, tenant_wide: int
) -> None:
    """A push of 100 creates, `tenant_wide` of them first, the rest private: however
    its first transaction is filled, the usage item's write has room beside its
    items (DynamoDB refuses a transaction of more than 100 actions). After a head
    this process wrote (no checks), 33 creates of 3 items each fill the 99 items a
    transaction has for its writes."""
    alice = Member(gql, tenant, "alice")
    alice.create("seed", None)
    entries: list[dict[str, Any]] = [
        {
            "createPerson": {
                "tenantID": tenant,
                "person": {"givenName": f"p{n}"},
                "visibility": None if n < tenant_wide else {"sharedWith": []},
            }
        }
        for n in range(100)
    ]
    data = alice.data(PUSH, {"i": {"tenantID": tenant, "mutations": entries}})
    statuses = [r["status"] for r in data["pushChanges"]["results"]]
    assert statuses == ["APPLIED"] * 100, data["pushChanges"]["results"][:3]
    assert _flag(ddb, settings, tenant) is True


def test_a_deleted_tenant_written_again_tenant_wide_deduplicates_again(
    gql: GraphQLClient, tenant: str, ddb: Any, settings: Settings
) -> None:
    """The flag goes with the head: a tenant deleted after a private record, then
    written again tenant-wide, is a tenant-wide tenant (dedup answers again)."""
    alice = Member(gql, tenant, "alice", role="owner")
    bob = Member(gql, tenant, "bob")
    alice.create("private", [])
    _offer(alice, b"reserved")  # the usage item has a room: its end is an update
    assert _flag(ddb, settings, tenant) is True
    for _ in range(50):
        if alice.data(DELETE_TENANT, {"t": tenant})["deleteTenant"]["done"]:
            break
    else:
        pytest.fail("the deletion did not end")
    assert _flag(ddb, settings, tenant) is None
    alice.create("open", None)
    photo = b"a photo of the new life"
    answer = _offer(alice, photo)
    _put(answer, photo)
    assert _offer(bob, photo)["alreadyPresent"] is True


def test_a_tenant_restricted_by_an_earlier_build_is_answered_by_its_head_once(
    gql: GraphQLClient, tenant: str, ddb: Any, settings: Settings
) -> None:
    """A build from before the usage item's flag set only the head's: its tenants'
    items have none. Bob is not told that alice's bytes are there (the head's flag
    answers), the answer is kept on the item, and the next call reads no head."""
    alice, bob = Member(gql, tenant, "alice"), Member(gql, tenant, "bob")
    photo = b"alice's photo, uploaded before the upgrade"
    _put(_offer(alice, photo), photo)
    alice.create("mine", [])  # private: the head's flag and the item's
    key = {"pk": {"S": keys.blobs_pk(tenant)}, "sk": {"S": keys.USAGE_SK}}
    ddb.update_item(  # as the earlier build left it: the head's flag alone
        TableName=settings.table_name, Key=key, UpdateExpression=f"REMOVE {RESTRICTED}"
    )
    assert _flag(ddb, settings, tenant) is None
    assert _offer(bob, photo)["alreadyPresent"] is False
    assert _flag(ddb, settings, tenant) is True
    with _keys_read() as read:
        assert _offer(bob, photo)["alreadyPresent"] is False
    assert read == [keys.blobs_pk(tenant)], read
