"""Blobs uploaded the way a device uploads them: `requestUpload`, then the presigned
PUT with httpx (contract 3.10)."""

from __future__ import annotations

import hashlib
from typing import Any

import httpx2

from tests.support.gql import GraphQLClient

REQUEST_UPLOAD = """
mutation($t: ID!, $sha: String!, $size: Int!, $type: String!) {
  requestUpload(tenantID: $t, sha256: $sha, size: $size, contentType: $type) {
    alreadyPresent
    upload { url method headers { name value } expiresAt }
  }
}"""


def sha256_of(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def reference(data: bytes, content_type: str = "image/jpeg") -> dict[str, Any]:
    """What an entity's attachment field holds for these bytes."""
    return {"sha256": sha256_of(data), "size": len(data), "contentType": content_type}


def upload(
    gql: GraphQLClient, tenant: str, data: bytes, content_type: str = "image/jpeg"
) -> dict[str, Any]:
    """Upload `data` (unless the tenant holds it); its reference."""
    ref = reference(data, content_type)
    body = gql.execute(
        REQUEST_UPLOAD,
        {"t": tenant, "sha": ref["sha256"], "size": ref["size"], "type": content_type},
    )
    assert "errors" not in body, body
    answer = body["data"]["requestUpload"]
    if not answer["alreadyPresent"]:
        put = answer["upload"]
        headers = {h["name"]: h["value"] for h in put["headers"]}
        assert httpx2.put(put["url"], content=data, headers=headers).status_code == 200
    return ref
