"""A tenant id deleted and written again, over and over (contract 3.8, issue 48,
findings 2 to 4): a late call of one deletion touches nothing of a later life of the
tenant; the tenant written again through a server whose clock is behind starts above
every token it ever had; and its bytes in S3 under all its generations stay within
one quota. Against DynamoDB Local and the local S3 engine."""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from starlette.testclient import TestClient

from api.app import create_app
from api.domain.attachments import UPLOAD_LINK_S
from api.service.blob_sweep import BlobSweep
from api.settings import Settings
from api.storage import keys
from api.storage.blob_usage import BlobUsageTable
from api.storage.blobs import S3Blobs
from tests.integration.test_tenant_deletion import DELETE, _code
from tests.integration.test_tenant_deletion_edges import _push, _send, _service
from tests.support.blobs import REQUEST_UPLOAD, reference, upload
from tests.support.gql import GraphQLClient, GraphQLError

# A capability beyond the sync core: scripts/test --all (pyproject's `slow`).
pytestmark = pytest.mark.slow

ATTACHMENT = "query($t: ID!, $sha: String!) { attachment(tenantID: $t, sha256: $sha) { size } }"


def _delete(gql: GraphQLClient, tenant: str) -> None:
    for _ in range(20):
        if gql.data(DELETE, {"t": tenant, "c": tenant})["deleteTenant"]["done"]:
            return
    raise AssertionError("the deletion never ended")


class _LateCall:
    """A `deleteTenant` call run in a thread of its own and held just before its last
    step: at its first DynamoDB call after a Query of the tenant's log partition that
    found nothing left but the head (the step that ends the deletion, whatever it
    reads or writes first). The test runs other calls meanwhile, then lets it go."""

    def __init__(self, inject: Any, settings: Settings, tenant: str) -> None:
        self._log_pk = keys.log_pk(tenant)
        self._queried: str | None = None  # the partition of its last Query
        self._armed = False
        self.held = threading.Event()
        self.go = threading.Event()
        self._answer: Any = None
        self._error: BaseException | None = None
        service = _service(settings)

        def run() -> None:
            try:
                self._answer = service.delete_tenant(tenant, tenant, "late-owner")
            except BaseException as exc:  # reported by `finish`
                self._error = exc

        self._thread = threading.Thread(target=run, daemon=True)
        inject("provide-client-params.dynamodb", self._before)
        inject("after-call.dynamodb.Query", self._after_query)

    def _mine(self) -> bool:
        return threading.get_ident() == self._thread.ident and not self.held.is_set()

    def _before(self, params: dict[str, Any], model: Any, **_: Any) -> None:
        if not self._mine():
            return
        if model.name == "Query":
            self._queried = params.get("ExpressionAttributeValues", {}).get(":pk", {}).get("S")
        elif self._armed:
            self.held.set()
            assert self.go.wait(60), "the test never let the late call go"

    def _after_query(self, parsed: dict[str, Any], **_: Any) -> None:
        if self._mine() and self._queried == self._log_pk:
            self._armed = all(i["sk"]["S"] == keys.HEAD_SK for i in parsed.get("Items", []))

    def start(self) -> None:
        self._thread.start()
        assert self.held.wait(60), "the late call never reached its last step"

    def finish(self) -> Any:
        self.go.set()
        self._thread.join(60)
        assert not self._thread.is_alive()
        if self._error is not None:
            raise self._error
        return self._answer


@pytest.fixture
def late_call(inject: Any, settings: Settings, tenant: str) -> Iterator[_LateCall]:
    call = _LateCall(inject, settings, tenant)
    yield call
    call.go.set()  # never leave its thread waiting


