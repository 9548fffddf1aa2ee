"""Deleting a tenant (contract 3.8) against DynamoDB Local: every item goes, in
resumable calls; meanwhile and afterwards its writes and syncs are TENANT_DELETED;
its live subscriptions end; a tenant written again starts empty."""

from __future__ import annotations

import contextlib
import logging
import re
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx2
import pytest
from starlette.testclient import TestClient
from sync_client import SyncClient, SyncReport

from api.domain.cursor import CursorCodec
from api.service import SyncService
from api.settings import Settings
from api.storage import keys
from api.storage.store import DynamoStore
from tests.integration.test_export import EXPORT
from tests.integration.test_realtime import _acked, _connect, _receive, _subscribe
from tests.support.bulk import bulk_people
from tests.support.gql import GraphQLClient, GraphQLError, bearer, post_data
from tests.support.servers import api_server, crash
from tests.support.small_calls_app import SMALL_CALLS_APP

# Export calls here are asserted by what they did, not when they stopped.
# A capability beyond the sync core: scripts/test --all (pyproject's `slow`).
pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("unhurried_exports")]

DELETE = (
    "mutation($t: ID!, $c: ID!) { deleteTenant(tenantID: $t, confirm: $c) { removedItems done } }"
)
PUSH = (
    "mutation($i: PushChangesInput!) { pushChanges(input: $i) "
    "{ results { status error { code } } } }"
)


def _tenant_partitions(tenant: str) -> list[str]:
    """Every partition the key design (the table in `api.storage.keys`) gives a
    tenant, read from that table itself: a partition added there is checked here
    without a change to this test."""
    patterns = sorted(set(re.findall(r"\bT#<tenant>[#A-Z]*", keys.__doc__ or "")))
    assert "T#<tenant>" in patterns and "T#<tenant>#LOG" in patterns, patterns
    return [p.replace("<tenant>", tenant) for p in patterns]


def _items_of(ddb: Any, table: str, tenant: str) -> list[dict[str, Any]]:
    """Every item of the tenant: each of its partitions, and its registry entry
    (consistent Queries of its own keys, never a Scan of the table every test
    shares, whose cost would grow with the suite)."""
    found: list[dict[str, Any]] = []
    for pk in _tenant_partitions(tenant):
        kwargs: dict[str, Any] = {
            "TableName": table,
            "ConsistentRead": True,
            "KeyConditionExpression": "pk = :pk",
            "ExpressionAttributeValues": {":pk": {"S": pk}},
        }
        while True:
            page = ddb.query(**kwargs)
            found += page["Items"]
            if "LastEvaluatedKey" not in page:
                break
            kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]
    registry = {"pk": {"S": keys.registry_pk(keys.registry_shard(tenant))}, "sk": {"S": tenant}}
    entry = ddb.get_item(TableName=table, Key=registry, ConsistentRead=True).get("Item")
    return found + ([entry] if entry else [])


def _left_of(ddb: Any, table: str, tenant: str) -> str | None:
    """What a finished deletion leaves of the tenant: nothing but its fence (`keys`:
    the highest token the tenant had, which the tenant written again starts above);
    that token (None: the tenant had none)."""
    items = _items_of(ddb, table, tenant)
    fence = {"pk": {"S": keys.fence_pk(tenant)}, "sk": {"S": keys.FENCE_SK}}
    assert all({"pk": i["pk"], "sk": i["sk"]} == fence for i in items), items
    return str(items[0][keys.FENCE_ATTRIBUTE]["S"]) if items else None


def _code(call: Callable[[], object]) -> str:
    """The code of the error `call` gets."""
    with pytest.raises(GraphQLError) as raised:
        call()
    return str(raised.value.errors[0]["extensions"]["code"])


def _fill(gql: GraphQLClient, tenant: str) -> str:
    """People, an update (history), a deletion, outcomes, an export; returns the
    device's token."""
    people = [gql.create(tenant, "Person", {"givenName": f"p{i}"}) for i in range(6)]
    gql.update(tenant, "Person", people[0]["id"], people[0]["changeToken"], {"givenName": "x"})
    gql.delete(tenant, "Person", people[1]["id"], people[1]["changeToken"])
    entries = [
        {
            "createReminder": {
                "tenantID": tenant,
                "clientMutationID": f"m{i}",
                "reminder": {"title": "t"},
            }
        }
        for i in range(3)
    ]
    gql.execute(PUSH, {"i": {"tenantID": tenant, "mutations": entries}})
    assert gql.data(EXPORT, {"t": tenant, "e": None})["exportTenant"]["done"]
    token = gql.sync(tenant).change_token
    assert token is not None
    return token


