"""Silent pushes priced and measured (issue "Apps in the background stay current"):
a backgrounded device-hour with 10 changes and one write pushed to 1,000 devices,
all in, against AppSync's connected device-hour and its 1,000 real-time updates; and
the time from a write's commit to its push published, p50 and p99 under a burst.

Starts its own DynamoDB Local and local AWS engine (moto's server: SNS here), as
the tests do, and prints one table. Measured: the push round as the fan-out
function runs it (`api.realtime.push_fanout.push_all`, in process), its wall time
taken as Lambda's billed milliseconds at serverless.yml's 1,024 MB, and the DynamoDB
units of every call it makes (ReturnConsumedCapacity, read off the client); the
SNS publishes. The burst: 100 tenants of 2 devices each, one write each from 4
threads through the app (`scripts/serve`'s path: the server pushes its own commits),
each push's latency from its change token's instant (a ULID's milliseconds, taken
just before the commit: an upper bound) to SNS's answer; beside it, in the same run,
the writes' own latency (the baseline). Counted, not measured: each push triggers
one sync, the realtime bench's all-in "incremental sync of 10"
(docs/benchmarks/bench.json, `sync_usd`), an upper bound for a push of one write;
a backgrounded device holds no socket, so no connection minutes. Prices:
`scripts/benchmarks/prices.py`.

    scripts/bench-silent-pushes
"""

from __future__ import annotations

import dataclasses
import json
import statistics
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from starlette.testclient import TestClient

from api.app import create_app
from api.auth import make_local_token
from api.domain.tokens import token_ms
from api.push_setup import make_pushes
from api.realtime import push_fanout
from api.realtime.aws_runtime import build_runtime
from api.settings import PROJECT_ROOT, Settings
from api.storage import keys, models
from api.storage.devices import NO_PUSH_DEVICES_ATTRIBUTE
from scripts.benchmarks.harness import SECRET, local_engines
from scripts.benchmarks.prices import (
    APPSYNC_CONNECTION_MINUTE_USD,
    APPSYNC_REALTIME_UPDATE_USD,
    LAMBDA_ARM64_GB_SECOND_USD,
    LAMBDA_BILLED_MS,
    LAMBDA_REQUEST_USD,
    READ_UNIT_USD,
    SNS_MOBILE_PUSH_USD,
    SNS_PUBLISH_REQUEST_USD,
    WRITE_UNIT_USD,
)
from scripts.local_s3 import ensure_push_applications

MEMORY_GB = 1.0  # serverless.yml's memorySize, 1,024 MB
FAN_OUT = 1000
BURST_TENANTS = 100
CHANGES_AN_HOUR = 10
REGISTER = "mutation($i: RegisterPushDeviceInput!) { registerPushDevice(input: $i) { deviceID } }"
CREATE = "mutation($i: CreatePersonInput!) { createPerson(input: $i) { person { changeToken } } }"


_READS = {"Query", "GetItem", "BatchGetItem", "Scan"}


@contextmanager
def units(client: Any) -> Iterator[dict[str, float]]:
    """The read and write units of every call `client` makes meanwhile."""
    counted = {"read": 0.0, "write": 0.0}

    def after(event_name: str = "", parsed: Any = None, **_: Any) -> None:
        consumed = (parsed or {}).get("ConsumedCapacity") or []
        kind = "read" if event_name.rsplit(".", 1)[-1] in _READS else "write"
        for c in consumed if isinstance(consumed, list) else [consumed]:
            counted[kind] += float(c.get("CapacityUnits", 0.0))

    events = client.meta.events
    events.register("after-call.dynamodb", after)
    try:
        yield counted
    finally:
        events.unregister("after-call.dynamodb", after)


