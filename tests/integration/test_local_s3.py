"""The local S3 engine (moto's server): started by the session, the bucket created,
reported by /healthz, never outliving its parent, its state kept across a restart
exactly, in bounded memory."""

from __future__ import annotations

import dataclasses
import hashlib
import os
import signal
import subprocess
import sys
import textwrap
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx2
import pytest
from starlette.testclient import TestClient

from api import health
from api.app import create_app
from api.domain.attachments import MAX_BLOB_BYTES, Blob, uploader_tag
from api.settings import PROJECT_ROOT, Settings
from api.storage.blobs import S3Blobs
from api.storage.keys import blob_key, export_key
from scripts.local_engine import free_port
from scripts.local_s3 import LocalS3, ensure_bucket
from tests.integration.test_local_engine import _alive

# A capability beyond the sync core: scripts/test --all (pyproject's `slow`).
pytestmark = pytest.mark.slow


def test_the_bucket_is_created_once(settings: Settings) -> None:
    client = settings.s3_client()
    assert ensure_bucket(client, "bucket-made-twice", settings.aws_region) is True
    assert ensure_bucket(client, "bucket-made-twice", settings.aws_region) is False
    assert "bucket-made-twice" in {b["Name"] for b in client.list_buckets()["Buckets"]}


HEALTH_TOKEN = "health-token-for-tests"


def test_healthz_without_a_token_says_only_whether_the_server_is_healthy(
    app_client: TestClient,
) -> None:
    """Issue 37: no token, no table, bucket or server id; a wrong token is no token."""
    for headers in ({}, {"Authorization": "Bearer not-the-health-token"}):
        response = app_client.get("/healthz", headers=headers)
        assert response.status_code == 200
        assert response.json() == {"status": "ok"}


def test_healthz_reports_the_table_and_the_blob_store_to_the_health_token(
    settings: Settings,
) -> None:
    with TestClient(create_app(dataclasses.replace(settings, health_token=HEALTH_TOKEN))) as c:
        body = c.get("/healthz", headers={"Authorization": f"Bearer {HEALTH_TOKEN}"}).json()
        assert c.get("/healthz").json() == {"status": "ok"}
    assert body["status"] == "ok" and body["reachable"] is True
    assert body["table"] == "sync-test"
    assert body["blobs"] == {"bucket": "sync-test-blobs", "reachable": True}
    assert "realtime" in body


def test_healthz_compares_the_token_as_bytes_before_any_call(
    settings: Settings, monkeypatch: pytest.MonkeyPatch, inject: Any
) -> None:
    """Issue 48, finding 5: a token outside ASCII was a 500 with a traceback
    (`compare_digest` on `str`), after the S3 and DynamoDB calls. Now a wrong one is
    no token, the right one (any UTF-8) is the token, and who asked is known first."""
    calls: list[str] = []

    def called(name: str, func: Any) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            calls.append(name)
            return func(*args, **kwargs)

        return call

    monkeypatch.setattr(health, "authorized", called("authorized", health.authorized))
    monkeypatch.setattr(S3Blobs, "reachable", called("S3", S3Blobs.reachable))
    inject("before-call.dynamodb", called("DynamoDB", lambda **_: None))
    token = "gesundheit-\u00fcber-\u2713"
    app = create_app(dataclasses.replace(settings, health_token=token), sockets=False)
    with TestClient(app) as client:
        for sent, details in (("Bearer gr\u00fc\u00dfe", False), (f"Bearer {token}", True)):
            calls.clear()
            response = client.get("/healthz", headers={b"authorization": sent.encode()})
            assert response.status_code == 200, response.text
            assert ("table" in response.json()) is details, response.json()
            assert calls == ["authorized", "S3", "DynamoDB"]


def test_healthz_says_when_the_blob_store_is_unreachable(settings: Settings) -> None:
    nowhere = dataclasses.replace(
        settings, s3_endpoint=f"http://127.0.0.1:{free_port()}", health_token=HEALTH_TOKEN
    )
    with TestClient(create_app(nowhere, sockets=False)) as client:
        response = client.get("/healthz")
        detailed = client.get("/healthz", headers={"Authorization": f"Bearer {HEALTH_TOKEN}"})
    # Sync still works without the blob store: 200, "degraded", and (to the health
    # token) which part is down.
    assert response.status_code == 200 and response.json() == {"status": "degraded"}
    assert detailed.status_code == 200
    body = detailed.json()
    assert body["status"] == "degraded" and body["reachable"] is True
    assert body["blobs"] == {"bucket": "sync-test-blobs", "reachable": False}


