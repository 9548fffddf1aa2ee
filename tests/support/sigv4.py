"""What S3 computes of a presigned (query-string) request: its Signature Version 4,
recomputed with botocore's own signer from the URL's date, expiry and credential.

The local S3 engine (moto 5.2.5) checks no signature of a presigned request
(docs/attachments.md), so tests check here what AWS S3 checks: a request whose
method, path (the key), signed headers or query differ from the signed ones does
not carry the signature S3 expects, and is refused (403 SignatureDoesNotMatch)."""

from __future__ import annotations

from datetime import datetime
from unittest import mock
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from botocore.auth import S3SigV4QueryAuth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

_AUTH_PARAMS = {
    "X-Amz-Algorithm",
    "X-Amz-Credential",
    "X-Amz-Date",
    "X-Amz-Expires",
    "X-Amz-SignedHeaders",
    "X-Amz-Signature",
    "X-Amz-Security-Token",
}


def signature_holds(
    url: str, method: str, headers: dict[str, str], secret_key: str = "local"
) -> bool:
    """Whether S3 would accept this request's signature (not whether it expired)."""
    parts = urlsplit(url)
    query = parse_qsl(parts.query, keep_blank_values=True)
    auth = dict(query)
    access_key, _, region, service, _ = auth["X-Amz-Credential"].split("/")
    signed = auth["X-Amz-SignedHeaders"].split(";")
    if not set(signed) - {"host"} <= {h.lower() for h in headers}:
        return False  # a signed header was not sent
    bare = urlunsplit(
        parts._replace(query=urlencode([q for q in query if q[0] not in _AUTH_PARAMS]))
    )
    request = AWSRequest(
        method=method, url=bare, headers={k: v for k, v in headers.items() if k.lower() in signed}
    )
    signer = S3SigV4QueryAuth(
        Credentials(access_key, secret_key), service, region, expires=int(auth["X-Amz-Expires"])
    )
    when = datetime.strptime(auth["X-Amz-Date"], "%Y%m%dT%H%M%SZ")
    with mock.patch("botocore.auth.get_current_datetime", return_value=when):
        signer.add_auth(request)
    return (
        dict(parse_qsl(urlsplit(request.url).query))["X-Amz-Signature"] == auth["X-Amz-Signature"]
    )
