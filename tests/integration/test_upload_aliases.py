"""Aliased `requestUpload`s of one request that reach the tenant's quota (issue 37,
finding 5): each alias answers on its own. The ones granted keep their links (their
room is reserved), the one over the quota is QUOTA_EXCEEDED at its own path, and
the reservations add up to what was granted, nothing more."""

from __future__ import annotations

import dataclasses
import hashlib

import httpx2
from starlette.testclient import TestClient

from api.app import create_app
from api.settings import Settings
from api.storage.blob_usage import BlobUsageTable
from tests.support.gql import GraphQLClient

ALIASED = """
mutation($t: ID!, $a: String!, $b: String!, $c: String!) {
  a: requestUpload(tenantID: $t, sha256: $a, size: 2000, contentType: "image/jpeg") {
    alreadyPresent upload { url method headers { name value } }
  }
  b: requestUpload(tenantID: $t, sha256: $b, size: 2000, contentType: "image/jpeg") {
    alreadyPresent upload { url method headers { name value } }
  }
  c: requestUpload(tenantID: $t, sha256: $c, size: 2000, contentType: "image/jpeg") {
    alreadyPresent upload { url method headers { name value } }
  }
}"""


def test_aliases_past_the_quota_keep_the_links_already_granted(
    settings: Settings, tenant: str
) -> None:
    small = dataclasses.replace(settings, blob_quota_bytes=5000)
    blobs = {name: bytes([i]) * 2000 for i, name in enumerate("abc")}
    shas = {name: hashlib.sha256(data).hexdigest() for name, data in blobs.items()}
    with TestClient(create_app(small, sockets=False)) as client:
        body = GraphQLClient(client).execute(ALIASED, {"t": tenant, **shas})
    # Mutation fields run in order: a and b fit in 5,000 bytes, c does not.
    assert body["data"] is not None, body
    assert body["data"]["c"] is None
    assert [(e["path"], e["extensions"]["code"]) for e in body["errors"]] == [
        (["c"], "QUOTA_EXCEEDED")
    ]
    # The granted links are whole and work: the uploads reach the bucket.
    for name in "ab":
        upload = body["data"][name]["upload"]
        assert body["data"][name]["alreadyPresent"] is False
        headers = {h["name"]: h["value"] for h in upload["headers"]}
        sent = httpx2.put(upload["url"], content=blobs[name], headers=headers, timeout=10)
        assert sent.status_code == 200, sent.text
    # Only the granted uploads hold room: 5,000 - 2 x 2,000.
    assert BlobUsageTable().room(tenant) == 1000