@pytest.mark.slow
def test_the_s3_engine_dies_with_a_killed_parent() -> None:
    script = textwrap.dedent(
        """
        import time
        from scripts.local_engine import free_port
        from scripts.local_s3 import LocalS3
        engine = LocalS3(free_port())
        engine.start()
        print(engine.pid, flush=True)
        time.sleep(600)
        """
    )
    parent = subprocess.Popen(
        [sys.executable, "-c", script], cwd=PROJECT_ROOT, stdout=subprocess.PIPE, text=True
    )
    try:
        assert parent.stdout is not None
        pid = int(parent.stdout.readline())
        assert _alive(pid)
        parent.send_signal(signal.SIGKILL)
        parent.wait()
        deadline = time.monotonic() + 15
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _alive(pid), "the S3 engine outlived its killed parent"
    finally:
        parent.kill()
        parent.wait()
        if parent.stdout is not None:
            parent.stdout.close()


def test_a_stopped_engine_frees_its_port() -> None:
    engine = LocalS3(free_port())
    with engine:
        pid = engine.pid
        assert pid is not None and _alive(pid)
    assert engine.pid is None and not _alive(pid)


def test_the_engine_lists_the_requests_it_answered(
    blob_engine: LocalS3, settings: Settings
) -> None:
    """What the bench counts an attachment's S3 requests with (scripts/benchmarks)."""
    client = settings.s3_client()
    key = f"listed/{free_port()}"
    before = len(blob_engine.requests())
    client.put_object(Bucket=settings.blob_bucket, Key=key, Body=b"x")
    client.head_object(Bucket=settings.blob_bucket, Key=key)
    with pytest.raises(client.exceptions.ClientError):
        client.head_object(Bucket=settings.blob_bucket, Key=f"{key}-absent")
    # Each is listed once its answer is back (the line is written with the status).
    listed = blob_engine.requests()[before:]
    path = f"/{settings.blob_bucket}/{key}"
    assert [(m, p.split("?")[0], s) for m, p, s in listed] == [
        ("PUT", path, 200),
        ("HEAD", path, 200),
        ("HEAD", f"{path}-absent", 404),
    ]


def _stored_engine(store: Path) -> tuple[LocalS3, S3Blobs, Any]:
    engine = LocalS3(free_port(), store)
    engine.start()
    settings = dataclasses.replace(Settings.from_env({}), s3_endpoint=engine.endpoint)
    client = settings.s3_client()
    ensure_bucket(client, "kept-blobs", settings.aws_region)
    return engine, S3Blobs(client, "kept-blobs", hashes_bytes=True), client


def _upload(blobs: S3Blobs, tenant: str, data: bytes) -> Blob:
    blob = Blob(tenant, hashlib.sha256(data).hexdigest(), len(data), "image/jpeg")
    upload = blobs.presign_upload(blob, expires_in=900)
    # A generous timeout: on a loaded machine (2 cores shared) an upload can take seconds.
    answer = httpx2.put(upload.url, content=data, headers=upload.headers, timeout=60)
    assert answer.status_code == 200
    return blob


def test_stored_blobs_survive_a_restart_and_deleted_ones_stay_deleted(tmp_path: Path) -> None:
    """scripts/serve's engine: a presigned upload is there after a restart, with its
    checksum, type and version id; a deleted object is not; a partial last record (an
    engine killed while it wrote) is dropped."""
    store = tmp_path / "s3"
    engine, blobs, client = _stored_engine(store)
    try:
        kept = _upload(blobs, "t1", b"kept across the restart")
        held = blobs.stat("t1", kept.sha256)
        assert held is not None and held.sha256 == kept.sha256
        version = client.head_object(Bucket="kept-blobs", Key=blob_key("t1", kept.sha256))
        gone = _upload(blobs, "t2", b"deleted before the restart")
        client.delete_object(Bucket="kept-blobs", Key=blob_key("t2", gone.sha256))
    finally:
        engine.stop()
    stored = store / "store.bin"
    whole = stored.stat().st_size
    with stored.open("ab") as file:
        file.write(b"\x00\x00\x00\x01\x00\x00\x00\x00\x00\x00\x10\x00torn")
    engine, blobs, client = _stored_engine(store)
    try:
        assert blobs.stat("t1", kept.sha256) == held
        again = client.head_object(Bucket="kept-blobs", Key=blob_key("t1", kept.sha256))
        assert again["VersionId"] == version["VersionId"]
        assert again["LastModified"] == version["LastModified"]
        assert blobs.stat("t2", gone.sha256) is None
    finally:
        engine.stop()
    # Cut off, then the file rewritten with the live state alone.
    assert stored.stat().st_size <= whole


