"""The local S3 engine (moto's server): started by the session, the bucket created,
reported by /healthz, and never outliving its parent."""

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
from pathlib import Path
from typing import Any

import httpx2
import pytest
from starlette.testclient import TestClient

from api.app import create_app
from api.domain.attachments import MAX_BLOB_BYTES, Blob
from api.settings import PROJECT_ROOT, Settings
from api.storage.blobs import S3Blobs
from api.storage.keys import blob_key
from scripts.local_engine import free_port
from scripts.local_s3 import LocalS3, ensure_bucket
from tests.integration.test_local_engine import _alive


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


def _recorded_engine(recording: Path) -> tuple[LocalS3, S3Blobs, Any]:
    engine = LocalS3(free_port(), recording)
    engine.start()
    settings = dataclasses.replace(Settings.from_env({}), s3_endpoint=engine.endpoint)
    client = settings.s3_client()
    ensure_bucket(client, "kept-blobs", settings.aws_region)
    return engine, S3Blobs(client, "kept-blobs", hashes_bytes=True), client


def _upload(blobs: S3Blobs, tenant: str, data: bytes) -> Blob:
    blob = Blob(tenant, hashlib.sha256(data).hexdigest(), len(data), "image/jpeg")
    upload = blobs.presign_upload(blob, expires_in=900)
    assert httpx2.put(upload.url, content=data, headers=upload.headers).status_code == 200
    return blob


def test_recorded_blobs_survive_a_restart_and_deleted_ones_stay_deleted(tmp_path: Path) -> None:
    """scripts/serve's engine: a presigned upload is there after a restart, with its
    checksum and type; a deleted object is not; a partial last entry (an engine killed
    while it wrote) is dropped."""
    recording = tmp_path / "s3" / "recording.jsonl"
    engine, blobs, client = _recorded_engine(recording)
    try:
        kept = _upload(blobs, "t1", b"kept across the restart")
        held = blobs.stat("t1", kept.sha256)
        assert held is not None and held.sha256 == kept.sha256
        gone = _upload(blobs, "t2", b"deleted before the restart")
        client.delete_object(Bucket="kept-blobs", Key=blob_key("t2", gone.sha256))
    finally:
        engine.stop()
    with recording.open("ab") as file:
        file.write(b'{"method": "PUT", "url": "http://127.0.0.1:1/kept-blobs/torn", "bo')
    engine, blobs, client = _recorded_engine(recording)
    try:
        assert blobs.stat("t1", kept.sha256) == held
        assert blobs.stat("t2", gone.sha256) is None
    finally:
        engine.stop()
    assert recording.read_bytes().endswith(b"\n")


@pytest.mark.slow
def test_large_and_concurrent_uploads_survive_a_restart(tmp_path: Path) -> None:
    """One upload of 10 MiB (the largest blob) and 48 of 300 KB on 16 connections: of
    these, moto's own recorder glued 4 to 20 entries together in each of 6 runs, and its
    replay stopped at the first (scripts/moto_recorded.py records one at a time)."""
    recording = tmp_path / "s3" / "recording.jsonl"
    engine, blobs, client = _recorded_engine(recording)
    try:
        kept = [_upload(blobs, "t1", os.urandom(MAX_BLOB_BYTES))]
        with ThreadPoolExecutor(16) as pool:
            kept += pool.map(lambda _: _upload(blobs, "t2", os.urandom(300_000)), range(48))
        held = {b.sha256: blobs.stat(b.tenant_id, b.sha256) for b in kept}
        assert all(s is not None and s.sha256 == sha for sha, s in held.items())
    finally:
        engine.stop()
    engine, blobs, client = _recorded_engine(recording)
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
    blob = Blob("t1", hashlib.sha256(data).hexdigest(), len(data), "image/jpeg")
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
