"""The sweep of unreferenced blobs and the quota (contract 3.10, docs/attachments.md),
against DynamoDB Local and the local S3 engine (a versioned bucket). The sweep's
clock is injected: S3's LastModified is real, so "now" is set GRACE_S ahead of it
rather than waiting a week."""

from __future__ import annotations

import dataclasses
import itertools
import json
import os
import threading
import time
from datetime import UTC, datetime
from typing import Any

import pytest

from api.domain.attachments import StoredBlob
from api.domain.cursor import CursorCodec
from api.domain.records import Record
from api.service import SyncService, blob_sweep
from api.service.blob_sweep import GRACE_S, MARK_S, BlobSweep, SweepCall
from api.settings import Settings
from api.storage.blob_usage import BlobUsageTable
from api.storage.blobs import S3Blobs
from api.storage.keys import blob_key, registry_shard, tenant_blobs_prefix
from api.storage.store import DynamoStore
from tests.support.blobs import upload
from tests.support.bulk import bulk_people
from tests.support.family import PERSON
from tests.support.gql import GraphQLClient

# A capability beyond the sync core: scripts/test --all (pyproject's `slow`).
pytestmark = pytest.mark.slow

QUOTA = 1024**3


class Clock:
    def __init__(self, at: float) -> None:
        self.at = at

    def __call__(self) -> float:
        return self.at


@pytest.fixture
def s3blobs(settings: Settings) -> S3Blobs:
    return S3Blobs(settings.s3_client(), settings.blob_bucket, hashes_bytes=True)


@pytest.fixture
def clock() -> Clock:
    # Every blob uploaded by the test is older than the grace period by this clock.
    return Clock(time.time() + GRACE_S + 60)


@pytest.fixture
def sweep(s3blobs: S3Blobs, clock: Clock) -> BlobSweep:
    return BlobSweep(s3blobs, BlobUsageTable(), QUOTA, clock_s=clock)


def _pass(sweep: BlobSweep, tenant: str, reads: int = 5000) -> SweepCall:
    """One whole pass of the tenant, call by call; the totals of its calls."""
    total = SweepCall(done=False)
    for _ in range(50):
        call = sweep.sweep(tenant, reads)
        total = SweepCall(
            done=call.done,
            listed=total.listed + call.listed,
            read=total.read + call.read,
            marked=total.marked + call.marked,
            unmarked=total.unmarked + call.unmarked,
            cleared=total.cleared + call.cleared,
            deleted=total.deleted + call.deleted,
        )
        if call.done:
            assert not call.busy
            return total
    raise AssertionError("the pass never ended")


def _versions(settings: Settings, tenant: str) -> list[dict[str, Any]]:
    page = settings.s3_client().list_object_versions(
        Bucket=settings.blob_bucket, Prefix=tenant_blobs_prefix(tenant)
    )
    return list(page.get("Versions", [])) + list(page.get("DeleteMarkers", []))


def _held(s3blobs: S3Blobs, tenant: str, ref: dict[str, Any]) -> bool:
    stored = s3blobs.stat(tenant, ref["sha256"])
    return stored is not None and stored.sha256 == ref["sha256"]


def _service(settings: Settings, blobs: Any) -> SyncService:
    return SyncService(DynamoStore(), CursorCodec(settings.cursor_secret), blobs=blobs)


def test_an_unreferenced_old_blob_is_marked_cleared_then_deleted(
    gql: GraphQLClient,
    tenant: str,
    settings: Settings,
    s3blobs: S3Blobs,
    sweep: BlobSweep,
    clock: Clock,
) -> None:
    ref = upload(gql, tenant, os.urandom(2000))
    first = _pass(sweep, tenant)
    assert (first.listed, first.marked, first.deleted) == (1, 1, 0)
    # Marked: still stored, but no longer held (a write setting it is ATTACHMENT_MISSING).
    assert not _held(s3blobs, tenant, ref)
    assert len(_versions(settings, tenant)) == 1

    # A pass less than MARK_S after the mark decides nothing about it; the next one
    # finds it unreferenced (cleared), and one at least MARK_S after that deletes it.
    expected = [(0, 0, 0), (0, 1, 0), (0, 0, 0), (0, 0, 1)]
    for step, (marked, cleared, deleted) in zip((MARK_S - 60, 120) * 2, expected, strict=True):
        clock.at += step
        call = _pass(sweep, tenant)
        assert (call.marked, call.cleared, call.deleted) == (marked, cleared, deleted)
        assert len(_versions(settings, tenant)) == 1 - deleted


