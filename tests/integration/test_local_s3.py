"""The local S3 engine (moto's server): started by the session, the bucket created,
reported by /healthz, and never outliving its parent."""

from __future__ import annotations

import dataclasses
import signal
import subprocess
import sys
import textwrap
import time

import pytest
from starlette.testclient import TestClient

from api.app import create_app
from api.settings import PROJECT_ROOT, Settings
from scripts.local_engine import free_port
from scripts.local_s3 import LocalS3, ensure_bucket
from tests.integration.test_local_engine import _alive


def test_the_bucket_is_created_once(settings: Settings) -> None:
    client = settings.s3_client()
    assert ensure_bucket(client, "bucket-made-twice", settings.aws_region) is True
    assert ensure_bucket(client, "bucket-made-twice", settings.aws_region) is False
    assert "bucket-made-twice" in {b["Name"] for b in client.list_buckets()["Buckets"]}


def test_healthz_reports_the_table_and_the_blob_store(app_client: TestClient) -> None:
    body = app_client.get("/healthz").json()
    assert body["status"] == "ok" and body["reachable"] is True
    assert body["blobs"] == {"bucket": "sync-test-blobs", "reachable": True}


def test_healthz_says_when_the_blob_store_is_unreachable(settings: Settings) -> None:
    nowhere = dataclasses.replace(settings, s3_endpoint=f"http://127.0.0.1:{free_port()}")
    with TestClient(create_app(nowhere, sockets=False)) as client:
        response = client.get("/healthz")
    # Sync still works without the blob store: 200, "degraded", and which part is down.
    assert response.status_code == 200
    body = response.json()
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
