"""Attachments (contract 3.10, issue 29) for `scripts/bench`: upload and download of
100 KB and 5 MB through the product's path against the same raw S3 calls on the
same engine in the same run; the requests and DynamoDB units of one attachment;
what one costs a month on AWS at list prices (`scripts/benchmarks/prices.py`).

- Product: an upload is `requestUpload` (GraphQL over HTTP to the API server's
  process) then the presigned PUT with its headers; a download is `attachment`
  then a GET of its URL. Raw: the same PUT and GET of as many bytes on the same
  engine with the same HTTP client, their URLs presigned by the bench (signing is
  computed, no request; moto answers an unsigned GET 403). Rounds alternate which
  goes first, so that both see the same machine; every upload is of new bytes (the
  same bytes again would be "already present": no PUT at all).
- Requests: counted by the S3 engine itself (its request log) for one attachment
  made one request at a time through the in-process app, so each S3 request is
  the server's (made during a GraphQL call) or the client's (the presigned PUT
  and GET).
- DynamoDB: the in-process app's request log, which adds up the consumed capacity
  of every DynamoDB call made while serving a request: measured, not assumed.
- References (`Person.photo`): a createPerson setting a new photo (one HeadObject
  before the write) against one without, over HTTP, alternating; and a page of 100
  people each with a photo, `url` selected (a link signed per item, and
  graphql-core's own execution instead of the plain-record fast path) or not,
  against 100 people without photos. The photo is a 20 KB thumbnail: on the local
  engine the check also GETs and hashes the blob (below), on AWS a HeadObject only.
- On the local engine the server also reads a blob back and hashes it whenever it
  checks one it holds (moto stores the claimed checksum unverified,
  docs/attachments.md): `attachment` makes one more GET of the whole blob. AWS S3
  verifies the checksum itself and the server reads nothing there, so the local
  download's product/raw ratio includes that read, and the AWS costs leave it out.
"""

from __future__ import annotations

import hashlib
import random
import statistics
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import httpx2

from api.storage.keys import blob_key
from scripts.benchmarks.harness import Harness
from scripts.benchmarks.prices import (
    GB,
    READ_UNIT_USD,
    S3_GET_USD,
    S3_PRICES_AS_OF,
    S3_PUT_USD,
    S3_STORAGE_GB_MONTH_USD,
    S3_TRANSFER_OUT_GB_USD,
    WRITE_UNIT_USD,
)
from scripts.local_s3 import LocalS3

TENANT = "attachments"
# A photo from a phone's camera is a few MB; a thumbnail or a scanned receipt tens
# to hundreds of KB. Both fit under MAX_BLOB_BYTES (10 MiB).
SIZES = {"100 KB": 100 * 1024, "5 MB": 5 * 1024 * 1024}
CONTENT_TYPE = "image/jpeg"
# Rounds per size and direction (--fast, --full): 5 MB takes tens of ms a request.
ROUNDS = {True: 7, False: 30}
REQUEST_UPLOAD = (
    "mutation($t: ID!, $s: String!, $n: Int!, $c: String!) { requestUpload(tenantID: $t,"
    " sha256: $s, size: $n, contentType: $c) { alreadyPresent upload { url headers"
    " { name value } } } }"
)
ATTACHMENT = "query($t: ID!, $s: String!) { attachment(tenantID: $t, sha256: $s) { size url } }"
# References: tenants of 100 people with a photo each, and of 100 without.
REFERENCE_TENANTS = ("ref-photos", "ref-plain")
THUMBNAIL_BYTES = 20 * 1024
CREATE_PERSON = (
    "mutation($i: CreatePersonInput!) { createPerson(input: $i) { person { id changeToken } } }"
)
_PERSON = "id changeToken givenName familyName occupation"
PAGE = {
    "url": f"{_PERSON} photo {{ sha256 size contentType url urlExpiresAt }}",
    "reference": f"{_PERSON} photo {{ sha256 size contentType }}",
}
CHANGES_PAGE = (
    "query($t: ID!) {{ changes(tenantID: $t, limit: 100) {{ items {{ ... on Person {{ {} }} }}"
    " cursor changeToken }} }}"
)