def test_referenced_blobs_live_or_only_in_history_are_never_touched(
    gql: GraphQLClient,
    tenant: str,
    settings: Settings,
    s3blobs: S3Blobs,
    sweep: BlobSweep,
    clock: Clock,
) -> None:
    live, old = upload(gql, tenant, os.urandom(1000)), upload(gql, tenant, os.urandom(1100))
    service = _service(settings, s3blobs)
    service.create(PERSON, tenant, "p1", {"photo": live})
    person = service.create(PERSON, tenant, "p2", {"photo": old})
    # p2's photo is now only in its earlier version, in the history partition.
    service.update(PERSON, tenant, "p2", person.change_token, {"photo": None})
    before = _versions(settings, tenant)
    for _ in range(3):
        call = _pass(sweep, tenant, reads=1)  # one record a call: resumed across calls
        assert (call.marked, call.deleted) == (0, 0)
        clock.at += MARK_S + 1
    assert _versions(settings, tenant) == before
    assert _held(s3blobs, tenant, live) and _held(s3blobs, tenant, old)


def test_a_blob_younger_than_the_grace_period_is_kept(
    gql: GraphQLClient,
    tenant: str,
    settings: Settings,
    s3blobs: S3Blobs,
) -> None:
    ref = upload(gql, tenant, os.urandom(500))
    clock = Clock(time.time() + GRACE_S - 2 * MARK_S)
    young = BlobSweep(s3blobs, BlobUsageTable(), QUOTA, clock_s=clock)
    for _ in range(2):
        assert _pass(young, tenant).marked == 0
        clock.at += MARK_S - 60
    assert _held(s3blobs, tenant, ref)


def test_a_write_that_checked_the_blob_before_its_mark_leaves_it_unmarked_not_deleted(
    gql: GraphQLClient,
    tenant: str,
    settings: Settings,
    s3blobs: S3Blobs,
    sweep: BlobSweep,
    clock: Clock,
) -> None:
    """The race: a write HEADs the blob (held), the first pass reads references (none)
    and marks it, then the write commits. The next pass finds the reference."""
    ref = upload(gql, tenant, os.urandom(1500))
    seen = s3blobs.stat(tenant, ref["sha256"])  # the write's HeadObject, before the mark

    class CheckedBeforeTheMark(S3Blobs):
        def stat(self, tenant_id: str, sha256: str, generation: str = "") -> StoredBlob | None:
            return seen

    assert _pass(sweep, tenant).marked == 1
    assert not _held(s3blobs, tenant, ref)
    late = _service(settings, CheckedBeforeTheMark(settings.s3_client(), settings.blob_bucket))
    late.create(PERSON, tenant, "p1", {"photo": ref})  # commits after the pass's reads

    clock.at += MARK_S + 1
    second = _pass(sweep, tenant)
    assert (second.deleted, second.unmarked) == (0, 1)
    assert _held(s3blobs, tenant, ref)
    # And it stays: later passes see the reference.
    clock.at += MARK_S + 1
    assert _pass(sweep, tenant).marked == 0


def test_a_re_upload_after_the_mark_survives_the_delete_of_the_marked_version(
    gql: GraphQLClient,
    tenant: str,
    settings: Settings,
    s3blobs: S3Blobs,
    sweep: BlobSweep,
    clock: Clock,
) -> None:
    data = os.urandom(1200)
    ref = upload(gql, tenant, data)
    assert _pass(sweep, tenant).marked == 1
    # The device's requestUpload answers an upload (the marked blob is not held).
    again = upload(gql, tenant, data)
    assert _held(s3blobs, tenant, again)
    service = _service(settings, s3blobs)
    clock.at += MARK_S + 1
    assert _pass(sweep, tenant).cleared == 1
    clock.at += MARK_S + 1
    assert _pass(sweep, tenant).deleted == 1  # the marked version, unreferenced
    assert _held(s3blobs, tenant, ref)  # the re-upload is the blob now
    service.create(PERSON, tenant, "p1", {"photo": ref})
    body = (
        settings.s3_client()
        .get_object(Bucket=settings.blob_bucket, Key=blob_key(tenant, ref["sha256"]))["Body"]
        .read()
    )
    assert body == data


