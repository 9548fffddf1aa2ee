"""The reference client's attachments (contract 3.10) against a real server and the
local S3 engine: bytes attached offline, uploaded before the first push that
references them, deduplicated, uploaded again when the server answers
ATTACHMENT_MISSING, and downloads checked against their sha256.

Faults between the device and S3 come from a real HTTP proxy in front of the S3
engine (`tests/support/blob_faults.py`); nothing is mocked."""

from __future__ import annotations

import os
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sync_client import CorruptBlob, HttpTransport, SyncClient, TransportError
from sync_client.client import PushOutcome

from api.settings import Settings
from api.storage.keys import blob_key
from tests.convergence.checker import SECRET, environment
from tests.convergence.faults import FaultyTransport
from tests.support.blob_faults import BlobProxy, ProxiedBlobs, blob_proxy
from tests.support.gql import bearer

# A capability beyond the sync core: scripts/test --all (pyproject's `slow`).
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def url(settings: Settings) -> Iterator[str]:
    with environment(settings) as ([server_url], _, _):
        yield server_url


@pytest.fixture
def proxy(settings: Settings) -> Iterator[BlobProxy]:
    assert settings.s3_endpoint is not None
    with blob_proxy(settings.s3_endpoint) as running:
        yield running


class Recorder:
    """The device's GraphQL operations and blob requests, in the order it made them."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.outcomes: list[PushOutcome] = []


class RecordingTransport(FaultyTransport):
    def __init__(self, inner: HttpTransport, recorder: Recorder) -> None:
        super().__init__(inner, random.Random(1), {})
        self.recorder = recorder

    def execute(self, query: str, variables: dict[str, Any]) -> dict[str, Any]:
        if self.online:
            self.recorder.calls.append(query.split("(")[0].split()[-1])  # Push, Pull, ...
        return super().execute(query, variables)


class RecordingBlobs(ProxiedBlobs):
    def __init__(self, proxy: BlobProxy, recorder: Recorder) -> None:
        super().__init__(proxy)
        self.recorder = recorder

    def put(self, url: str, data: bytes, headers: dict[str, str]) -> None:
        self.recorder.calls.append("PUT")
        super().put(url, data, headers)

    def get(self, url: str) -> bytes:
        self.recorder.calls.append("GET")
        return super().get(url)


def _device(
    url: str, proxy: BlobProxy, tmp_path: Path, name: str, tenant: str, **kw: Any
) -> tuple[SyncClient, Recorder]:
    token = bearer([tenant], secret=SECRET)["Authorization"].split()[1]
    recorder = Recorder()
    client = SyncClient(
        tmp_path / f"{name}.sqlite3",
        tenant,
        RecordingTransport(HttpTransport(url, token), recorder),
        blobs=RecordingBlobs(proxy, recorder),
        on_push_result=recorder.outcomes.append,
        **kw,
    )
    return client, recorder


def _offline(client: SyncClient, offline: bool = True) -> None:
    assert isinstance(client.transport, FaultyTransport)
    client.transport.online = not offline


def test_bytes_attached_offline_are_uploaded_before_the_push_that_references_them(
    url: str, proxy: BlobProxy, tmp_path: Path, tenant: str
) -> None:
    phone, calls = _device(url, proxy, tmp_path, "phone", tenant)
    _offline(phone)
    photo = os.urandom(5000)
    ref = phone.attach(photo, "image/jpeg")
    ann = phone.create("Person", {"givenName": "Ann", "photo": ref})
    assert phone.get(ann) == {"__typename": "Person", "givenName": "Ann", "photo": ref}
    with pytest.raises(TransportError):
        phone.sync()
    assert phone.pending() == 1 and phone.open(ref["sha256"]) == photo  # all local
    _offline(phone, False)
    report = phone.sync()
    assert calls.calls[:3] == ["Upload", "PUT", "Push"]
    assert (report.uploaded, report.applied, phone.pending()) == (1, 1, 0)

    tablet, tablet_calls = _device(url, proxy, tmp_path, "tablet", tenant)
    tablet.sync()
    assert tablet.get(ann) == phone.get(ann)
    assert tablet.open(ref["sha256"]) == photo
    assert tablet_calls.calls[-2:] == ["Attachment", "GET"]
    before = len(tablet_calls.calls)
    assert tablet.open(ref["sha256"]) == photo  # now from its own store
    assert len(tablet_calls.calls) == before


@pytest.mark.parametrize(
    "fault",
    # One path in the client: a refused connection and a 403 run with the slow tests.
    [
        pytest.param("refuse", marks=pytest.mark.slow),
        "503",
        pytest.param("403", marks=pytest.mark.slow),
    ],
)
def test_a_failed_upload_keeps_the_entry_and_those_behind_it_queued(
    url: str, proxy: BlobProxy, tmp_path: Path, tenant: str, fault: str
) -> None:
    phone, _ = _device(url, proxy, tmp_path, "phone", tenant)
    first = phone.create("Person", {"givenName": "first"})
    ref = phone.attach(os.urandom(800), "image/png")
    second = phone.create("Person", {"givenName": "second", "photo": ref})
    third = phone.create("Reminder", {"title": "third"})
    proxy.fail_next(fault)
    with pytest.raises(TransportError):
        phone.sync()
    # The entry before it went; it and the one behind it wait, in order.
    assert [e.entity_id for e in phone.store.entries()] == [second, third]
    assert phone.store.server_version(first) is not None
    report = phone.sync()
    assert (report.uploaded, report.applied, phone.pending()) == (1, 2, 0)
    tokens = [phone.store.server_version(i).token for i in (first, second, third)]  # type: ignore[union-attr]
    assert tokens == sorted(tokens)  # applied in the order they were made
    assert [r[2] for r in proxy.requests("PUT")] == [fault, "forward"]


def test_an_upload_whose_answer_was_lost_is_not_sent_again(
    url: str, proxy: BlobProxy, tmp_path: Path, tenant: str
) -> None:
    phone, _ = _device(url, proxy, tmp_path, "phone", tenant)
    ref = phone.attach(os.urandom(900), "image/jpeg")
    phone.create("Person", {"photo": ref})
    proxy.fail_next("lose_response")
    with pytest.raises(TransportError):
        phone.sync()
    report = phone.sync()  # S3 holds it: requestUpload says so
    assert (report.already_present, report.uploaded, report.applied) == (1, 0, 1)
    assert len(proxy.requests("PUT")) == 1


def test_the_same_bytes_attached_twice_upload_once(
    url: str, proxy: BlobProxy, tmp_path: Path, tenant: str
) -> None:
    phone, _ = _device(url, proxy, tmp_path, "phone", tenant)
    photo = os.urandom(1200)
    first = phone.attach(photo, "image/jpeg")
    phone.create("Person", {"givenName": "a", "photo": first})
    second = phone.attach(photo, "image/jpeg")
    assert second == first
    phone.create("Person", {"givenName": "b", "photo": second})
    report = phone.sync()
    assert (report.uploaded, report.applied) == (1, 2)
    phone.create("Reminder", {"title": "later", "file": phone.attach(photo, "image/jpeg")})
    report = phone.sync()
    assert (report.uploaded, report.already_present, report.applied) == (0, 0, 1)
    assert len(proxy.requests("PUT")) == 1


def test_attachment_missing_uploads_again_from_the_local_copy_and_resends(
    url: str, proxy: BlobProxy, tmp_path: Path, tenant: str, settings: Settings
) -> None:
    phone, recorded = _device(url, proxy, tmp_path, "phone", tenant)
    photo = os.urandom(700)
    ref = phone.attach(photo, "image/jpeg")
    ann = phone.create("Person", {"givenName": "Ann", "photo": ref})
    phone.sync()
    # The server loses the blob (only deleting the tenant does; here, behind its back).
    settings.s3_client().delete_object(
        Bucket=settings.blob_bucket, Key=blob_key(tenant, ref["sha256"])
    )
    phone.create("Reminder", {"title": "same photo", "file": ref})
    report = phone.sync()
    retried, applied = recorded.outcomes[-2:]
    results = [(o.status, (o.error or {}).get("code")) for o in (retried, applied)]
    assert results == [("REJECTED", "ATTACHMENT_MISSING"), ("APPLIED", None)]
    assert retried.entry.client_mutation_id == applied.entry.client_mutation_id  # resent
    assert (report.reuploads, report.uploaded, report.rejected) == (1, 1, [])
    assert phone.pending() == 0 and phone.get(ann) is not None
    assert len(proxy.requests("PUT")) == 2


def test_attachment_missing_without_the_bytes_here_is_rejected(
    url: str, proxy: BlobProxy, tmp_path: Path, tenant: str, settings: Settings
) -> None:
    phone, _ = _device(url, proxy, tmp_path, "phone", tenant)
    ref = phone.attach(os.urandom(600), "image/jpeg")
    phone.create("Person", {"photo": ref})
    phone.sync()
    settings.s3_client().delete_object(
        Bucket=settings.blob_bucket, Key=blob_key(tenant, ref["sha256"])
    )
    tablet, _ = _device(url, proxy, tmp_path, "tablet", tenant)
    tablet.sync()  # it holds the reference, never the bytes
    tablet.create("Reminder", {"title": "copied", "file": ref})
    report = tablet.sync()
    (rejected,) = report.rejected
    assert rejected["error"]["code"] == "ATTACHMENT_MISSING" and tablet.pending() == 0
    assert report.reuploads == 0


def test_a_retry_refused_again_waits_for_the_next_sync(
    url: str, proxy: BlobProxy, tmp_path: Path, tenant: str
) -> None:
    phone, _ = _device(url, proxy, tmp_path, "phone", tenant)
    ref = phone.attach(os.urandom(500), "image/jpeg")
    person = phone.create("Person", {"photo": ref})
    behind = phone.create("Reminder", {"title": "behind it"})
    proxy.fail_next("swallow", "swallow")  # 200 to the PUT, nothing stored: twice
    report = phone.sync()
    # Refused alone (contract 3.10): the reminder behind it applies in the same push.
    assert (report.reuploads, report.applied, report.rejected) == (1, 1, [])
    assert [e.entity_id for e in phone.store.entries()] == [person]
    assert phone.store.server_version(behind) is not None
    report = phone.sync()  # once per sync: uploaded again, for real this time
    assert (report.uploaded, report.applied, phone.pending()) == (1, 1, 0)
    assert [r[2] for r in proxy.requests("PUT")] == ["swallow", "swallow", "forward"]


def test_downloaded_bytes_that_do_not_match_the_sha256_are_refused(
    url: str, proxy: BlobProxy, tmp_path: Path, tenant: str
) -> None:
    phone, _ = _device(url, proxy, tmp_path, "phone", tenant)
    photo = os.urandom(400)
    ref = phone.attach(photo, "image/jpeg")
    phone.create("Person", {"photo": ref})
    phone.sync()
    tablet, _ = _device(url, proxy, tmp_path, "tablet", tenant)
    tablet.sync()
    proxy.fail_next("corrupt")
    with pytest.raises(CorruptBlob):
        tablet.open(ref["sha256"])
    assert tablet.store.blob(ref["sha256"]) is None  # nothing kept
    assert tablet.open(ref["sha256"]) == photo


def test_uploaded_bytes_stay_as_a_bounded_cache(
    url: str, proxy: BlobProxy, tmp_path: Path, tenant: str
) -> None:
    phone, calls = _device(url, proxy, tmp_path, "phone", tenant, blob_cache_bytes=1000)
    kept, dropped = os.urandom(900), os.urandom(950)
    ref_dropped = phone.attach(dropped, "image/jpeg")
    phone.create("Person", {"photo": ref_dropped})
    phone.sync()
    ref_kept = phone.attach(kept, "image/jpeg")
    phone.create("Person", {"photo": ref_kept})
    phone.sync()  # both uploaded, 1,850 bytes: the least recently used goes
    assert phone.store.blob(ref_kept["sha256"]) is not None
    assert phone.store.blob(ref_dropped["sha256"]) is None
    assert phone.open(ref_dropped["sha256"]) == dropped and calls.calls[-1] == "GET"


def test_attach_refuses_what_the_server_would(tmp_path: Path) -> None:
    client = SyncClient(tmp_path / "d.sqlite3", "t", HttpTransport("http://127.0.0.1:9", "x"))
    with pytest.raises(ValueError, match="content type"):
        client.attach(b"<svg/>", "image/svg+xml")
    with pytest.raises(ValueError, match="bytes"):
        client.attach(b"", "image/png")