def fan_out(settings: Settings, devices: int, rounds: int) -> dict[str, float]:
    """Rounds of the fan-out function's pushes to `devices` (the writer's device one
    more, skipped), each a newer token (a window of 0: each is pushed, as changes an
    hour apart are): the median round's billed ms; units and publishes per round."""
    settings = dataclasses.replace(settings, push_window_seconds=0.0)
    pushes = make_pushes(settings)
    assert pushes is not None
    tenant = f"bench-fan-{devices}"
    for n in range(devices + 1):
        pushes.register(f"m{n % 500}", tenant, "APNS", f"{n:064x}", f"d{n}")
    rt = build_runtime(settings)
    client = models.RecordItem._get_connection().connection.client
    warm = f"bench-warm-{devices}"  # a round first: every client made, as in a warm Lambda
    pushes.register("m0", warm, "APNS", f"{devices + 10**6:064x}", "w0")
    push_fanout.push_all(rt, {warm: ("01JBENCH" + "0" * 18, None, None)})
    times: list[float] = []
    sent = 0
    with units(client) as counted:
        for n in range(rounds):
            start = time.perf_counter()
            sent += push_fanout.push_all(rt, {tenant: (f"01JBENCH{n + 1:018d}", "d0", None)})
            times.append((time.perf_counter() - start) * 1000)
    return {
        "devices": devices,
        "rounds": rounds,
        "sent": sent / rounds,
        "billed_ms": max(LAMBDA_BILLED_MS, statistics.median(times)),
        "read_units": counted["read"] / rounds,
        "write_units": counted["write"] / rounds,
    }


def no_devices(settings: Settings, rounds: int) -> dict[str, float]:
    """A commit of a tenant with no push device, as the fan-out function sees its head
    (marked as without devices by an earlier round): whether `push_fanout.writes`
    gives it a round (now: none); and what that round costs when run anyway (before
    the head's mark, every commit's: the devices' Query): its median ms and units."""
    pushes = make_pushes(settings)
    assert pushes is not None
    rt = build_runtime(settings)
    client = models.RecordItem._get_connection().connection.client
    tenant = "bench-no-devices"
    key = {"pk": {"S": keys.log_pk(tenant)}, "sk": {"S": keys.HEAD_SK}}
    image = {**key, "tok": {"S": "01JBENCH" + "1" * 18}, NO_PUSH_DEVICES_ATTRIBUTE: {"N": "1"}}
    record = {"eventName": "MODIFY", "dynamodb": {"Keys": key, "NewImage": image}}
    given = push_fanout.writes([record])
    times: list[float] = []
    with units(client) as counted:
        for n in range(rounds):
            start = time.perf_counter()
            push_fanout.push_all(rt, {tenant: (f"01JBENCH{n + 1:018d}", None, None)})
            times.append((time.perf_counter() - start) * 1000)
    return {
        "rounds_given": float(len(given)),
        "ms": statistics.median(times),
        "read_units": counted["read"] / rounds,
    }