def test_a_mark_made_by_a_call_that_died_before_recording_it_is_adopted(
    gql: GraphQLClient,
    tenant: str,
    settings: Settings,
    s3blobs: S3Blobs,
    sweep: BlobSweep,
    clock: Clock,
) -> None:
    ref = upload(gql, tenant, os.urandom(900))
    far = datetime.fromtimestamp(clock.at, tz=UTC)
    version = s3blobs.mark(tenant, ref["sha256"], older_than=far, since=0)  # not recorded
    assert version is not None and not _held(s3blobs, tenant, ref)
    assert _pass(sweep, tenant).marked == 1  # its version, as it stands
    assert [v["VersionId"] for v in _versions(settings, tenant)] == [version]
    clock.at += MARK_S + 1
    assert _pass(sweep, tenant).cleared == 1
    clock.at += MARK_S + 1
    assert _pass(sweep, tenant).deleted == 1
    assert _versions(settings, tenant) == []


def test_deleting_the_tenant_leaves_no_version_or_delete_marker(
    gql: GraphQLClient,
    tenant: str,
    settings: Settings,
    sweep: BlobSweep,
) -> None:
    kept, doomed = upload(gql, tenant, os.urandom(300)), upload(gql, tenant, os.urandom(301))
    assert _pass(sweep, tenant).marked == 2  # versions made by the marks
    client = settings.s3_client()
    client.delete_object(Bucket=settings.blob_bucket, Key=blob_key(tenant, doomed["sha256"]))
    upload(gql, tenant, os.urandom(302))
    assert len(_versions(settings, tenant)) == 4  # two marked, a delete marker, a blob
    del kept
    body = gql.execute(
        """mutation($t: ID!) { deleteTenant(tenantID: $t, confirm: $t) { done } }""",
        {"t": tenant},
    )
    assert body["data"]["deleteTenant"]["done"], body
    assert _versions(settings, tenant) == []
    assert _pass(sweep, tenant).listed == 0  # a deleted tenant: nothing to sweep


REQUEST_UPLOAD = """
mutation($t: ID!, $sha: String!, $size: Int!) {
  requestUpload(tenantID: $t, sha256: $sha, size: $size, contentType: "image/jpeg") {
    alreadyPresent upload { url }
  }
}"""


def test_a_tenant_over_its_quota_is_refused_and_another_is_not(
    settings: Settings, tenant: str
) -> None:
    from starlette.testclient import TestClient

    from api.app import create_app

    small = dataclasses.replace(settings, blob_quota_bytes=5000)
    with TestClient(create_app(small, sockets=False)) as client:
        gql = GraphQLClient(client)
        first = upload(gql, tenant, os.urandom(3000))
        # 3,000 of 5,000 taken: 2,001 more is refused, with nothing presigned.
        body = gql.execute(REQUEST_UPLOAD, {"t": tenant, "sha": "ab" * 32, "size": 2001})
        assert body["data"] == {"requestUpload": None}
        assert body["errors"][0]["extensions"]["code"] == "QUOTA_EXCEEDED"
        other = f"{tenant}-b"
        from tests.support.gql import bearer

        body = gql.execute(
            REQUEST_UPLOAD,
            {"t": other, "sha": "ab" * 32, "size": 2001},
            headers=bearer([other]),
        )
        assert body["data"]["requestUpload"]["upload"]["url"], body
        # What the tenant holds already is no reservation.
        body = gql.execute(REQUEST_UPLOAD, {"t": tenant, "sha": first["sha256"], "size": 3000})
        assert body["data"]["requestUpload"]["alreadyPresent"] is True

        # A sweep that removed the unreferenced blob gives the room back.
        s3blobs = S3Blobs(settings.s3_client(), settings.blob_bucket, hashes_bytes=True)
        clock = Clock(time.time() + GRACE_S + 60)
        sweep = BlobSweep(s3blobs, BlobUsageTable(), small.blob_quota_bytes, clock_s=clock)
        _pass(sweep, tenant)
        # Counted from the bucket: the 2,001 reserved but never uploaded are back.
        assert BlobUsageTable().room(tenant) == 2000
        for _ in range(2):  # cleared, then deleted
            clock.at += MARK_S + 1
            last = _pass(sweep, tenant)
        assert last.deleted == 1
        assert BlobUsageTable().room(tenant) == 5000
        body = gql.execute(REQUEST_UPLOAD, {"t": tenant, "sha": "ab" * 32, "size": 4000})
        assert body["data"]["requestUpload"]["upload"]["url"], body