def measure_attachments(h: Harness, engine: LocalS3) -> dict[str, Any]:
    rng = random.Random(29)
    rounds = ROUNDS[h.fast]
    s3 = h.settings.s3_client()
    bucket = h.settings.blob_bucket
    result: dict[str, Any] = {"rounds": rounds, "sizes": {}}
    # No Authorization header towards S3: a presigned request carries its signature.
    with httpx2.Client(timeout=60) as blobs:
        for label, size in SIZES.items():
            print(f"==> attachments: {label}", flush=True)
            timing = _timings(h, blobs, s3, bucket, rng, size, rounds)
            counted = _one_attachment(h, blobs, engine, rng.randbytes(size))
            result["sizes"][label] = {
                "bytes": size,
                **timing,
                **counted,
                "aws_cost": _aws_cost(size, counted),
            }
        print("==> attachments: references", flush=True)
        result["references"] = _references(h, blobs, engine, rng, rounds * 3)
    return result


def _references(
    h: Harness, blobs: httpx2.Client, engine: LocalS3, rng: random.Random, rounds: int
) -> dict[str, Any]:
    """Medians in ms of a write setting a new photo against one without, and of a
    page of 100 people with photos against one without; the S3 requests of one
    write with a photo (the engine's log)."""
    api = h.clients[0]
    photos, plain = REFERENCE_TENANTS
    # The pages' people, older than the writes' (a first sync returns them first).
    h.seed(photos, 100, {"photo": _uploaded(h, api, blobs, photos, rng.randbytes(THUMBNAIL_BYTES))})
    h.seed(plain, 100)
    ms: dict[str, list[float]] = {k: [] for k in ("with", "without")}
    for n in range(rounds):
        data = rng.randbytes(THUMBNAIL_BYTES)
        ref = _uploaded(h, api, blobs, photos, data)
        calls = [
            ("with", {"tenantID": photos, "person": {"givenName": "A", "photo": ref}}),
            ("without", {"tenantID": plain, "person": {"givenName": "A"}}),
        ]
        for name, person in calls if n % 2 else calls[::-1]:
            started = time.perf_counter()
            h.post(api, CREATE_PERSON, {"i": person})
            ms[name].append(_since(started))
    before = len(engine.requests())
    ref = _uploaded(h, api, blobs, photos, rng.randbytes(THUMBNAIL_BYTES))
    between = len(engine.requests())
    h.post_local(CREATE_PERSON, {"i": {"tenantID": photos, "person": {"photo": ref}}})
    write_requests = Counter(method for method, _, _ in engine.requests()[between:])
    assert between > before
    # Pages: the first 100 people of each tenant, every one of `photos` with a photo.
    pages: dict[str, list[float]] = {"url": [], "reference": [], "plain": []}
    for n in range(rounds):
        order = [("url", photos), ("reference", photos), ("plain", plain)]
        for name, tenant in order[n % 3 :] + order[: n % 3]:
            selection = PAGE["url" if name == "url" else "reference"]
            started = time.perf_counter()
            items = h.post(api, CHANGES_PAGE.format(selection), {"t": tenant})["changes"]["items"]
            pages[name].append(_since(started))
            assert len(items) == 100 and (name == "plain") == (items[0]["photo"] is None)
    write = {k: statistics.median(v) for k, v in ms.items()}
    page = {k: statistics.median(v) for k, v in pages.items()}
    return {
        "rounds": rounds,
        "write_with_photo_p50_ms": write["with"],
        "write_without_p50_ms": write["without"],
        "write_ratio_p50": write["with"] / write["without"],
        "write_s3_requests": dict(write_requests),
        "page_with_urls_p50_ms": page["url"],
        "page_with_references_p50_ms": page["reference"],
        "page_plain_p50_ms": page["plain"],
        "page_urls_ratio_p50": page["url"] / page["plain"],
        "page_references_ratio_p50": page["reference"] / page["plain"],
    }


