"""Issue 29, "Done when", through `scripts/serve` (its own DynamoDB Local and S3
engine on free ports): a photo attached offline on one device reaches another
with the same bytes; identical content is not uploaded again; a forged upload
and a foreign tenant's download are refused."""

from __future__ import annotations

import hashlib
import os
import random
import signal
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
from sync_client import HttpBlobTransport, HttpTransport, SyncClient, TransportError
from sync_client.client import ATTACHMENT, REQUEST_UPLOAD

from api.auth import make_local_token
from api.settings import PROJECT_ROOT
from scripts.local_engine import free_port
from tests.convergence.faults import FaultyBlobs, FaultyTransport
from tests.support.servers import started
from tests.support.sigv4 import signature_holds

SECRET = "offline-attachments-" + "s" * 40


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """`scripts/serve` as a developer runs it, on free ports, data in a temporary dir."""
    port = free_port()
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("DYNAMODB_ENDPOINT", "S3_ENDPOINT", "BLOB_BUCKET", "TABLE_NAME")
    }
    env |= {
        "PORT": str(port),
        "DYNAMODB_LOCAL_PORT": str(free_port()),
        "S3_LOCAL_PORT": str(free_port()),
        "DATA_DIR": str(tmp_path_factory.mktemp("serve-data")),
        "SYNC_AUTH_SECRET": SECRET,
    }
    log = (tmp_path_factory.mktemp("serve-log") / "serve.log").open("w+")
    process = subprocess.Popen(
        [str(PROJECT_ROOT / "scripts" / "serve")],
        cwd=PROJECT_ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        if not started(process, url, timeout_s=180, every_s=0.3):
            log.seek(0)
            raise RuntimeError(f"scripts/serve did not start:\n{log.read()}")
        yield url
    finally:
        os.killpg(process.pid, signal.SIGINT)  # Ctrl-C: the server and both engines stop
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        log.close()


class CountingBlobs(HttpBlobTransport):
    def __init__(self) -> None:
        super().__init__(timeout=30)
        self.puts: list[str] = []
        self.gets: list[str] = []

    def put(self, url: str, data: bytes, headers: dict[str, str]) -> None:
        self.puts.append(url)
        super().put(url, data, headers)

    def get(self, url: str) -> bytes:
        self.gets.append(url)
        return super().get(url)


def _device(
    url: str, tmp_path: Path, name: str, tenants: list[str]
) -> tuple[SyncClient, FaultyTransport, CountingBlobs]:
    token = make_local_token(SECRET, name, tenants, 3600)
    transport = FaultyTransport(HttpTransport(url, token), random.Random(1), {})
    counted = CountingBlobs()
    client = SyncClient(
        tmp_path / f"{name}.sqlite3",
        tenants[0],
        transport,
        blobs=FaultyBlobs(counted, transport),  # offline with the device
    )
    return client, transport, counted


def _code(body: dict[str, Any]) -> str:
    return str(body["errors"][0]["extensions"]["code"])


@pytest.mark.slow
def test_a_photo_attached_offline_reaches_another_device(served: str, tmp_path: Path) -> None:
    family = f"family-{uuid.uuid4().hex[:8]}"
    photo = os.urandom(40_000)

    # Device A, offline: attaches a photo and creates a person with it.
    phone, phone_net, phone_blobs = _device(served, tmp_path, "alice-phone", [family])
    phone_net.online = False
    ref = phone.attach(photo, "image/jpeg")
    assert ref == {
        "sha256": hashlib.sha256(photo).hexdigest(),
        "size": len(photo),
        "contentType": "image/jpeg",
    }
    ann = phone.create("Person", {"givenName": "Ann", "photo": ref})
    with pytest.raises(TransportError):
        phone.sync()
    assert phone.pending() == 1 and phone_blobs.puts == []
    # Online: the photo goes first, then the person.
    phone_net.online = True
    report = phone.sync()
    assert (report.uploaded, report.applied, phone.pending()) == (1, 1, 0)
    assert len(phone_blobs.puts) == 1

    # Device B, its own store: syncs, and downloads the same bytes.
    tablet, _, tablet_blobs = _device(served, tmp_path, "bob-tablet", [family])
    tablet.sync()
    assert tablet.get(ann) == {"__typename": "Person", "givenName": "Ann", "photo": ref}
    assert tablet.open(ref["sha256"]) == photo and len(tablet_blobs.gets) == 1

    # B attaches the identical content to a reminder: it knows the server holds it.
    note = tablet.create(
        "Reminder", {"title": "frame it", "file": tablet.attach(photo, "image/jpeg")}
    )
    report = tablet.sync()
    assert (report.uploaded, report.already_present, report.applied) == (0, 0, 1)
    # A third device (own store, never saw the bytes) attaches them too: the server
    # answers alreadyPresent, and no PUT is made.
    laptop, _, laptop_blobs = _device(served, tmp_path, "bob-laptop", [family])
    laptop.create("Reminder", {"title": "print it", "file": laptop.attach(photo, "image/jpeg")})
    report = laptop.sync()
    assert (report.already_present, report.uploaded, report.applied) == (1, 0, 1)
    assert laptop_blobs.puts == [] and tablet_blobs.puts == []
    phone.sync()
    tablet.sync()
    assert phone.items() == tablet.items() == laptop.items() and note in phone.items()

    # A forged upload: the presigned URL's key changed to another tenant's.
    victim = f"victim-{uuid.uuid4().hex[:8]}"
    wanted, forged = os.urandom(1000), os.urandom(1000)
    sha = hashlib.sha256(wanted).hexdigest()
    asked = phone_net.execute(
        REQUEST_UPLOAD, {"t": family, "sha": sha, "size": len(wanted), "type": "image/png"}
    )
    upload = asked["data"]["requestUpload"]["upload"]
    headers = {h["name"]: h["value"] for h in upload["headers"]}
    altered = upload["url"].replace(f"/tenants/{family}/", f"/tenants/{victim}/")
    assert altered != upload["url"]
    # S3 on AWS refuses it (403: the key is signed); the local engine stores it anyway,
    # and the server never answers for it as the victim's blob.
    assert signature_holds(upload["url"], "PUT", headers)
    assert not signature_holds(altered, "PUT", headers)
    httpx2.put(altered, content=forged, headers=headers)
    victim_device, victim_net, _ = _device(served, tmp_path, "victim", [victim])
    answer = victim_net.execute(ATTACHMENT, {"t": victim, "sha": sha})
    assert _code(answer) == "NOT_FOUND"
    victim_device.create(
        "Person", {"photo": {"sha256": sha, "size": 1000, "contentType": "image/png"}}
    )
    (rejected,) = victim_device.sync().rejected
    assert rejected["error"]["code"] == "ATTACHMENT_MISSING"

    # A foreign tenant's download: a token for another tenant only is FORBIDDEN.
    assert _code(victim_net.execute(ATTACHMENT, {"t": family, "sha": ref["sha256"]})) == (
        "FORBIDDEN"
    )
    for client in (phone, tablet, laptop, victim_device):
        client.close()