class OneTenantsRegistry(BlobUsageTable):
    """The registry as one test sees it: its tenant's entry only. The table is every
    test's, whose tenants are all due by the test's clock: sweeping them all made the
    test's time grow with the suite (14 s of the fast loop's 265)."""

    def __init__(self, tenant: str) -> None:
        super().__init__()
        self._tenant = tenant

    def due(self, shard: int, now: int, after: str | None) -> tuple[list[str], str | None]:
        tenants, after = super().due(shard, now, after)
        return [t for t in tenants if t == self._tenant], after


def test_the_scheduled_sweep_finds_tenants_with_blobs_in_the_registry(
    gql: GraphQLClient, tenant: str, s3blobs: S3Blobs, clock: Clock
) -> None:
    ref = upload(gql, tenant, os.urandom(700))
    # Due at once after its first upload: found by the registry's Query of its shard.
    sweep = BlobSweep(s3blobs, OneTenantsRegistry(tenant), QUOTA, clock_s=clock)
    sweep.sweep_due(budget_s=60)
    assert not _held(s3blobs, tenant, ref)  # marked
    for _ in range(2):  # cleared, then deleted
        clock.at += MARK_S + 2
        sweep.sweep_due(budget_s=60)
    assert s3blobs.stat(tenant, ref["sha256"]) is None


def test_a_round_reads_every_shards_first_page_at_once_and_sweeps_what_it_found(
    gql: GraphQLClient, tenant: str, s3blobs: S3Blobs, clock: Clock
) -> None:
    ref = upload(gql, tenant, os.urandom(700))
    # The first shard read alone (it makes the client), the other 15 at once: each
    # waits here until all 15 have asked. Read one after another, the first of them
    # waits in vain, the barrier breaks and every one of them fails.
    together = threading.Barrier(15, timeout=10)
    first_pages: list[int] = []

    class AllAtOnce(OneTenantsRegistry):
        def due(self, shard: int, now: int, after: str | None) -> tuple[list[str], str | None]:
            if after is None:
                first_pages.append(shard)
                if len(first_pages) > 1:
                    together.wait()
            return super().due(shard, now, after)

    BlobSweep(s3blobs, AllAtOnce(tenant), QUOTA, clock_s=clock).sweep_due(
        budget_s=60, start_shard=5
    )
    assert not together.broken
    assert first_pages[0] == 5 and sorted(first_pages) == list(range(16))
    assert not _held(s3blobs, tenant, ref)  # found in its shard, and marked