@pytest.mark.parametrize("meanwhile", ["written again", "deleted again"])
def test_a_late_call_of_a_deletion_touches_nothing_of_the_tenant_written_or_deleted_again(
    gql: GraphQLClient, tenant: str, settings: Settings, late_call: _LateCall, meanwhile: str
) -> None:
    """Two calls of one deletion (an app's retry, two devices of the owner): the late
    one is held before its last step while the other ends the deletion and a member
    writes the tenant again (and uploads a photo), or then the owner starts deleting
    it again. Let go, the late call finds its deletion over and touches nothing."""
    gql.create(tenant, "Person", {"givenName": "before"})
    upload(gql, tenant, b"a photo before")
    late_call.start()
    _delete(gql, tenant)  # the other call ends the deletion
    entry = {"createPerson": {"tenantID": tenant, "person": {"givenName": "after"}}}
    (result,) = _push(gql, tenant, [entry])
    assert result["status"] == "APPLIED"
    photo = upload(gql, tenant, b"a photo after")
    written = gql.sync(tenant)
    (person,) = written.items
    if meanwhile == "deleted again":
        service = _service(settings)
        assert not service.delete_tenant(tenant, tenant, "owner", limit=0).done  # marked

    assert late_call.finish().done

    if meanwhile == "written again":
        # The write survives: its sync and `person` agree, from the start and from it.
        assert [i["id"] for i in gql.sync(tenant).items] == [person["id"]]
        assert gql.sync(tenant, since=written.change_token).items == []
        assert gql.get(tenant, "Person", person["id"]) == person
        # So does its blob usage: its photo is there, its room what it reserved.
        assert gql.data(ATTACHMENT, {"t": tenant, "sha": photo["sha256"]})["attachment"]
    else:
        # The deletion under way keeps its marks: every read and write is refused.
        assert _code(lambda: gql.sync(tenant)) == "TENANT_DELETED"
        assert _code(lambda: gql.get(tenant, "Person", person["id"])) == "TENANT_DELETED"
        ref = reference(b"during the second deletion")
        request = {"t": tenant, "sha": ref["sha256"], "size": ref["size"], "type": "image/jpeg"}
        assert _code(lambda: gql.data(REQUEST_UPLOAD, request)) == "TENANT_DELETED"
        _delete(gql, tenant)
        assert gql.sync(tenant).items == []


def test_a_tenant_written_again_through_a_server_whose_clock_is_behind_starts_above_its_old_tokens(
    gql: GraphQLClient, tenant: str, settings: Settings
) -> None:
    """The device holds the tenant at `since`; the tenant is deleted, and written again
    through a server whose clock is a minute behind. Its first token is above every
    token the deleted tenant had: the device's old tokens are refused everywhere."""
    held = gql.create(tenant, "Person", {"givenName": "held"})
    since = gql.sync(tenant).change_token
    assert since is not None
    _delete(gql, tenant)
    behind_settings = dataclasses.replace(settings, clock_offset_ms=-60_000)
    with TestClient(create_app(behind_settings, sockets=False)) as client:
        behind = GraphQLClient(client)
        first = behind.create(tenant, "Person", {"givenName": "new life"})
    assert first["changeToken"] > since, (first["changeToken"], since)
    # The device's queued create, pushed with its since: refused, written nowhere.
    queued = {"createPerson": {"tenantID": tenant, "person": {"givenName": "queued"}}}
    (refused,) = _push(gql, tenant, [queued], since=since)
    assert (refused["status"], refused["error"]["code"]) == ("REJECTED", "TENANT_DELETED")
    # Its sync from since is refused, not answered with the new tenant's changes.
    assert _code(lambda: gql.sync(tenant, since=since)) == "TENANT_DELETED"
    # An older client's update without since, of an entity of the deleted tenant.
    update = {
        "updatePerson": {
            "tenantID": tenant,
            "id": held["id"],
            "changeToken": held["changeToken"],
            "changes": {"givenName": "edited offline"},
        }
    }
    (answer,) = _push(gql, tenant, [update])
    assert answer["error"]["code"] == "TENANT_DELETED"
    assert [i["id"] for i in gql.sync(tenant).items] == [first["id"]]


QUOTA = 65_536
_BLOB = 16_384  # four blobs fill the quota