def burst(settings: Settings) -> dict[str, float]:
    """BURST_TENANTS writes from 4 threads, each tenant's other device pushed: each
    push's latency from its token's instant; the writes' own latency."""
    published: list[tuple[float, str]] = []
    lock = threading.Lock()
    app = create_app(settings)
    with TestClient(app) as http:
        sns = _sns_of(app)
        real = sns.publish

        def timed(endpoint: str, platform: str, message: str) -> str:
            outcome = real(endpoint, platform, message)
            with lock:
                published.append(
                    (time.time(), json.loads(json.loads(message)["default"])["changeToken"])
                )
            return outcome

        sns.publish = timed
        tenants = [f"bench-burst-{n}" for n in range(BURST_TENANTS)]
        token = make_local_token(SECRET, "ann", tenants, 3600)
        headers = {"Authorization": f"Bearer {token}", "content-type": "application/json"}
        for t in tenants:
            for device in ("writer", "reader"):
                body = {
                    "query": REGISTER,
                    "variables": {
                        "i": {
                            "tenantID": t,
                            "platform": "APNS",
                            "deviceToken": f"{hash((t, device)) & (2**256 - 1):064x}",
                            "deviceID": device,
                        }
                    },
                }
                assert "errors" not in http.post("/graphql", json=body, headers=headers).json()
        writes: list[float] = []

        def write(chunk: list[str]) -> None:
            for t in chunk:
                start = time.perf_counter()
                answer = http.post(
                    "/graphql",
                    json={
                        "query": CREATE,
                        "variables": {"i": {"tenantID": t, "person": {"givenName": "A"}}},
                    },
                    headers={**headers, "X-Device-ID": "writer"},
                )
                assert "errors" not in answer.json(), answer.text
                with lock:
                    writes.append((time.perf_counter() - start) * 1000)

        threads = [threading.Thread(target=write, args=(tenants[i::4],)) for i in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        deadline = time.monotonic() + 60
        while len(published) < BURST_TENANTS and time.monotonic() < deadline:
            time.sleep(0.05)
    latencies = [(at - token_ms(token) / 1000) * 1000 for at, token in published]
    q = statistics.quantiles(latencies, n=100, method="inclusive")
    w = statistics.quantiles(writes, n=100, method="inclusive")
    return {
        "pushes": len(published),
        "p50_ms": q[49],
        "p99_ms": q[98],
        "write_p50_ms": w[49],
        "write_p99_ms": w[98],
    }


def _sns_of(app: Any) -> Any:
    """The app's SnsEndpoints (the service's pushes' endpoints)."""
    for route in app.routes:
        endpoint = getattr(route, "endpoint", None)
        service = getattr(endpoint, "_service", None)
        if service is not None and service.pushes is not None:
            return service.pushes._endpoints
    raise RuntimeError("the app has no pushes")


def lambda_usd(billed_ms: float) -> float:
    return LAMBDA_REQUEST_USD + billed_ms / 1000 * MEMORY_GB * LAMBDA_ARM64_GB_SECOND_USD


def per_push_parts(round_: dict[str, float], sync: dict[str, float]) -> dict[str, float]:
    """$ a million pushes of a round to one device, by where the money goes: SNS's
    two charges, the fan-out function's request and duration, the round's DynamoDB
    reads (the devices' Query) and writes (the claims), and the sync the push triggers
    (`sync`: scripts/bench's all-in "incremental sync of 10" row, by its parts: the
    HTTP API's request, Lambda's request and duration, DynamoDB, CloudWatch Logs)."""
    n = round_["devices"]
    m = 1_000_000
    return {
        "SNS Publish": SNS_PUBLISH_REQUEST_USD * m,
        "SNS mobile push delivered": SNS_MOBILE_PUSH_USD * m,
        "fan-out Lambda request": LAMBDA_REQUEST_USD * m / n,
        "fan-out Lambda duration": (lambda_usd(round_["billed_ms"]) - LAMBDA_REQUEST_USD) * m / n,
        "devices' Query (read units)": round_["read_units"] * READ_UNIT_USD * m / n,
        "claims (write units)": round_["write_units"] * WRITE_UNIT_USD * m / n,
        "sync: HTTP API request": sync["http_api"],
        "sync: Lambda": sync["lambda_requests"] + sync["lambda_duration"],
        "sync: DynamoDB": sync["dynamodb"],
        "sync: CloudWatch Logs": sync["cloudwatch"],
    }


def print_breakdown(parts: dict[str, float], appsync_hour: float) -> None:
    """Where a backgrounded device-hour's money goes (CHANGES_AN_HOUR pushes, each
    synced), and what is left once a part is taken off: the floor of SNS and the sync
    alone, and the sync behind a Lambda function URL (no request charge of its own;
    not offered, docs/benchmarks.md "Why no function URL")."""
    hour = {k: v * CHANGES_AN_HOUR for k, v in parts.items()}
    total = sum(hour.values())
    print()
    print(f"| a backgrounded device-hour, {CHANGES_AN_HOUR} pushes | $ a million | / AppSync |")
    print("|---|---|---|")
    for name, usd in hour.items():
        print(f"| {name} | {usd:.2f} | {usd / appsync_hour:.2f} |")
    print(f"| all in | {total:.2f} | {total / appsync_hour:.2f} |")
    floor = sum(v for k, v in hour.items() if k.startswith(("SNS", "sync")))
    print(f"| floor: SNS and the syncs alone | {floor:.2f} | {floor / appsync_hour:.2f} |")
    url = total - hour["sync: HTTP API request"]
    print(
        f"| the syncs behind a function URL (not offered) | {url:.2f} | {url / appsync_hour:.2f} |"
    )
    print(
        f"| 0.8x AppSync's hour | {0.8 * appsync_hour:.2f} | 0.80 "
        f"(${0.8 * appsync_hour / CHANGES_AN_HOUR:.2f} a push) |"
    )


def main() -> int:
    bench = json.loads((PROJECT_ROOT / "docs/benchmarks/bench.json").read_text())
    sync_usd = bench["realtime_cost"]["sync_usd"] / 1_000_000  # per sync, all in
    sync_parts = bench["cost"]["operations"]["incremental sync of 10"]
    with local_engines() as engines:
        base = dataclasses.replace(engines.settings, sns_endpoint=engines.settings.s3_endpoint)
        arns = ensure_push_applications(base.sns_client())
        settings = dataclasses.replace(
            base,
            push_apns_application_arn=arns["APNS"],
            push_fcm_application_arn=arns["FCM"],
            push_devices_per_member=FAN_OUT + 1,
            push_devices_per_tenant=FAN_OUT + 1,
        )
        models.bind(settings)
        one = fan_out(settings, 1, rounds=20)
        many = fan_out(settings, FAN_OUT, rounds=1)
        bare = no_devices(settings, rounds=20)
        timing = burst(settings)
    push_usd = SNS_PUBLISH_REQUEST_USD + SNS_MOBILE_PUSH_USD

    def per_push(round_: dict[str, float]) -> dict[str, float]:
        n = round_["devices"]
        return {
            "sns": push_usd,
            "lambda": lambda_usd(round_["billed_ms"]) / n,
            "dynamodb": (
                round_["read_units"] * READ_UNIT_USD + round_["write_units"] * WRITE_UNIT_USD
            )
            / n,
        }

    small = per_push(one)
    hour = {k: v * CHANGES_AN_HOUR * 1_000_000 for k, v in small.items()}
    hour["syncs"] = sync_usd * CHANGES_AN_HOUR * 1_000_000
    appsync_hour = (
        60 * APPSYNC_CONNECTION_MINUTE_USD + (2 + CHANGES_AN_HOUR) * APPSYNC_REALTIME_UPDATE_USD
    ) * 1_000_000
    big = per_push(many)
    write_1000 = sum(big.values()) * FAN_OUT * 1_000_000
    write_1000_synced = write_1000 + sync_usd * FAN_OUT * 1_000_000
    appsync_1000 = APPSYNC_REALTIME_UPDATE_USD * FAN_OUT * 1_000_000
    total = sum(hour.values())
    print("| $ a million | silent pushes | AppSync | / AppSync |")
    print("|---|---|---|---|")
    print(
        f"| backgrounded device-hour, {CHANGES_AN_HOUR} changes (pushes, fan-out, the syncs) "
        f"| {total:.2f} | {appsync_hour:.2f} (connected) | {total / appsync_hour:.2f} |"
    )
    parts = ", ".join(f"{k} {v:.2f}" for k, v in hour.items())
    print(f"|   of which: {parts} | | | |")
    print(
        f"| one write pushed to {FAN_OUT:,} devices | {write_1000:.2f} | {appsync_1000:.2f} "
        f"| {write_1000 / appsync_1000:.2f} |"
    )
    print(
        f"| the same with the {FAN_OUT:,} syncs it triggers | {write_1000_synced:.2f} | "
        f"{appsync_1000:.2f} | {write_1000_synced / appsync_1000:.2f} |"
    )
    print_breakdown(per_push_parts(one, sync_parts), appsync_hour)
    print()
    print("| measured | value |")
    print("|---|---|")
    for r in (one, many):
        print(
            f"| fan-out round to {int(r['devices'])} device(s), median of {int(r['rounds'])} "
            f"| {r['billed_ms']:.0f} ms, "
            f"{r['read_units']:.1f} RU, {r['write_units']:.1f} WU, {int(r['sent'])} published |"
        )
    print(
        f"| a commit of a tenant with no device: rounds the fan-out runs | "
        f"{int(bare['rounds_given'])} (one run anyway, as every commit's was before the "
        f"head's mark: {bare['ms']:.0f} ms, {bare['read_units']:.1f} RU, a Query) |"
    )
    print(
        f"| commit to push published, {int(timing['pushes'])} pushes of a burst of "
        f"{BURST_TENANTS} writes | p50 {timing['p50_ms']:.0f} ms, p99 {timing['p99_ms']:.0f} ms |"
    )
    print(
        f"| the writes themselves (baseline, same run) | p50 {timing['write_p50_ms']:.0f} ms, "
        f"p99 {timing['write_p99_ms']:.0f} ms; push p99 / write p99 "
        f"{timing['p99_ms'] / timing['write_p99_ms']:.2f} |"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