def test_the_scheduled_lambda_handler_runs_a_round(
    gql: GraphQLClient,
    tenant: str,
    settings: Settings,
    s3blobs: S3Blobs,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """api/sweep_handler.handler as the hourly schedule invokes it, configured from the
    environment like the deployed function: a young blob is listed, not marked."""
    from types import SimpleNamespace

    from api import sweep_handler

    ref = upload(gql, tenant, os.urandom(600))
    context = SimpleNamespace(get_remaining_time_in_millis=lambda: 90_000)
    calls = sweep_handler.handler({}, context)["calls"]
    assert calls >= 1
    assert _held(s3blobs, tenant, ref)
    # Its progress, as an EMF line on stdout (api.metrics): CloudWatch's SweepCalls.
    (line,) = [x for x in capsys.readouterr().out.splitlines() if x.startswith('{"_aws"')]
    document = json.loads(line)
    assert document["function"] == "sweep" and document["SweepCalls"] == [calls]
    assert BlobUsageTable().room(tenant) == QUOTA - 600  # as reserved, and as counted


class TornHistory(BlobUsageTable):
    """The sweep's reads while an update that moves a version from its entity to the
    history is half applied (docs/ordering.md: a Query may see part of a transaction
    still being applied): the entity's new version is seen, the history item not."""

    def records_page(
        self, tenant_id: str, partition: str, after: str | None, limit: int
    ) -> tuple[list[Record], str | None]:
        records, last = super().records_page(tenant_id, partition, after, limit)
        return ([], last) if partition == "history" else (records, last)


def test_a_reference_missed_by_a_torn_read_is_found_by_the_next_read_before_any_delete(
    gql: GraphQLClient,
    tenant: str,
    settings: Settings,
    s3blobs: S3Blobs,
    clock: Clock,
) -> None:
    """A write that HEADed the blob before its mark commits a reference after the
    marking pass's reads; an update then moves that version to the history, and the
    next pass's reads see the move half applied. One read must not delete it."""
    ref = upload(gql, tenant, os.urandom(1300))
    seen = s3blobs.stat(tenant, ref["sha256"])

    class CheckedBeforeTheMark(S3Blobs):
        def stat(self, tenant_id: str, sha256: str, generation: str = "") -> StoredBlob | None:
            return seen

    sweep = BlobSweep(s3blobs, BlobUsageTable(), QUOTA, clock_s=clock)
    assert _pass(sweep, tenant).marked == 1
    late = _service(settings, CheckedBeforeTheMark(settings.s3_client(), settings.blob_bucket))
    person = late.create(PERSON, tenant, "p1", {"photo": ref})
    _service(settings, s3blobs).update(PERSON, tenant, "p1", person.change_token, {"photo": None})

    clock.at += MARK_S + 1
    torn = BlobSweep(s3blobs, TornHistory(), QUOTA, clock_s=clock)
    assert (_pass(torn, tenant).cleared, _versions(settings, tenant) != []) == (1, True)
    clock.at += MARK_S + 1
    third = _pass(sweep, tenant)  # the move is complete: the history holds the reference
    assert (third.unmarked, third.deleted) == (1, 0)
    assert _held(s3blobs, tenant, ref)


def test_a_pass_acts_on_s3_in_bounded_calls(
    gql: GraphQLClient,
    tenant: str,
    settings: Settings,
    sweep: BlobSweep,
    clock: Clock,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(blob_sweep, "ACTS_PER_CALL", 2)
    for i in range(5):
        upload(gql, tenant, os.urandom(400 + i))
    for action in ("marked", "cleared", "deleted"):
        calls: list[SweepCall] = []
        while not calls or not calls[-1].done:
            calls.append(sweep.sweep(tenant))
        done = [getattr(c, action) for c in calls]
        # Marks and deletes (S3 actions) two a call; clearing costs S3 nothing.
        assert sum(done) == 5 and max(done) == (5 if action == "cleared" else 2), done
        clock.at += MARK_S + 1
    assert _versions(settings, tenant) == []


def test_a_tenant_whose_sweep_fails_fails_alone(
    gql: GraphQLClient,
    tenant: str,
    settings: Settings,
    s3blobs: S3Blobs,
    clock: Clock,
) -> None:
    broken, healthy = f"{tenant}-a", f"{tenant}-b"
    refs = {t: upload(gql, t, os.urandom(800)) for t in (broken, healthy)}

    class Failing(S3Blobs):
        def list_blobs(
            self, tenant_id: str, after: str | None, limit: int = 1000, generation: str = ""
        ) -> Any:
            if tenant_id == broken:
                raise KeyError("a bug, or an error nobody translated")
            return super().list_blobs(tenant_id, after, limit, generation)

    failing = Failing(settings.s3_client(), settings.blob_bucket, hashes_bytes=True)
    BlobSweep(failing, BlobUsageTable(), QUOTA, clock_s=clock).sweep_due(budget_s=60)
    assert not _held(s3blobs, healthy, refs[healthy])  # marked: the round went on
    assert _held(s3blobs, broken, refs[broken])


def test_a_tenant_re_created_while_the_sweep_forgets_it_stays_registered(tenant: str) -> None:
    usage = BlobUsageTable()
    # Registered, and its item says so.
    assert usage.reserve(tenant, 100, QUOTA, int(time.time())) is not None
    shard = registry_shard(tenant)
    usage.forget(tenant)  # as a sweep that read no usage item a moment before would
    listed: list[str] = []
    after: str | None = None
    while True:
        page, after = usage.due(shard, int(time.time()), after)
        listed += page
        if after is None:
            break
    assert tenant in listed


class Logged(BlobSweep):
    """The sweep, noting each call of a tenant's pass and what it did."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.calls: list[tuple[str, SweepCall]] = []

    def sweep(self, tenant_id: str, reads: int | None = None) -> SweepCall:
        call = super().sweep(tenant_id) if reads is None else super().sweep(tenant_id, reads)
        self.calls.append((tenant_id, call))
        return call


def test_a_large_tenant_first_in_its_shard_takes_a_turn_a_round_not_its_whole_pass(
    gql: GraphQLClient,
    tenant: str,
    s3blobs: S3Blobs,
    clock: Clock,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A tenant whose pass reads many records (600, at 100 a call here) is first in its
    shard: the round gives it one turn (TURN_CALLS calls), then the tenant after it,
    whose stale blob is marked; the large pass resumes where it stood."""
    monkeypatch.setattr(blob_sweep, "READS_PER_CALL", 100)
    small = f"{tenant}-s"
    shard = registry_shard(small)
    # Sorts before every "t-..." tenant of the registry: first in its shard.
    large = next(
        f"0-{tenant}-{n}" for n in itertools.count() if registry_shard(f"0-{tenant}-{n}") == shard
    )
    refs = {t: upload(gql, t, os.urandom(900)) for t in (large, small)}
    bulk_people(large, 600)
    sweep = Logged(s3blobs, BlobUsageTable(), QUOTA, clock_s=clock)
    sweep.sweep_due(budget_s=120)

    ours = [(t, call) for t, call in sweep.calls if t in (large, small)]
    turn = blob_sweep.TURN_CALLS
    first_small = [t for t, _ in ours].index(small)
    assert [t for t, _ in ours[:first_small]] == [large] * turn, ours
    assert not any(call.done for _, call in ours[:first_small])
    assert sum(call.read for _, call in ours[:first_small]) <= turn * 100
    # Both marked in this round: the small tenant in its turn, the large one in turns
    # the round's time left gave it after every due tenant had its first.
    assert not _held(s3blobs, small, refs[small])
    assert not _held(s3blobs, large, refs[large])
    large_calls = [call for t, call in ours if t == large]
    assert large_calls[-1].done and sum(c.read for c in large_calls) == 600


def test_a_reference_read_split_across_rounds_sees_what_existed_throughout(
    gql: GraphQLClient,
    tenant: str,
    settings: Settings,
    s3blobs: S3Blobs,
    clock: Clock,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A pass's reads of references span calls (rounds, hours apart): a reference that
    exists when they begin is found though writes move it meanwhile. A write whose
    HeadObject came before the mark references the marked blob from an entity the
    reads have not reached yet; between two calls an update moves that version to
    the history (read after the entities): the blob is referenced, unmarked, never
    deleted."""
    monkeypatch.setattr(blob_sweep, "READS_PER_CALL", 100)
    ref = upload(gql, tenant, os.urandom(1100))
    seen = s3blobs.stat(tenant, ref["sha256"])

    class CheckedBeforeTheMark(S3Blobs):
        def stat(self, tenant_id: str, sha256: str, generation: str = "") -> StoredBlob | None:
            return seen

    bulk_people(tenant, 300)  # p000000 ... p000299
    sweep = BlobSweep(s3blobs, BlobUsageTable(), QUOTA, clock_s=clock)
    assert _pass(sweep, tenant, reads=1000).marked == 1
    late = _service(settings, CheckedBeforeTheMark(settings.s3_client(), settings.blob_bucket))
    person = late.create(PERSON, tenant, "p000150b", {"photo": ref})

    clock.at += MARK_S + 1
    assert sweep.sweep(tenant).listed == 1  # the listing; the reads begin next
    assert sweep.sweep(tenant).read == 100  # p000000 ... p000099
    # Between rounds: the version that references the blob moves to the history.
    _service(settings, s3blobs).update(
        PERSON, tenant, "p000150b", person.change_token, {"photo": None}
    )
    total = _pass(sweep, tenant)
    assert (total.unmarked, total.deleted, total.cleared) == (1, 0, 0)
    assert _held(s3blobs, tenant, ref)
