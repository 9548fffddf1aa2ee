"""Attachments (contract 3.10) through the API, against the local S3 engine: uploads
by presigned PUT with httpx, deduplication, downloads, and every refusal.

The local engine (moto 5.2.5) accepts any presigned request (docs/attachments.md):
what AWS S3 refuses by its signature is checked with `tests.support.sigv4` (S3's
own computation), and what S3 refuses by the checksum is checked in what the server
then answers: bytes that are not the declared ones never become an attachment."""

from __future__ import annotations

import dataclasses
import os
import socket
import time
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx2
import pytest

from api.domain.attachments import MAX_BLOB_BYTES
from api.domain.errors import Unavailable
from api.service.attachments import Attachments
from api.settings import Settings
from api.storage.blobs import S3Blobs
from tests.support.blobs import REQUEST_UPLOAD, sha256_of
from tests.support.gql import GraphQLClient, bearer
from tests.support.sigv4 import signature_holds

REQUEST = REQUEST_UPLOAD
ATTACHMENT = """
query($t: ID!, $sha: String!) {
  attachment(tenantID: $t, sha256: $sha) { sha256 size contentType url urlExpiresAt }
}"""


def _photo(size: int = 2048) -> bytes:
    return os.urandom(size)


_sha = sha256_of


def _request(
    gql: GraphQLClient,
    tenant: str,
    data: bytes,
    content_type: str = "image/jpeg",
    headers: dict[str, str] | None = None,
) -> dict[str, Any]:
    variables = {"t": tenant, "sha": _sha(data), "size": len(data), "type": content_type}
    body = gql.execute(REQUEST, variables, headers=headers)
    assert "errors" not in body, body
    return dict(body["data"]["requestUpload"])


def _headers(upload: dict[str, Any]) -> dict[str, str]:
    return {h["name"]: h["value"] for h in upload["headers"]}


def _put(upload: dict[str, Any], body: bytes, headers: dict[str, str] | None = None) -> int:
    assert upload["method"] == "PUT"
    response = httpx2.put(upload["url"], content=body, headers=_headers(upload) | (headers or {}))
    return response.status_code


def _attachment(gql: GraphQLClient, tenant: str, sha: str, **kw: Any) -> dict[str, Any]:
    return gql.execute(ATTACHMENT, {"t": tenant, "sha": sha}, **kw)


def _code(body: dict[str, Any]) -> str:
    assert body.get("data") is None or not any(body["data"].values()), body
    return str(body["errors"][0]["extensions"]["code"])


def _objects(settings: Settings, tenant: str) -> list[str]:
    listed = settings.s3_client().list_objects_v2(
        Bucket=settings.blob_bucket, Prefix=f"tenants/{tenant}/"
    )
    return [o["Key"] for o in listed.get("Contents", [])]


def test_upload_once_then_already_present_and_the_same_bytes_download(
    gql: GraphQLClient, tenant: str, settings: Settings
) -> None:
    photo = _photo()
    first = _request(gql, tenant, photo)
    assert first["alreadyPresent"] is False
    upload = first["upload"]
    # Short-lived: valid 15 minutes, in the URL (S3 checks it) and in the answer.
    assert parse_qs(urlsplit(upload["url"]).query)["X-Amz-Expires"] == ["900"]
    expires = datetime.fromisoformat(upload["expiresAt"].replace("Z", "+00:00"))
    assert timedelta(minutes=14) < expires - datetime.now(UTC) <= timedelta(minutes=15)
    assert urlsplit(upload["url"]).path.endswith(f"/tenants/{tenant}/blobs/{_sha(photo)}")
    assert _put(upload, photo) == 200
    # Identical content: one HeadObject says so, nothing to upload again.
    again = _request(gql, tenant, photo)
    assert again == {"alreadyPresent": True, "upload": None}
    assert _objects(settings, tenant) == [f"tenants/{tenant}/blobs/{_sha(photo)}"]

    found = _attachment(gql, tenant, _sha(photo))["data"]["attachment"]
    assert {k: found[k] for k in ("sha256", "size", "contentType")} == {
        "sha256": _sha(photo),
        "size": len(photo),
        "contentType": "image/jpeg",
    }
    query = parse_qs(urlsplit(found["url"]).query)
    assert query["X-Amz-Expires"] == ["900"]
    # Signed into the URL: S3 serves it as a download, never as a page of its host.
    assert query["response-content-disposition"] == ["attachment"]
    downloaded = httpx2.get(found["url"])
    assert downloaded.status_code == 200 and downloaded.content == photo


def test_dedup_is_per_tenant(gql: GraphQLClient, tenant: str) -> None:
    photo = _photo()
    assert _put(_request(gql, tenant, photo)["upload"], photo) == 200
    other = f"{tenant}-b"
    assert _request(gql, other, photo)["alreadyPresent"] is False
    assert _code(_attachment(gql, other, _sha(photo))) == "NOT_FOUND"


