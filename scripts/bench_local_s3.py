"""`scripts/bench-local-s3`: the local S3 engine as `scripts/serve` runs it (its state
kept in a directory), started on a store of `--kept` objects of other tenants and
`--blobs` blobs of one tenant (written in process by moto's own code, as the engine
would keep them: 50,000 uploads over HTTP take most of an hour on a loaded 2-core
machine), which the API's `deleteTenant` then deletes; then `--rounds` more rounds of
`--refill` blobs uploaded over HTTP and the tenant deleted again; then a restart.
Prints a table: the engine's resident memory after each step, each deletion's calls
and time (and any call that failed), the store's size, the restart's load time and
what is left; saves the rows as JSON in `.bench-results/` (`--out DIR` elsewhere) and
writes docs/attachments.md's figures of the engine's memory from it
(scripts/benchmarks/local_s3.py; `--page DIR` elsewhere)."""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import hashlib
import os
import shutil
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx2
from starlette.testclient import TestClient

from api.app import create_app
from api.auth import make_local_token
from api.settings import Settings
from api.storage.keys import blob_key
from api.storage.table import ensure_table
from scripts.benchmarks import local_s3
from scripts.benchmarks.page import commit, machine
from scripts.local_engine import LocalEngine, free_port
from scripts.local_s3 import LocalS3, ensure_bucket
from scripts.moto_s3 import Store, patch_moto

DELETE = "mutation($t: ID!) { deleteTenant(tenantID: $t, confirm: $t) { removedItems done } }"
BUCKET = "bench-blobs"
SECRET = "bench-local-s3-" + "x" * 40


def _rss_mb(pid: int | None) -> float:
    assert pid is not None
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _fill(endpoint: str, tenant: str, count: int, size: int, salt: str) -> float:
    """`count` blobs of `size` bytes under the tenant, 8 at a time; seconds. Plain
    PUTs with a fixed Authorization header (moto checks no signature): boto3's signing
    would take most of the client's CPU on 2 cores."""
    auth = "AWS4-HMAC-SHA256 Credential=x/20261126/us-east-1/s3/aws4_request, Signature=0"

    def put(numbers: range) -> None:
        with httpx2.Client(base_url=endpoint, timeout=60) as http:
            for n in numbers:
                body = _body(salt, n, size)
                key = blob_key(tenant, hashlib.sha256(body).hexdigest())
                headers = {"Authorization": auth, "Content-Type": "image/jpeg"}
                http.put(f"/{BUCKET}/{key}", content=body, headers=headers).raise_for_status()

    started = time.perf_counter()
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(put, [range(i, count, 8) for i in range(8)]))
    return time.perf_counter() - started