@pytest.mark.slow
def test_large_and_concurrent_uploads_survive_a_restart(tmp_path: Path) -> None:
    """One upload of 10 MiB (the largest blob) and 48 of 300 KB on 16 connections: of
    these, moto's own recorder glued 4 to 20 entries together in each of 6 runs, and its
    replay stopped at the first; the store's records are written one request at a time
    (scripts/moto_s3.py)."""
    store = tmp_path / "s3"
    engine, blobs, client = _stored_engine(store)
    try:
        kept = [_upload(blobs, "t1", os.urandom(MAX_BLOB_BYTES))]
        with ThreadPoolExecutor(16) as pool:
            kept += pool.map(lambda _: _upload(blobs, "t2", os.urandom(300_000)), range(48))
        held = {b.sha256: blobs.stat(b.tenant_id, b.sha256) for b in kept}
        assert all(s is not None and s.sha256 == sha for sha, s in held.items())
    finally:
        engine.stop()
    engine, blobs, client = _stored_engine(store)
    try:
        assert {b.sha256: blobs.stat(b.tenant_id, b.sha256) for b in kept} == held
    finally:
        engine.stop()


def test_the_bucket_answers_a_browser_upload_and_download_from_its_origins(
    blob_engine: LocalS3, settings: Settings
) -> None:
    """The bucket's CORS (serverless.yml's rule, `api/storage/blob_cors.json`): a
    preflight of the presigned PUT with exactly the headers the upload lists, from an
    allowed origin, is answered with them; another origin is refused (403, as S3)."""
    client, bucket, origin = settings.s3_client(), "cors-checked", "https://app.example"
    ensure_bucket(client, bucket, settings.aws_region, (origin,))
    (rule,) = client.get_bucket_cors(Bucket=bucket)["CORSRules"]
    assert rule["AllowedOrigins"] == [origin] and rule["MaxAgeSeconds"] == 3600
    blobs = S3Blobs(client, bucket)
    data = b"a photo from a browser"
    # Naming its uploader, as in a tenant with restricted records: every header.
    sha = hashlib.sha256(data).hexdigest()
    blob = Blob("t1", sha, len(data), "image/jpeg", uploader=uploader_tag("alice"))
    upload = blobs.presign_upload(blob, expires_in=900)
    # What a browser asks for: every header it sets but Content-Length, its own.
    asked = sorted(h.lower() for h in upload.headers if h.lower() != "content-length")
    assert asked == sorted(rule["AllowedHeaders"])
    preflight = {
        "Access-Control-Request-Method": "PUT",
        "Access-Control-Request-Headers": ",".join(asked),
    }
    answer = httpx2.request("OPTIONS", upload.url, headers={"Origin": origin, **preflight})
    assert answer.status_code == 200
    assert answer.headers["access-control-allow-origin"] == origin
    assert "PUT" in answer.headers["access-control-allow-methods"].replace(" ", "").split(",")
    assert set(asked) <= set(
        answer.headers["access-control-allow-headers"].replace(" ", "").split(",")
    )
    assert answer.headers["access-control-max-age"] == "3600"
    elsewhere = {"Origin": "https://elsewhere.example", **preflight}
    answer = httpx2.request("OPTIONS", upload.url, headers=elsewhere)
    assert answer.status_code == 403 and "access-control-allow-origin" not in answer.headers
    # The requests themselves: their answers may be read by the page (and its ETag).
    put = httpx2.put(upload.url, content=data, headers={"Origin": origin, **upload.headers})
    assert put.status_code == 200 and put.headers["access-control-allow-origin"] == origin
    url, _ = blobs.presign_download("t1", blob.sha256, expires_in=900)
    get = httpx2.get(url, headers={"Origin": origin})
    assert get.content == data and get.headers["access-control-allow-origin"] == origin
    assert "etag" in get.headers["access-control-expose-headers"].lower()
    # Applied once: another start finds the rule and writes nothing.
    before = len(blob_engine.requests())
    ensure_bucket(client, bucket, settings.aws_region, (origin,))
    # (HEAD the bucket, GET its versioning, lifecycle and CORS: reads only.)
    assert [m for m, _, _ in blob_engine.requests()[before:]] == ["HEAD", "GET", "GET", "GET"]
    ensure_bucket(client, bucket, settings.aws_region, ())
    with pytest.raises(client.exceptions.ClientError):
        client.get_bucket_cors(Bucket=bucket)