def test_other_bytes_than_declared_never_become_the_attachment(
    gql: GraphQLClient, tenant: str
) -> None:
    photo = _photo()
    upload = _request(gql, tenant, photo)["upload"]
    forged = _photo(len(photo))  # same length, other content
    # AWS S3 answers 400 BadDigest (the signed SHA-256 is not the body's); the local
    # engine stores them with the claimed checksum: the server hashes what it holds.
    _put(upload, forged)
    assert _code(_attachment(gql, tenant, _sha(photo))) == "NOT_FOUND"
    # Not present: the answer is a new upload, which replaces them.
    retry = _request(gql, tenant, photo)
    assert retry["alreadyPresent"] is False
    assert _put(retry["upload"], photo) == 200
    assert (
        httpx2.get(_attachment(gql, tenant, _sha(photo))["data"]["attachment"]["url"]).content
        == photo
    )


def test_more_bytes_than_declared_are_refused(gql: GraphQLClient, tenant: str) -> None:
    photo = _photo()
    upload = _request(gql, tenant, photo)["upload"]
    longer = photo + b"trailing"
    # Content-Length is signed: S3 refuses any other length (the signature fails).
    headers = _headers(upload) | {"Content-Length": str(len(longer))}
    assert _headers(upload)["Content-Length"] == str(len(photo))
    assert signature_holds(upload["url"], "PUT", _headers(upload))
    assert not signature_holds(upload["url"], "PUT", headers)
    _put(upload, longer, headers)  # the local engine stores them anyway
    assert _code(_attachment(gql, tenant, _sha(photo))) == "NOT_FOUND"
    assert _request(gql, tenant, photo)["alreadyPresent"] is False


def test_an_upload_without_the_signed_checksum_is_not_an_attachment(
    gql: GraphQLClient, tenant: str
) -> None:
    photo = _photo()
    upload = _request(gql, tenant, photo)["upload"]
    bare = {"Content-Type": "image/jpeg", "Content-Length": str(len(photo))}
    assert not signature_holds(upload["url"], "PUT", bare)  # S3: 403
    httpx2.put(upload["url"], content=photo, headers={"Content-Type": "image/jpeg"})
    # The right bytes, but nothing proves it on AWS (no checksum stored): refused.
    assert _code(_attachment(gql, tenant, _sha(photo))) == "NOT_FOUND"
    assert _request(gql, tenant, photo)["alreadyPresent"] is False


def test_an_upload_with_an_unsigned_content_encoding_is_not_an_attachment(
    gql: GraphQLClient, tenant: str
) -> None:
    # The signature leaves Content-Encoding open: S3 stores it, and a client would
    # then "decode" the right bytes into other ones.
    photo = _photo()
    upload = _request(gql, tenant, photo)["upload"]
    assert _headers(upload)["Content-Length"] == str(len(photo))
    assert _put(upload, photo, {"Content-Encoding": "gzip"}) == 200
    assert _code(_attachment(gql, tenant, _sha(photo))) == "NOT_FOUND"
    assert _request(gql, tenant, photo)["alreadyPresent"] is False  # upload it again
    again = _request(gql, tenant, photo)["upload"]
    assert _put(again, photo) == 200
    assert "errors" not in _attachment(gql, tenant, _sha(photo))


def test_another_content_type_than_declared_is_refused(gql: GraphQLClient, tenant: str) -> None:
    photo = _photo()
    upload = _request(gql, tenant, photo, content_type="image/png")["upload"]
    html = {"Content-Type": "text/html"}
    assert not signature_holds(
        upload["url"], "PUT", _headers(upload) | html | {"Content-Length": str(len(photo))}
    )
    _put(upload, photo, html)
    assert _code(_attachment(gql, tenant, _sha(photo))) == "NOT_FOUND"
    assert _request(gql, tenant, photo, content_type="image/png")["alreadyPresent"] is False


def test_a_url_altered_to_another_tenants_key_is_refused(gql: GraphQLClient, tenant: str) -> None:
    victim = f"{tenant}-victim"
    photo, forged = _photo(), _photo()
    upload = _request(gql, tenant, photo)["upload"]
    altered = upload["url"].replace(f"/tenants/{tenant}/", f"/tenants/{victim}/")
    assert altered != upload["url"]
    signed = _headers(upload) | {"Content-Length": str(len(photo))}
    # The key is in the signature: S3 refuses the altered URL (403), not the original.
    assert signature_holds(upload["url"], "PUT", signed)
    assert not signature_holds(altered, "PUT", signed)
    # The local engine takes it anyway; other bytes there never become the victim's blob.
    httpx2.put(altered, content=forged, headers=_headers(upload))
    assert _code(_attachment(gql, victim, _sha(photo))) == "NOT_FOUND"

    assert _put(upload, photo) == 200
    url = _attachment(gql, tenant, _sha(photo))["data"]["attachment"]["url"]
    assert signature_holds(url, "GET", {})
    assert not signature_holds(url.replace(f"/tenants/{tenant}/", f"/tenants/{victim}/"), "GET", {})