def _body(salt: str, n: int, size: int) -> bytes:
    return (hashlib.sha256(f"{salt}{n}".encode()).digest() * (size // 32 + 1))[:size]


def _prebuilt(store: Path, counts: dict[str, int], size: int, region: str) -> float:
    """A store holding the bucket (versioned) and `counts` blobs of each tenant, made
    by moto's own code in this process; seconds."""
    from moto.s3.models import s3_backends

    started = time.perf_counter()
    patch_moto()
    backend = s3_backends["123456789012"]["aws"]
    backend.create_bucket(BUCKET, region)
    backend.put_bucket_versioning(BUCKET, "Enabled")
    for tenant, count in counts.items():
        for n in range(count):
            body = _body(tenant, n, size)
            key = blob_key(tenant, hashlib.sha256(body).hexdigest())
            backend.put_object(BUCKET, key, body)
    Store(store).compact()
    return time.perf_counter() - started


def _delete(app: TestClient, tenant: str, headers: dict[str, str]) -> dict[str, Any]:
    """deleteTenant until done: calls, failed calls (their codes), seconds."""
    calls, failed, started = 0, [], time.perf_counter()
    while calls < 500:
        calls += 1
        body = app.post(
            "/graphql", json={"query": DELETE, "variables": {"t": tenant}}, headers=headers
        ).json()
        if body.get("errors"):
            failed.append(body["errors"][0].get("extensions", {}).get("code", "?"))
            continue
        if body["data"]["deleteTenant"]["done"]:
            break
    return {"calls": calls, "failed": failed, "seconds": time.perf_counter() - started}


def _count(client: Any, prefix: str) -> int:
    total = 0
    for page in client.get_paginator("list_object_versions").paginate(Bucket=BUCKET, Prefix=prefix):
        total += len(page.get("Versions", [])) + len(page.get("DeleteMarkers", []))
    return total


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--blobs", type=int, default=30_000, help="the deleted tenant's")
    parser.add_argument("--kept", type=int, default=20_000, help="other tenants' objects")
    parser.add_argument("--size", type=int, default=1024, help="bytes of each blob")
    parser.add_argument("--rounds", type=int, default=3, help="deletions after the first")
    parser.add_argument("--refill", type=int, default=2_000, help="blobs a round uploads")
    local_s3.PAGE.options(parser)
    args = parser.parse_args(argv)
    load_at_start = os.getloadavg()[0]  # the page states it: other work inflates times
    directory = Path(tempfile.mkdtemp(prefix="bench-local-s3-"))
    rows: list[tuple[str, str]] = []

    def row(step: str, what: str) -> None:
        rows.append((step, what))
        print(f"{step:<48} {what}", flush=True)

    try:
        with LocalEngine(free_port(), None) as table:
            settings = dataclasses.replace(
                Settings.from_env({}), blob_bucket=BUCKET, auth_secret=SECRET
            )
            total = args.kept + args.blobs
            seconds = _prebuilt(
                directory / "s3",
                {"kept": args.kept, "big": args.blobs},
                args.size,
                settings.aws_region,
            )
            size = (directory / "s3" / "store.bin").stat().st_size
            row(f"store of {total:,} objects written", f"{seconds:.0f} s, {size / 1e6:.0f} MB")
            blobs = LocalS3(free_port(), directory / "s3")
            started = time.perf_counter()
            blobs.start()
            try:
                row(
                    f"engine started on it ({total:,} objects)",
                    f"{time.perf_counter() - started:.0f} s, {_rss_mb(blobs.pid):.0f} MB",
                )
                settings = dataclasses.replace(
                    settings, dynamodb_endpoint=table.endpoint, s3_endpoint=blobs.endpoint
                )
                settings.apply_local_credentials()
                ensure_table(settings.dynamodb_client(), settings.table_name)
                client = settings.s3_client()
                ensure_bucket(client, BUCKET, settings.aws_region)
                token = make_local_token(SECRET, "bench", ["big"], 3600)
                headers = {"Authorization": f"Bearer {token}"}
                with TestClient(create_app(settings, sockets=False)) as app:
                    for n in range(args.rounds + 1):
                        if n:
                            seconds = _fill(blobs.endpoint, "big", args.refill, args.size, f"r{n}")
                            row(
                                f"round {n}: + {args.refill:,} blobs uploaded",
                                f"{_rss_mb(blobs.pid):.0f} MB ({seconds:.0f} s)",
                            )
                        done = _delete(app, "big", headers)
                        failed = f", failed: {done['failed']}" if done["failed"] else ""
                        count = args.refill if n else args.blobs
                        row(
                            f"round {n}: deleteTenant of {count:,} blobs",
                            f"{_rss_mb(blobs.pid):.0f} MB; {done['calls']} calls, "
                            f"{done['seconds']:.0f} s{failed}",
                        )
                left = _count(client, "tenants/big/")
                row("versions left of the deleted tenant", f"{left}")
            finally:
                blobs.stop()
            size = (directory / "s3" / "store.bin").stat().st_size
            row("store before the restart", f"{size / 1e6:.0f} MB")
            started = time.perf_counter()
            blobs.start()
            try:
                row(
                    "restart: loaded and compacted",
                    f"{time.perf_counter() - started:.0f} s, {_rss_mb(blobs.pid):.0f} MB",
                )
                size = (directory / "s3" / "store.bin").stat().st_size
                row("store after the restart", f"{size / 1e6:.0f} MB")
                client = dataclasses.replace(settings, s3_endpoint=blobs.endpoint).s3_client()
                row(
                    "after the restart: deleted tenant / other",
                    f"{_count(client, 'tenants/big/')} / {_count(client, 'tenants/kept/')}"
                    " versions",
                )
            finally:
                blobs.stop()
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    print()
    print(f"| step ({args.size:,}-byte blobs, {os.cpu_count()} cores) | result |")
    print("|---|---|")
    for step, what in rows:
        print(f"| {step} | {what} |")
    local_s3.PAGE.keep(result(args, rows, load_at_start), args.out, args.page)
    return 0


def result(
    args: argparse.Namespace, rows: list[tuple[str, str]], load_at_start: float
) -> dict[str, Any]:
    """The run as it is saved and rendered: its rows as printed."""
    return {
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "command": f"scripts/bench-local-s3 --blobs {args.blobs} --kept {args.kept} "
        f"--size {args.size} --rounds {args.rounds} --refill {args.refill}",
        **commit(),
        "machine": machine(load_at_start),
        "size": args.size,
        "rows": [list(row) for row in rows],
    }


if __name__ == "__main__":
    raise SystemExit(main())