def _uploaded(
    h: Harness, api: httpx2.Client, blobs: httpx2.Client, tenant: str, data: bytes
) -> dict[str, Any]:
    sha = hashlib.sha256(data).hexdigest()
    variables = {"t": tenant, "s": sha, "n": len(data), "c": CONTENT_TYPE}
    answer = h.post(api, REQUEST_UPLOAD, variables)["requestUpload"]
    if not answer["alreadyPresent"]:
        _put(blobs, answer["upload"], data)
    return {"sha256": sha, "size": len(data), "contentType": CONTENT_TYPE}


def _timings(
    h: Harness,
    blobs: httpx2.Client,
    s3: Any,
    bucket: str,
    rng: random.Random,
    size: int,
    rounds: int,
) -> dict[str, Any]:
    """Medians in ms of product and raw uploads and downloads, alternating rounds."""
    api = h.clients[0]
    ms: dict[str, list[float]] = {k: [] for k in ("up", "raw_up", "down", "raw_down", "sha")}
    for n in range(rounds):
        data = rng.randbytes(size)
        started = time.perf_counter()
        # The client's own work before it may ask: hashed outside the product's
        # clock (a checksummed raw upload needs it too), reported on its own.
        sha = hashlib.sha256(data).hexdigest()
        ms["sha"].append(_since(started))
        raw_key = f"bench-raw/{sha}"
        put_url = s3.generate_presigned_url(
            "put_object",
            Params={"Bucket": bucket, "Key": raw_key, "ContentType": CONTENT_TYPE},
        )
        get_url = s3.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": raw_key})

        def upload(data: bytes = data, sha: str = sha) -> None:
            _upload(h, api, blobs, data, sha)

        def raw_upload(data: bytes = data, put_url: str = put_url) -> None:
            response = blobs.put(put_url, content=data, headers={"Content-Type": CONTENT_TYPE})
            response.raise_for_status()

        def download(sha: str = sha) -> None:
            _download(h, api, blobs, sha, size)

        def raw_download(get_url: str = get_url) -> None:
            response = blobs.get(get_url)
            response.raise_for_status()
            assert len(response.content) == size

        pairs: list[tuple[str, Callable[[], None]]] = [
            ("up", upload),
            ("raw_up", raw_upload),
            ("down", download),
            ("raw_down", raw_download),
        ]
        if n % 2:  # raw first every other round
            pairs = [pairs[1], pairs[0], pairs[3], pairs[2]]
        for name, call in pairs:
            started = time.perf_counter()
            call()
            ms[name].append(_since(started))
        # moto keeps objects in memory: 30 rounds of 5 MB twice would hold 300 MB.
        # The bucket is versioned (the blob sweep): each version goes by its id.
        for key in (raw_key, blob_key(TENANT, sha)):
            listed = s3.list_object_versions(Bucket=bucket, Prefix=key)
            for version in listed.get("Versions", []) + listed.get("DeleteMarkers", []):
                s3.delete_object(Bucket=bucket, Key=key, VersionId=version["VersionId"])
    med = {name: statistics.median(values) for name, values in ms.items()}
    return {
        "upload_p50_ms": med["up"],
        "raw_upload_p50_ms": med["raw_up"],
        "upload_ratio_p50": med["up"] / med["raw_up"],
        "download_p50_ms": med["down"],
        "raw_download_p50_ms": med["raw_down"],
        "download_ratio_p50": med["down"] / med["raw_down"],
        "client_sha256_p50_ms": med["sha"],
    }


def _upload(h: Harness, api: httpx2.Client, blobs: httpx2.Client, data: bytes, sha: str) -> None:
    """The product's upload over HTTP: requestUpload, then the presigned PUT."""
    variables = {"t": TENANT, "s": sha, "n": len(data), "c": CONTENT_TYPE}
    answer = h.post(api, REQUEST_UPLOAD, variables)["requestUpload"]
    assert not answer["alreadyPresent"], "new bytes every round"
    _put(blobs, answer["upload"], data)


