"""Download links are signed off the event loop, inside the tenant's admission, in
a bounded number of calls per page (issue 37, finding 1): a page of 1,000 photos
used to hold the event loop for about a second, delaying every other tenant.

Counted, not timed: each signature is made in a worker thread (no event loop runs
there) while the tenant holds a slot of its read gate, and a page's links are
signed in one call however many there are. Against DynamoDB Local and the local S3
engine, through the in-process app."""

from __future__ import annotations

import asyncio
import os
import threading
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from datetime import datetime
from typing import Any

import httpx2
import pytest
from starlette.testclient import TestClient

from api.app import create_app
from api.service.attachments import Attachments
from api.settings import Settings
from api.storage.blobs import S3Blobs
from api.tenant_gate import TenantGate
from tests.support.blobs import upload
from tests.support.gql import GraphQLClient

# A capability beyond the sync core: scripts/test --all (pyproject's `slow`).
pytestmark = pytest.mark.slow

PEOPLE = 60
PHOTOS = 20
PUSH = """
mutation($i: PushChangesInput!) { pushChanges(input: $i) { results { status } } }"""
PAGE = """
query($t: ID!) { changes(tenantID: $t, limit: 1000) {
  items { ... on Person { id photo { sha256 url urlExpiresAt } } }
} }"""
ONE = """
query($t: ID!, $id: ID!) { person(tenantID: $t, id: $id) { photo { url } } }"""


class Signing:
    """Where each signature was made: whether an event loop ran in its thread, and
    whether its tenant was inside its read gate; and how many calls signed them."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.reading: Counter[str] = Counter()  # tenant -> reads inside the gate now
        self.signed: list[tuple[bool, bool]] = []  # (on an event loop, tenant admitted)
        self.calls = 0


@pytest.fixture
def signing(monkeypatch: pytest.MonkeyPatch) -> Iterator[Signing]:
    seen = Signing()
    enter, presign = TenantGate.enter, S3Blobs.presign_download
    links = getattr(Attachments, "download_links", None)

    @asynccontextmanager
    async def admitted(self: TenantGate, tenant_id: str) -> AsyncIterator[None]:
        async with enter(self, tenant_id):
            reads = self._what == "reads"
            with seen.lock:
                seen.reading[tenant_id] += reads
            try:
                yield
            finally:
                with seen.lock:
                    seen.reading[tenant_id] -= reads

    def signed(
        self: S3Blobs, tenant_id: str, sha256: str, expires_in: int, generation: str = ""
    ) -> Any:
        try:
            asyncio.get_running_loop()
            on_loop = True
        except RuntimeError:
            on_loop = False
        with seen.lock:
            seen.signed.append((on_loop, seen.reading[tenant_id] > 0))
        return presign(self, tenant_id, sha256, expires_in, generation)

    def counted(self: Attachments, tenant_id: str, sha256s: Any) -> dict[str, Any]:
        with seen.lock:
            seen.calls += 1
        assert links is not None
        return links(self, tenant_id, sha256s)

    monkeypatch.setattr(TenantGate, "enter", admitted)
    monkeypatch.setattr(S3Blobs, "presign_download", signed)
    monkeypatch.setattr(Attachments, "download_links", counted, raising=False)
    yield seen


def _people_with_photos(gql: GraphQLClient, tenant: str) -> list[dict[str, Any]]:
    refs = [upload(gql, tenant, os.urandom(64)) for _ in range(PHOTOS)]
    entries = [
        {"createPerson": {"tenantID": tenant, "person": {"givenName": f"p{i}", "photo": ref}}}
        for i, ref in enumerate(refs * (PEOPLE // PHOTOS))
    ]
    body = gql.execute(PUSH, {"i": {"tenantID": tenant, "mutations": entries}})
    assert [r["status"] for r in body["data"]["pushChanges"]["results"]] == ["APPLIED"] * PEOPLE
    return refs


def test_a_page_of_links_is_signed_in_one_worker_thread_call_inside_the_read_gate(
    settings: Settings, tenant: str, signing: Signing
) -> None:
    with TestClient(create_app(settings, sockets=False)) as client:
        gql = GraphQLClient(client)
        refs = _people_with_photos(gql, tenant)
        signing.signed.clear()
        signing.calls = 0
        body = gql.execute(PAGE, {"t": tenant})
        assert "errors" not in body, body
        items = body["data"]["changes"]["items"]
        assert len(items) == PEOPLE
        # Every link signed (one per distinct photo), none on the event loop, each
        # while the tenant held a slot of its read gate, all in one call.
        assert signing.signed == [(False, True)] * PHOTOS
        assert signing.calls == 1
        # The links work and the page's copies of one photo share one link.
        by_sha = {i["photo"]["sha256"]: i["photo"] for i in items}
        assert len(by_sha) == PHOTOS
        for item in items:
            assert item["photo"] == by_sha[item["photo"]["sha256"]]
            assert datetime.fromisoformat(item["photo"]["urlExpiresAt"]) is not None
        got = httpx2.get(by_sha[refs[0]["sha256"]]["url"], timeout=10)
        assert got.status_code == 200 and len(got.content) == 64

        # Read again: the reused links cost no signature, and still one call.
        signing.calls = 0
        again = gql.execute(PAGE, {"t": tenant})
        assert again["data"] == body["data"]
        assert len(signing.signed) == PHOTOS and signing.calls == 1

        # A single entity's link too: off the loop, inside the gate.
        signing.signed.clear()
        first = items[0]["id"]
        with_new_link = gql.execute(ONE, {"t": tenant, "id": first})
        assert with_new_link["data"]["person"]["photo"]["url"], with_new_link
        assert all(s == (False, True) for s in signing.signed)