def _versions(client: Any, bucket: str, prefix: str) -> list[str]:
    page = client.list_object_versions(Bucket=bucket, Prefix=prefix)
    return [v["Key"] for v in page.get("Versions", []) + page.get("DeleteMarkers", [])]


def test_objects_deleted_by_version_id_stay_deleted_after_a_restart(tmp_path: Path) -> None:
    """Finding 6 of issue 36: the sweep deletes a blob by the version id of its mark,
    and deleting a tenant deletes every version by id; moto's recorder replayed those
    deletes against versions the replay had given other ids, so the blob, the tenant's
    blob and its export's file were all back after a restart."""
    store = tmp_path / "s3"
    engine, blobs, client = _stored_engine(store)
    try:
        swept = _upload(blobs, "t1", b"unreferenced, swept")
        since = int(time.time())
        mark = blobs.mark("t1", swept.sha256, datetime.now(UTC) + timedelta(days=1), since)
        assert mark is not None
        blobs.delete_marked("t1", swept.sha256, mark)
        assert _versions(client, "kept-blobs", blob_key("t1", swept.sha256)) == []
        hidden = _upload(blobs, "t1", b"deleted by its key: a delete marker")
        client.delete_object(Bucket="kept-blobs", Key=blob_key("t1", hidden.sha256))
        kept = _upload(blobs, "t1", b"still referenced")
        gone = _upload(blobs, "t2", b"a deleted tenant's blob")
        client.put_object(Bucket="kept-blobs", Key=export_key("t2", "e1"), Body=b"rows")
        assert blobs.remove_all("t2", 1000) == 2
    finally:
        engine.stop()
    engine, blobs, client = _stored_engine(store)
    try:
        assert blobs.stat("t1", swept.sha256) is None
        assert _versions(client, "kept-blobs", blob_key("t1", swept.sha256)) == []
        assert blobs.stat("t1", hidden.sha256) is None
        assert blobs.stat("t1", kept.sha256) is not None
        assert blobs.stat("t2", gone.sha256) is None
        assert _versions(client, "kept-blobs", "tenants/t2/") == []
        assert _versions(client, "kept-blobs", "exports/t2/") == []
    finally:
        engine.stop()