def _put(blobs: httpx2.Client, upload: dict[str, Any], data: bytes) -> None:
    headers = {header["name"]: header["value"] for header in upload["headers"]}
    blobs.put(upload["url"], content=data, headers=headers).raise_for_status()


def _download(h: Harness, api: httpx2.Client, blobs: httpx2.Client, sha: str, size: int) -> None:
    """The product's download over HTTP: attachment, then a GET of its URL."""
    answer = h.post(api, ATTACHMENT, {"t": TENANT, "s": sha})["attachment"]
    response = blobs.get(answer["url"])
    response.raise_for_status()
    assert len(response.content) == size == answer["size"]


def _one_attachment(
    h: Harness, blobs: httpx2.Client, engine: LocalS3, data: bytes
) -> dict[str, Any]:
    """One upload and one download through the in-process app, one request at a
    time: the S3 requests the engine answered during each step, and the DynamoDB
    calls and units of each GraphQL call from its request log line."""
    sha = hashlib.sha256(data).hexdigest()
    graphql: list[dict[str, Any]] = []
    steps: dict[str, Counter[str]] = {}

    def step(name: str, call: Callable[[], Any]) -> Any:
        before = len(engine.requests())
        h.captured.clear()
        answer = call()
        steps[name] = Counter(method for method, _, _ in engine.requests()[before:])
        graphql.extend(h.captured)
        return answer

    variables = {"t": TENANT, "s": sha, "n": len(data), "c": CONTENT_TYPE}
    asked = step("requestUpload", lambda: h.post_local(REQUEST_UPLOAD, variables))
    step("put", lambda: _put(blobs, asked["requestUpload"]["upload"], data))
    got = step("attachment", lambda: h.post_local(ATTACHMENT, {"t": TENANT, "s": sha}))
    fetched = step("get", lambda: blobs.get(got["attachment"]["url"]))
    fetched.raise_for_status()
    assert fetched.content == data
    server = steps["requestUpload"] + steps["attachment"]
    client = steps["put"] + steps["get"]
    return {
        "graphql_calls": len(graphql),
        "s3_requests": {name: dict(counts) for name, counts in steps.items()},
        "server_s3_requests": dict(server),
        "client_s3_requests": dict(client),
        # The server GETs a blob only to hash it (api.storage.blobs), which it does
        # only on an engine that does not verify checksums: never on AWS.
        "local_only_s3_requests": {"GET": server["GET"]},
        "dynamodb_calls": sum(int(line["dynamodbCalls"]) for line in graphql),
        "write_units": sum(float(line["writeUnits"]) for line in graphql),
        "read_units": sum(
            float(line["capacityUnits"]) - float(line["writeUnits"]) for line in graphql
        ),
    }


def _aws_cost(size: int, counted: dict[str, Any]) -> dict[str, float]:
    """Dollars for one attachment on AWS, from the requests counted on the local
    engine less the hash read AWS does not make: a month of storage, the upload
    (requestUpload's requests and the PUT), one download (attachment's requests,
    the GET and the bytes out to the internet), and the DynamoDB units of both."""
    asked, put = counted["s3_requests"]["requestUpload"], counted["s3_requests"]["put"]
    checked, get = counted["s3_requests"]["attachment"], counted["s3_requests"]["get"]
    checked = Counter({"HEAD": checked.get("HEAD", 0)})  # the hash GET: local only
    upload = _requests_usd(Counter(asked) + Counter(put))
    download = _requests_usd(checked + Counter(get)) + size / GB * S3_TRANSFER_OUT_GB_USD
    dynamodb = counted["read_units"] * READ_UNIT_USD + counted["write_units"] * WRITE_UNIT_USD
    storage = size / GB * S3_STORAGE_GB_MONTH_USD
    return {
        "storage_month_usd": storage,
        "upload_usd": upload,
        "download_usd": download,
        "dynamodb_usd": dynamodb,
        "first_month_usd": storage + upload + download + dynamodb,
    }