def _bytes_under(settings: Settings, prefix: str) -> int:
    """Every byte the bucket holds under `prefix`: each version of each key."""
    s3 = settings.s3_client()
    total = 0
    for page in s3.get_paginator("list_object_versions").paginate(
        Bucket=settings.blob_bucket, Prefix=prefix
    ):
        total += sum(v["Size"] for v in page.get("Versions", []))
    return total


def _reserve_all(gql: GraphQLClient, tenant: str, cycle: int) -> list[tuple[dict[str, Any], bytes]]:
    """requestUpload of new blobs until the quota refuses: their presigned PUTs."""
    puts: list[tuple[dict[str, Any], bytes]] = []
    for n in range(QUOTA // _BLOB + 1):
        data = bytes([cycle, n]) * (_BLOB // 2)
        ref = reference(data)
        request = {"t": tenant, "sha": ref["sha256"], "size": ref["size"], "type": "image/jpeg"}
        try:
            answer = gql.data(REQUEST_UPLOAD, request)["requestUpload"]
        except GraphQLError as exc:
            assert exc.code == "QUOTA_EXCEEDED"
            break
        puts.append((answer["upload"], data))
    return puts


def test_a_tenant_ids_bytes_under_all_its_generations_stay_within_one_quota(
    settings: Settings, tenant: str
) -> None:
    """Two cycles of "reserve the whole quota, delete the tenant", then every
    presigned PUT sent: what lands under the old generations is within one quota,
    because their reservations count against the next generation until their links
    expire. A sweep after that removes every generation but the current one and gives
    the room back."""
    small = dataclasses.replace(settings, blob_quota_bytes=QUOTA)
    with TestClient(create_app(small, sockets=False)) as client:
        gql = GraphQLClient(client)
        puts: list[tuple[dict[str, Any], bytes]] = []
        for cycle in range(2):
            puts += _reserve_all(gql, tenant, cycle)
            _delete(gql, tenant)
        for put, data in puts:
            _send(put, data)
        prefix = keys.tenant_blobs_prefix(tenant)
        assert _bytes_under(settings, prefix) <= QUOTA
        assert len(puts) == QUOTA // _BLOB

        # A sweep removes the old generations; while their links may still upload,
        # the room stays without what they reserved. Once every link has expired, a
        # sweep gives it back: the whole quota again.
        s3blobs = S3Blobs(settings.s3_client(), settings.blob_bucket, hashes_bytes=True)
        now = time.time()
        for at, room in ((now, 0), (now + UPLOAD_LINK_S + 2 * 3600, QUOTA)):
            sweep = BlobSweep(s3blobs, BlobUsageTable(), QUOTA, clock_s=lambda: at)  # noqa: B023
            for _ in range(20):
                if sweep.sweep(tenant).done:
                    break
            assert _bytes_under(settings, prefix) == 0
            assert BlobUsageTable().room(tenant) == room
        upload(gql, tenant, b"x" * QUOTA)


def test_a_sweep_that_read_the_generation_before_a_deletion_ended_removes_nothing_of_the_new(
    gql: GraphQLClient, settings: Settings, tenant: str
) -> None:
    """A sweep call reads the tenant's generation; before it removes the "other"
    generations, the tenant is deleted to the end and written again with a photo
    (a new generation). The photo stays: the sweep removes only what it listed while
    the generation was still the one it read."""
    upload(gql, tenant, b"a photo of the first life")
    photo = reference(b"a photo of the second life")

    class Racing(S3Blobs):
        def remove_other_generations(self, *args: Any, **kwargs: Any) -> tuple[int, bool]:
            _delete(gql, tenant)
            upload(gql, tenant, b"a photo of the second life")
            return super().remove_other_generations(*args, **kwargs)

    racing = Racing(settings.s3_client(), settings.blob_bucket, hashes_bytes=True)
    BlobSweep(racing, BlobUsageTable(), settings.blob_quota_bytes).sweep(tenant)
    assert gql.data(ATTACHMENT, {"t": tenant, "sha": photo["sha256"]})["attachment"]