def _rss(pid: int) -> int:
    """The resident memory of a process, in bytes (Linux)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def test_listing_versions_keeps_no_memory(blob_engine: LocalS3, settings: Settings) -> None:
    """Finding 6 of issue 36: moto 5.2.5 deep-copied every version of the bucket at each
    ListObjectVersions and kept each copy for good (its models track every instance
    they create): 6 MB of objects added 6 MB to the engine at every listing, and a
    listing took seconds, then longer than the client waits (deleteTenant UNAVAILABLE)."""
    client, bucket = settings.s3_client(), "listed-versions"
    ensure_bucket(client, bucket, settings.aws_region)
    body = os.urandom(20_000)
    with ThreadPoolExecutor(4) as pool:
        list(
            pool.map(
                lambda n: client.put_object(Bucket=bucket, Key=f"k/{n:04}", Body=body), range(300)
            )
        )
    assert blob_engine.pid is not None
    client.list_object_versions(Bucket=bucket, Prefix="k/")  # any first-use allocation
    before = _rss(blob_engine.pid)
    for _ in range(10):
        page = client.list_object_versions(Bucket=bucket, Prefix="k/")
        assert len(page["Versions"]) == 300
    grown = _rss(blob_engine.pid) - before
    # Ten listings of 6 MB of objects kept 60 MB before; a margin for the allocator.
    assert grown < 15_000_000, f"the engine grew by {grown:,} bytes over 10 listings"


@pytest.mark.slow
def test_multipart_uploads_survive_a_restart(tmp_path: Path) -> None:
    """An export's file over 5 MiB is a multipart upload: a completed one is kept, one
    under way goes on after a restart, an aborted one stays aborted (moto's recorder
    replayed none of them: the replayed upload had another id)."""
    store = tmp_path / "s3"
    engine, _, client = _stored_engine(store)
    part = os.urandom(5 * 1024 * 1024)
    bucket = "kept-blobs"
    try:
        done = client.create_multipart_upload(Bucket=bucket, Key="exports/t1/done.jsonl.gz")
        etag = client.upload_part(
            Bucket=bucket,
            Key="exports/t1/done.jsonl.gz",
            UploadId=done["UploadId"],
            PartNumber=1,
            Body=b"one part, the last",
        )["ETag"]
        client.complete_multipart_upload(
            Bucket=bucket,
            Key="exports/t1/done.jsonl.gz",
            UploadId=done["UploadId"],
            MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": etag}]},
        )
        going = client.create_multipart_upload(Bucket=bucket, Key="exports/t1/going.jsonl.gz")
        first = client.upload_part(
            Bucket=bucket,
            Key="exports/t1/going.jsonl.gz",
            UploadId=going["UploadId"],
            PartNumber=1,
            Body=part,
        )["ETag"]
        aborted = client.create_multipart_upload(Bucket=bucket, Key="exports/t1/gone.jsonl.gz")
        client.abort_multipart_upload(
            Bucket=bucket, Key="exports/t1/gone.jsonl.gz", UploadId=aborted["UploadId"]
        )
    finally:
        engine.stop()
    engine, _, client = _stored_engine(store)
    try:
        body = client.get_object(Bucket=bucket, Key="exports/t1/done.jsonl.gz")["Body"]
        assert body.read() == b"one part, the last"
        uploads = client.list_multipart_uploads(Bucket=bucket, Prefix="exports/t1/")
        assert [u["UploadId"] for u in uploads["Uploads"]] == [going["UploadId"]]
        second = client.upload_part(
            Bucket=bucket,
            Key="exports/t1/going.jsonl.gz",
            UploadId=going["UploadId"],
            PartNumber=2,
            Body=b"the end",
        )["ETag"]
        parts = [{"PartNumber": 1, "ETag": first}, {"PartNumber": 2, "ETag": second}]
        client.complete_multipart_upload(
            Bucket=bucket,
            Key="exports/t1/going.jsonl.gz",
            UploadId=going["UploadId"],
            MultipartUpload={"Parts": parts},
        )
        body = client.get_object(Bucket=bucket, Key="exports/t1/going.jsonl.gz")["Body"]
        assert body.read() == part + b"the end"
    finally:
        engine.stop()


@pytest.mark.slow
def test_the_recording_of_the_engine_before_its_store_is_imported_once(tmp_path: Path) -> None:
    """A data directory of the engine before its store holds moto's recording: its
    objects are imported at the first start (moto's replay), then kept by the store."""
    store = tmp_path / "s3"
    store.mkdir()
    auth = "AWS4-HMAC-SHA256 Credential=x/20261126/us-east-1/s3/aws4_request, Signature=0"

    def entry(method: str, path: str, body: bytes = b"") -> str:
        import base64
        import json

        headers = {"Authorization": auth, "Content-Length": str(len(body))}
        url = f"http://127.0.0.1:1{path}"
        encoded = base64.b64encode(body).decode()
        return json.dumps(
            {
                "headers": headers,
                "method": method,
                "url": url,
                "body": encoded,
                "body_encoded": True,
            }
        )

    lines = [
        entry("PUT", "/kept-blobs"),
        entry("PUT", "/kept-blobs/tenants/t1/blobs/old", b"an object of the recording"),
        entry("PUT", "/kept-blobs/tenants/t1/blobs/deleted", b"deleted by its key"),
        entry("DELETE", "/kept-blobs/tenants/t1/blobs/deleted"),
    ]
    (store / "recording.jsonl").write_text("".join(line + "\n" for line in lines))
    for _ in range(2):
        engine, _, client = _stored_engine(store)
        try:
            body = client.get_object(Bucket="kept-blobs", Key="tenants/t1/blobs/old")["Body"]
            assert body.read() == b"an object of the recording"
            with pytest.raises(client.exceptions.NoSuchKey):
                client.get_object(Bucket="kept-blobs", Key="tenants/t1/blobs/deleted")
        finally:
            engine.stop()
        assert not (store / "recording.jsonl").exists()
        assert (store / "recording.jsonl.imported").exists()