def _requests_usd(requests: Counter[str]) -> float:
    """PUT, POST (and COPY, LIST) in S3's dear class; GET, HEAD and the rest cheap."""
    dear = requests["PUT"] + requests["POST"]
    return dear * S3_PUT_USD + (requests.total() - dear) * S3_GET_USD


def _since(started: float) -> float:
    return (time.perf_counter() - started) * 1000


def print_attachments(a: dict[str, Any]) -> None:
    print()
    print(
        "attachments: product = requestUpload / attachment (GraphQL over HTTP) + the "
        "presigned PUT / GET; raw = the same PUT / GET on the same S3 engine (moto), "
        f"medians of {a['rounds']} rounds"
    )
    header = (
        f"  {'size':<8}{'upload':>9}{'raw':>8}{'ratio':>7}{'download':>10}{'raw':>8}"
        f"{'ratio':>7}{'sha256':>8}  (ms; sha256: the client's, before it asks)"
    )
    print(header)
    for label, s in a["sizes"].items():
        print(
            f"  {label:<8}{s['upload_p50_ms']:>9.2f}{s['raw_upload_p50_ms']:>8.2f}"
            f"{s['upload_ratio_p50']:>7.2f}{s['download_p50_ms']:>10.2f}"
            f"{s['raw_download_p50_ms']:>8.2f}{s['download_ratio_p50']:>7.2f}"
            f"{s['client_sha256_p50_ms']:>8.2f}"
        )
    for label, s in a["sizes"].items():
        steps = {name: _listed(counts) for name, counts in s["s3_requests"].items()}
        print(
            f"  one {label} attachment: {s['graphql_calls']} GraphQL calls; S3 by the server: "
            f"requestUpload {steps['requestUpload']}, attachment {steps['attachment']}; "
            f"by the client: {steps['put']}, {steps['get']}; DynamoDB: "
            f"{s['dynamodb_calls']} calls, {s['read_units']:g} read + {s['write_units']:g} "
            f"write units (request log)"
        )
    print(
        "  the local engine does not verify checksums, so the server GETs a blob it "
        "checks and hashes it (attachment's GET above); AWS S3 verifies the checksum "
        "itself and the server reads nothing: the download ratio includes that read, "
        "the costs below do not"
    )
    print(
        f"  AWS, $ per million attachments ({S3_PRICES_AS_OF}; transfer out past the "
        "free 100 GB a month):"
    )
    print(
        f"  {'size':<8}{'storage/month':>15}{'upload':>10}{'download':>10}{'DynamoDB':>10}"
        f"{'first month':>13}  (download: requests + bytes out)"
    )
    for label, s in a["sizes"].items():
        c = {k: v * 1_000_000 for k, v in s["aws_cost"].items()}
        print(
            f"  {label:<8}{c['storage_month_usd']:>15.2f}{c['upload_usd']:>10.2f}"
            f"{c['download_usd']:>10.2f}{c['dynamodb_usd']:>10.2f}{c['first_month_usd']:>13.2f}"
        )
    r = a["references"]
    print(
        f"  references (Person.photo, {THUMBNAIL_BYTES // 1024} KB photos), medians of "
        f"{r['rounds']} rounds, ms:"
    )
    print(
        f"    createPerson with a new photo {r['write_with_photo_p50_ms']:.2f} vs without "
        f"{r['write_without_p50_ms']:.2f}: {r['write_ratio_p50']:.2f}x; S3 by the server "
        f"for it: {_listed(r['write_s3_requests'])} (the GET: local only; AWS: "
        f"${S3_GET_USD * 1e6:.2f} per million writes with a new photo)"
    )
    print(
        f"    changes page of 100 people with photos, url selected "
        f"{r['page_with_urls_p50_ms']:.2f} ({r['page_urls_ratio_p50']:.2f}x), reference only "
        f"{r['page_with_references_p50_ms']:.2f} ({r['page_references_ratio_p50']:.2f}x), "
        f"vs 100 without photos {r['page_plain_p50_ms']:.2f}"
    )


def _listed(counts: dict[str, int]) -> str:
    return " + ".join(f"{n} {method}" for method, n in sorted(counts.items())) or "none"