def test_an_owner_deletes_every_item_in_resumable_calls_and_the_tenant_starts_again_empty(
    gql: GraphQLClient,
    app_client: TestClient,
    tenant: str,
    ddb: Any,
    settings: Settings,
    caplog: pytest.LogCaptureFixture,
) -> None:
    since = _fill(gql, tenant)
    stored = len(_items_of(ddb, settings.table_name, tenant))
    assert stored > 20

    # A call that stops after 7 items, as a crash or a timeout would: the mark stays.
    service = SyncService(DynamoStore(), CursorCodec(settings.cursor_secret))
    first = service.delete_tenant(tenant, tenant, "owner-sub", limit=7)
    assert (first.removed, first.done) == (7, False)
    for call in (
        lambda: gql.sync(tenant, since=since),
        lambda: gql.sync(tenant),
        lambda: gql.create(tenant, "Person", {"givenName": "late"}),
    ):
        assert _code(call) == "TENANT_DELETED"
    pushed = gql.execute(
        PUSH,
        {
            "i": {
                "tenantID": tenant,
                "mutations": [{"createPerson": {"tenantID": tenant, "person": {}}}],
            }
        },
    )
    assert pushed["data"]["pushChanges"]["results"][0]["error"]["code"] == "TENANT_DELETED"

    with caplog.at_level(logging.WARNING, logger="api.service.tenancy"):
        done = gql.data(DELETE, {"t": tenant, "c": tenant})["deleteTenant"]
    assert done == {"removedItems": stored, "done": True}
    assert _left_of(ddb, settings.table_name, tenant) == since
    (line,) = [r.getMessage() for r in caplog.records if "tenant deleted" in r.getMessage()]
    assert f"tenant={tenant}" in line and "asked_by=owner-sub" in line
    assert f"items_removed={stored}" in line and "asked_at=20" in line

    # Afterwards: a device's old token is refused; the tenant written again is empty.
    assert _code(lambda: gql.sync(tenant, since=since)) == "TENANT_DELETED"
    again = gql.create(tenant, "Person", {"givenName": "new life"})
    assert [i["id"] for i in gql.sync(tenant).items] == [again["id"]]
    assert _code(lambda: gql.sync(tenant, since=since)) == "TENANT_DELETED"


def test_only_an_owner_deletes_and_only_with_the_tenant_repeated(
    gql: GraphQLClient, tenant: str, ddb: Any, settings: Settings
) -> None:
    _fill(gql, tenant)
    before = _items_of(ddb, settings.table_name, tenant)
    for entry in (f"{tenant}:writer", f"{tenant}:reader", f"{tenant}-other"):
        body = gql.execute(DELETE, {"t": tenant, "c": tenant}, headers=bearer([entry]))
        assert body["errors"][0]["extensions"]["code"] == "FORBIDDEN", entry
    wrong = gql.execute(DELETE, {"t": tenant, "c": tenant + "x"})
    assert wrong["errors"][0]["extensions"]["code"] == "BAD_USER_INPUT"
    assert _items_of(ddb, settings.table_name, tenant) == before


def test_a_live_subscription_ends_with_tenant_deleted(
    app_client: TestClient, gql: GraphQLClient, tenant: str
) -> None:
    person = gql.create(tenant, "Person", {"givenName": "Ann"})
    with _connect(app_client) as ws:
        _acked(ws, tenant)
        _subscribe(ws, "s", tenant, since=person["changeToken"])
        assert gql.data(DELETE, {"t": tenant, "c": tenant})["deleteTenant"]["done"]
        message = _receive(ws)
        # An error of the event stream: a `next` carrying it, then `complete`.
        assert message["payload"]["errors"][0]["extensions"]["code"] == "TENANT_DELETED"
        assert _receive(ws) == {"id": "s", "type": "complete"}


def test_the_reference_client_drops_a_deleted_tenant_and_its_outbox(
    gql: GraphQLClient, tenant: str, tmp_path: Path, app_client: TestClient
) -> None:
    device = SyncClient(tmp_path / "d.sqlite3", tenant, _InProcess(app_client, tenant))
    device.create("Person", {"givenName": "Ann"})
    device.sync()
    device.create("Person", {"givenName": "unsent"})
    assert gql.data(DELETE, {"t": tenant, "c": tenant})["deleteTenant"]["done"]
    report = SyncReport()
    device.pull(report)
    assert report.tenant_deleted and device.items() == {} and device.pending() == 0
    assert device.store.since() is None


class _InProcess:
    """The reference client's transport over the in-process app."""

    def __init__(self, client: TestClient, tenant: str) -> None:
        self._client, self._headers = client, bearer([tenant])

    def execute(self, query: str, variables: dict[str, Any]) -> dict[str, Any]:
        response = self._client.post(
            "/graphql", json={"query": query, "variables": variables}, headers=self._headers
        )
        body: dict[str, Any] = response.json()
        return body