def test_a_foreign_tenant_is_forbidden(gql: GraphQLClient, tenant: str, settings: Settings) -> None:
    photo = _photo()
    mine = bearer([f"{tenant}-mine"])
    variables = {"t": tenant, "sha": _sha(photo), "size": len(photo), "type": "image/jpeg"}
    assert _code(gql.execute(REQUEST, variables, headers=mine)) == "FORBIDDEN"
    assert _put(_request(gql, tenant, photo)["upload"], photo) == 200
    assert _code(_attachment(gql, tenant, _sha(photo), headers=mine)) == "FORBIDDEN"


def test_a_reader_downloads_but_cannot_request_an_upload(gql: GraphQLClient, tenant: str) -> None:
    photo = _photo()
    reader = bearer([f"{tenant}:reader"])
    variables = {"t": tenant, "sha": _sha(photo), "size": len(photo), "type": "image/jpeg"}
    assert _code(gql.execute(REQUEST, variables, headers=reader)) == "FORBIDDEN"
    assert _put(_request(gql, tenant, photo)["upload"], photo) == 200
    found = _attachment(gql, tenant, _sha(photo), headers=reader)["data"]["attachment"]
    assert httpx2.get(found["url"]).content == photo


GOOD_SHA = "a" * 64


@pytest.mark.parametrize(
    ("sha", "size", "content_type", "says"),
    [
        ("A" * 64, 10, "image/png", "sha256"),
        ("a" * 63, 10, "image/png", "sha256"),
        ("g" * 64, 10, "image/png", "sha256"),
        ("", 10, "image/png", "sha256"),
        (GOOD_SHA, 0, "image/png", "size"),
        (GOOD_SHA, -1, "image/png", "size"),
        (GOOD_SHA, MAX_BLOB_BYTES + 1, "image/png", "size"),
        (GOOD_SHA, 10, "text/html", "contentType"),
        (GOOD_SHA, 10, "image/PNG", "contentType"),
        (GOOD_SHA, 10, "image/png; charset=x", "contentType"),
        (GOOD_SHA, 10, "", "contentType"),
    ],
)
def test_bad_input_is_coded_and_nothing_is_written(
    gql: GraphQLClient,
    tenant: str,
    settings: Settings,
    sha: str,
    size: int,
    content_type: str,
    says: str,
) -> None:
    variables = {"t": tenant, "sha": sha, "size": size, "type": content_type}
    body = gql.execute(REQUEST, variables)
    assert _code(body) == "BAD_USER_INPUT" and says in body["errors"][0]["message"]
    assert _objects(settings, tenant) == []


def test_a_malformed_sha_or_tenant_is_coded_on_download(gql: GraphQLClient, tenant: str) -> None:
    assert _code(_attachment(gql, tenant, "A" * 64)) == "BAD_USER_INPUT"
    slashed = "evil/blobs"  # a token may name it; no key may hold it
    body = gql.execute(
        REQUEST,
        {"t": slashed, "sha": GOOD_SHA, "size": 10, "type": "image/png"},
        headers=bearer([slashed]),
    )
    assert _code(body) == "BAD_USER_INPUT"
    assert _code(_attachment(gql, slashed, GOOD_SHA, headers=bearer([slashed]))) == "BAD_USER_INPUT"


def test_deleting_a_tenant_removes_its_blobs(
    gql: GraphQLClient, tenant: str, settings: Settings
) -> None:
    photos = [_photo(2048 + i) for i in range(3)]
    for photo in photos:
        assert _put(_request(gql, tenant, photo)["upload"], photo) == 200
    other = f"{tenant}-other"  # a tenant whose id starts with this one's: untouched
    kept = _photo(999)
    owner_of_both = bearer([tenant, other])
    upload = _request(gql, other, kept, headers=owner_of_both)["upload"]
    assert _put(upload, kept) == 200
    assert len(_objects(settings, tenant)) == 3
    deleted = gql.execute(
        "mutation($t: ID!) { deleteTenant(tenantID: $t, confirm: $t) { done } }", {"t": tenant}
    )
    assert deleted["data"]["deleteTenant"]["done"] is True, deleted
    assert _objects(settings, tenant) == []
    # A tenant later written under the same id does not find the old photos.
    assert _code(_attachment(gql, tenant, _sha(photos[0]))) == "NOT_FOUND"
    assert _objects(settings, other) == [f"tenants/{other}/blobs/{_sha(kept)}"]


@pytest.mark.slow
def test_a_silent_s3_is_unavailable_within_the_api_timeout(settings: Settings) -> None:
    # A port that accepts connections and never answers, as a stalled S3 would.
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(16)
        port = silent.getsockname()[1]
        stalled = dataclasses.replace(settings, s3_endpoint=f"http://127.0.0.1:{port}")
        attachments = Attachments(S3Blobs(stalled.s3_client(), stalled.blob_bucket))
        started = time.monotonic()
        with pytest.raises(Unavailable):
            attachments.request_upload("t1", _sha(b"x"), 1, "image/png")
        # A deadline, not a speed: the answer must come before the API function's
        # 10 s Lambda timeout cuts it off uncoded (two attempts of a 3 s read, 6 s;
        # botocore's defaults would take minutes).
        assert time.monotonic() - started < 10