@pytest.mark.slow
def test_a_deletion_survives_a_crash_of_the_server(
    settings: Settings, tenant: str, ddb: Any
) -> None:
    bulk_people(tenant, 1_500)
    stored = len(_items_of(ddb, settings.table_name, tenant))
    headers = bearer([tenant], sub="owner")

    def call(base: str) -> dict[str, Any]:
        result: dict[str, Any] = post_data(base, DELETE, {"t": tenant, "c": tenant}, headers)[
            "deleteTenant"
        ]
        return result

    with api_server(settings, app=SMALL_CALLS_APP) as first:
        # The server dies in the middle of the first call (3,001 items: 1,000 a call,
        # DELETED_PER_CALL, so the second server needs 2 calls at least).
        lowest = _lowest_sk(ddb, settings.table_name, tenant)
        dying = threading.Thread(target=lambda: _swallow(lambda: call(first)))
        dying.start()
        # Evidence, not a timer: the call has removed items (the lowest is gone).
        # However loaded the machine, it has then not removed more than its 1,000.
        deadline = time.monotonic() + 120
        while _lowest_sk(ddb, settings.table_name, tenant) == lowest:
            assert time.monotonic() < deadline, "the deletion removed nothing in 120 s"
            time.sleep(0.02)
        crash(first)
        dying.join()
    left = len(_items_of(ddb, settings.table_name, tenant))
    assert 0 < left < stored  # it died halfway
    with api_server(settings, app=SMALL_CALLS_APP) as second:
        assert _code_over_http(second, tenant, headers) == "TENANT_DELETED"
        calls = 1
        while not (done := call(second))["done"]:
            calls += 1
    assert _left_of(ddb, settings.table_name, tenant) is not None
    # A call that dies leaves at most one page of 1,000 removed items uncounted.
    assert stored - 1000 <= done["removedItems"] <= stored and calls >= 2


def _lowest_sk(ddb: Any, table: str, tenant: str) -> str | None:
    """The first key of the tenant's entity partition, which a deletion empties first."""
    items = ddb.query(
        TableName=table,
        ConsistentRead=True,
        Limit=1,
        KeyConditionExpression="pk = :pk",
        ExpressionAttributeValues={":pk": {"S": keys.tenant_pk(tenant)}},
    )["Items"]
    return str(items[0]["sk"]["S"]) if items else None


def _code_over_http(base: str, tenant: str, headers: dict[str, str]) -> str:
    body = httpx2.post(
        f"{base}/graphql",
        json={
            "query": "query($t: ID!) { changes(tenantID: $t) { cursor } }",
            "variables": {"t": tenant},
        },
        headers=headers,
        timeout=30,
    ).json()
    return str(body["errors"][0]["extensions"]["code"])


def _swallow(call: Callable[[], object]) -> None:
    with contextlib.suppress(httpx2.TransportError, AssertionError, ValueError):
        call()  # the server dies under the call


def test_the_deletion_removes_every_export_file_version_marker_and_upload_in_s3(
    gql: GraphQLClient, tenant: str, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A tenant with a finished export, one by a multipart upload, one in the middle of
    its multipart upload, an overwritten object and a delete marker under its
    exports/ prefix, and a blob: after deleteTenant, ListObjectVersions and
    ListMultipartUploads find nothing under either of its prefixes; another tenant's
    export stays."""
    from api.service import export_publishing
    from api.service import exports as export_rules
    from api.storage.keys import tenant_prefixes
    from tests.integration.test_export import _service, written_job
    from tests.support.blobs import upload

    s3 = settings.s3_client()
    bucket = settings.blob_bucket
    exports_prefix = tenant_prefixes(tenant)[1]
    assert gql.data(EXPORT, {"t": tenant, "e": None})["exportTenant"]["done"]
    upload(gql, tenant, b"a photo of the tenant")
    service = _service(settings)
    monkeypatch.setattr(export_rules, "UPLOADS_PER_CALL", 1)
    small, _ = written_job(tenant, parts=2)
    monkeypatch.setattr(export_publishing, "SINGLE_PUT_MAX_BYTES", 0)
    assert service.exports.export_tenant(tenant, small.export_id, "owner").done
    pending, _ = written_job(tenant, parts=20)
    assert not service.exports.export_tenant(tenant, pending.export_id, "owner").done
    s3.put_object(Bucket=bucket, Key=f"{exports_prefix}stray", Body=b"1")
    s3.put_object(Bucket=bucket, Key=f"{exports_prefix}stray", Body=b"2")
    s3.delete_object(Bucket=bucket, Key=f"{exports_prefix}stray")  # a delete marker
    other = f"{tenant}x"  # an id that starts with this one's: not under its prefixes
    assert service.exports.export_tenant(other, None, "owner").done

    def left(prefix: str) -> tuple[list[Any], list[Any], list[Any]]:
        versions = s3.list_object_versions(Bucket=bucket, Prefix=prefix)
        uploads = s3.list_multipart_uploads(Bucket=bucket, Prefix=prefix)
        return (
            versions.get("Versions", []),
            versions.get("DeleteMarkers", []),
            uploads.get("Uploads", []),
        )

    versions, markers, uploads = left(exports_prefix)
    assert len(versions) == 4 and len(markers) == 1 and len(uploads) == 1
    for _ in range(10):
        if gql.data(DELETE, {"t": tenant, "c": tenant})["deleteTenant"]["done"]:
            break
    for prefix in tenant_prefixes(tenant):
        assert left(prefix) == ([], [], []), prefix
    assert len(left(tenant_prefixes(other)[1])[0]) == 1
