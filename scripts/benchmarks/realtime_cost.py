"""Realtime on AWS all in, measured: what a device connected for an hour costs, and
what one write costs fanned out to a tenant's devices, beside AppSync's real-time
prices for the same.

The realtime functions (`api.realtime.aws`) run in process through their Lambda
entry points, as API Gateway and the stream's event source mapping invoke them
(tests/deploy/test_realtime_aws.py drives them the same way): the recorded WebSocket
events of tests/deploy/events, the head item of the table's stream as DynamoDB
Local holds it after each write, PostToConnection answered over HTTP by the local
stand-in of the Management API (`tests.support.management_api`), against DynamoDB
Local. Measured: each invocation's time, rounded up to Lambda's billed millisecond,
at serverless.yml's memory (every function has the provider's); the DynamoDB units
of every call the functions' connections client makes (ReturnConsumedCapacity; a
failed conditional write bills a write unit on AWS, counted so); the subscribe's
read of the head through the store (`realtime.subscribe_read_units`, the same
Query); the messages API Gateway meters (each one in, each PostToConnection out,
every one under its 32 KB); the EMF lines the functions log (CloudWatch Logs).

Counted, not measured: 60 connection minutes a device-hour; keepalives: graphql-ws
(client.js) sends `ping` keepAlive ms after the socket opens and keepAlive ms after
each `pong`, whatever else arrives, so docs/realtime.md's 5 minutes are 12 pings an
hour, each a `$default` invocation answered by a pong (2 messages); `$connect` and
`$disconnect` are invocations, not messages. SQS: the fan-out's failure destination
gets a message only for a batch that failed three times, so the drain and SQS cost
nothing on this path. The sync each poke triggers: cost.py's measured all-in
"incremental sync of 10" (an upper bound for a poke of one write).

The other designs (`DESIGNS`) are priced from the same measured parts: a keepAlive
just under the idle timeout; its pong answered by API Gateway (a `ping` route with a
mock integration: no Lambda); a poke carrying the changes (no sync); no socket at
all, polling instead. Prices: `scripts/benchmarks/prices.py`.
"""

from __future__ import annotations

import dataclasses
import json
import math
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any
from unittest import mock

from api import metrics
from api.realtime import aws
from api.realtime.aws_runtime import Runtime, build_runtime
from api.settings import Settings
from api.storage import keys
from scripts.benchmarks.cost import EmfLines, shipped_lambda
from scripts.benchmarks.harness import CREATE, Harness
from scripts.benchmarks.prices import (
    APPSYNC_CONNECTION_MINUTE_USD,
    APPSYNC_REALTIME_UPDATE_USD,
    CLOUDWATCH_LOGS_INGEST_GB_USD,
    CLOUDWATCH_LOGS_STORAGE_GB_MONTH_USD,
    GB,
    LAMBDA_ARM64_GB_SECOND_USD,
    LAMBDA_BILLED_MS,
    LAMBDA_REQUEST_USD,
    READ_UNIT_USD,
    REALTIME_PRICES_AS_OF,
    WEBSOCKET_CONNECTION_MINUTE_USD,
    WEBSOCKET_IDLE_TIMEOUT_MIN,
    WEBSOCKET_MESSAGE_USD,
    WEBSOCKET_METERED_BYTES,
    WRITE_UNIT_USD,
)
from scripts.benchmarks.realtime import subscribe_read_units
from tests.support.management_api import ManagementApi
from tests.support.ws_events import websocket_event as _event

TENANT = "rtcost"
FAN_TENANT = "rtfan"
TENANTS = [TENANT, FAN_TENANT]
SUBSCRIBE = (
    "subscription($t: ID!, $s: ID) { changesAvailable(tenantID: $t, since: $s) "
    "{ tenantID changeToken } }"
)
M = 1_000_000
HOUR_MIN = 60
POKES = 10  # a device-hour's pokes
SHIPPED_KEEPALIVE_MIN = 5  # docs/realtime.md's graphql-ws keepAlive (300_000 ms)
# Just under API Gateway's idle timeout: the longest keepAlive that holds a socket.
LONGEST_KEEPALIVE_MIN = WEBSOCKET_IDLE_TIMEOUT_MIN - 1
# By mode: device-hours driven (each: connect, init, subscribe, 12 pings, 10 writes
# and their fan-outs, disconnect), the devices of one tenant one write is fanned out
# to, and the writes fanned out to them. The smoke's fewest fill every figure.
SIZES = {"smoke": (1, 5, 1), "fast": (10, 1000, 3), "full": (30, 1000, 10)}


@dataclasses.dataclass
class Kind:
    """The invocations of one kind, as measured: sums over `calls`."""

    calls: int = 0
    billed_ms: float = 0.0
    read_units: float = 0.0
    write_units: float = 0.0
    log_bytes: float = 0.0
    messages_out: int = 0

    def mean(self) -> dict[str, float]:
        n = max(self.calls, 1)
        return {
            "calls": self.calls,
            "billed_ms": self.billed_ms / n,
            "read_units": self.read_units / n,
            "write_units": self.write_units / n,
            "log_bytes": self.log_bytes / n,
            "messages_out": self.messages_out / n,
        }


class Units:
    """The read and write units of every call a boto3 DynamoDB client makes (the
    fan-out's calls come from several threads at once)."""

    def __init__(self, client: Any) -> None:
        self.read = self.write = 0.0
        self._lock = threading.Lock()
        client.meta.events.register("provide-client-params.dynamodb", self._ask)
        client.meta.events.register("after-call.dynamodb", self._count)

    def reset(self) -> None:
        self.read = self.write = 0.0

    @staticmethod
    def _ask(params: dict[str, Any], context: dict[str, Any], **_: Any) -> None:
        params.setdefault("ReturnConsumedCapacity", "TOTAL")
        context["transact_items"] = len(params.get("TransactItems", ()))

    def _count(self, parsed: dict[str, Any], model: Any, context: dict[str, Any], **_: Any) -> None:
        read = write = 0.0
        if "Error" in parsed:
            # AWS: a write whose condition fails still consumes write units (1 per KB).
            failed = ("ConditionalCheckFailedException", "TransactionCanceledException")
            write = 1.0 if parsed["Error"].get("Code") in failed else 0.0
        elif model.name == "TransactWriteItems":
            # AWS bills a transaction 2 units per KB of each item (DynamoDB Local
            # reports a plain write's): every item here is under 1 KB.
            write = 2.0 * context.get("transact_items", 0)
        else:
            consumed = parsed.get("ConsumedCapacity") or {}
            units = float(consumed.get("CapacityUnits", 0.0))
            if model.name in ("GetItem", "Query", "BatchGetItem"):
                read = units
            else:
                write = units
        with self._lock:
            self.read += read
            self.write += write


class Driver:
    """The realtime functions' entry points, each invocation timed and its units,
    messages and log bytes counted by kind."""

    def __init__(self, rt: Runtime, api: ManagementApi, emf: EmfLines) -> None:
        self.rt, self.api, self.emf = rt, api, emf
        self.units = Units(rt.connections.client)
        self.kinds: dict[str, Kind] = {}
        self.messages_in = 0

    def invoke(self, kind: str, handler: Callable[..., Any], event: dict[str, Any]) -> Any:
        self.units.reset()
        self.emf.clear()
        posted = len(self.api.posts)
        started = time.perf_counter()
        answer = handler(event, None)
        ms = (time.perf_counter() - started) * 1000
        k = self.kinds.setdefault(kind, Kind())
        k.calls += 1
        k.billed_ms += math.ceil(ms / LAMBDA_BILLED_MS) * LAMBDA_BILLED_MS
        k.read_units += self.units.read
        k.write_units += self.units.write
        k.log_bytes += self.emf.bytes
        sent = self.api.posts[posted:]
        k.messages_out += len(sent)
        for _, message in sent:
            assert len(json.dumps(message)) <= WEBSOCKET_METERED_BYTES, message
        return answer

    def connect(self, device: str) -> None:
        answer = self.invoke("$connect", aws.websocket_handler, _event("ws_connect.json", device))
        assert answer["statusCode"] == 200, answer

    def send(self, kind: str, device: str, message: dict[str, Any]) -> None:
        self.messages_in += 1
        event = _event("ws_message.json", device, message)
        assert len(event["body"]) <= WEBSOCKET_METERED_BYTES
        assert self.invoke(kind, aws.websocket_handler, event) == {"statusCode": 200}

    def subscribed(self, tenant: str, since: str | None, authorization: str) -> str:
        """A new device with one subscription to `tenant`: its connection id."""
        device = f"c{uuid.uuid4().hex[:10]}="  # API Gateway ids are base64-like
        self.connect(device)
        init = {"type": "connection_init", "payload": {"Authorization": authorization}}
        self.send("connection_init", device, init)
        payload = {"query": SUBSCRIBE, "variables": {"t": tenant, "s": since}}
        self.send("subscribe", device, {"id": "s", "type": "subscribe", "payload": payload})
        return device

    def disconnect(self, device: str) -> None:
        self.invoke("$disconnect", aws.websocket_handler, _event("ws_disconnect.json", device))

    def fan_out(self, kind: str, record: dict[str, Any]) -> int:
        answer = self.invoke(kind, aws.stream_handler, {"Records": [record]})
        sent: int = answer["sent"]
        return sent


@contextmanager
def lambda_runtime(settings: Settings, url: str, emf: EmfLines) -> Iterator[Runtime]:
    """The realtime functions' runtime, their Management API at `url`, their EMF
    lines into `emf`: what `api.realtime.aws`'s entry points use while in here."""
    rt = build_runtime(dataclasses.replace(settings, websocket_management_url=url))
    rt = dataclasses.replace(rt, metrics=metrics.Emf(emf))
    with mock.patch.object(aws, "_runtime", lambda: rt):
        yield rt


def _write(h: Harness, tenant: str) -> dict[str, Any]:
    """A write of the tenant, then its head item as the stream's record carries it
    (NEW_IMAGE; the event source mapping lets only head items through)."""
    h.post_local(CREATE, {"i": {"tenantID": tenant, "person": {}}})
    key = {"pk": {"S": keys.log_pk(tenant)}, "sk": {"S": keys.HEAD_SK}}
    item = h.ddb.get_item(TableName=h.settings.table_name, Key=key, ConsistentRead=True)["Item"]
    return {
        "eventName": "MODIFY",
        "eventSource": "aws:dynamodb",
        "dynamodb": {"Keys": key, "NewImage": item, "StreamViewType": "NEW_IMAGE"},
    }


def measure_realtime_cost(h: Harness, cost: dict[str, Any], mode: str) -> dict[str, Any]:
    """Drive the realtime functions; price a device-hour and a fan-out, by design."""
    print("==> realtime all in: the realtime functions, in process", flush=True)
    hours, fan, fan_writes = SIZES[mode]
    memory_mb, _ = shipped_lambda()
    authorization = h.headers["Authorization"]
    emf = EmfLines()
    with ManagementApi().running() as api, lambda_runtime(h.settings, api.url, emf) as rt:
        d = Driver(rt, api, emf)
        head = _write(h, TENANT)
        since = head["dynamodb"]["NewImage"]["tok"]["S"]
        for _ in range(hours):
            device = d.subscribed(TENANT, since, authorization)
            for _ in range(HOUR_MIN // SHIPPED_KEEPALIVE_MIN):
                d.send("ping", device, {"type": "ping"})
            for _ in range(POKES):
                record = _write(h, TENANT)
                assert d.fan_out("fan-out, 1 subscriber", record) == 1
                since = record["dynamodb"]["NewImage"]["tok"]["S"]
            d.disconnect(device)
        head_read_units = subscribe_read_units(h.ddb, h.settings.table_name, TENANT)
        devices = [d.subscribed(FAN_TENANT, None, authorization) for _ in range(fan)]
        for _ in range(fan_writes):
            assert d.fan_out(f"fan-out, {fan} subscribers", _write(h, FAN_TENANT)) == fan
        for device in devices:
            d.disconnect(device)
    kinds = {name: k.mean() for name, k in d.kinds.items()}
    ops = cost["operations"]
    sync_usd = ops["incremental sync of 10"]["total"] / M
    poll_usd = ops["poll, no changes"]["total"] / M
    parts = Parts(kinds, memory_mb / 1024, head_read_units, sync_usd)
    designs = {design.name: parts.device_hour(design) for design in DESIGNS}
    appsync = designs[DESIGNS[0].name]["appsync"]
    fan_kind = kinds[f"fan-out, {fan} subscribers"]
    fan_out = {
        "a poke then a sync": parts.fan_out(fan, fan_kind, sync=True),
        "the poke carries the changes": parts.fan_out(fan, fan_kind, sync=False),
    }
    return {
        "memory_mb": memory_mb,
        "invocations": kinds,
        "subscribe_head_read_units": head_read_units,
        "sync_usd": sync_usd * M,
        "poll_usd": poll_usd * M,
        "device_hour": designs,
        "socket_floor": parts.socket_floor(),
        "fan_out": fan_out,
        "polling": polling(poll_usd, sync_usd, appsync),
    }


@dataclasses.dataclass(frozen=True)
class Design:
    """How a device holds its socket and what a poke makes it do."""

    name: str
    keepalive_min: float  # graphql-ws keepAlive: a ping, and its pong, this often
    pong_by_lambda: bool  # answered by the function ($default), or by API Gateway
    sync_per_poke: bool  # the poke names a token and the device syncs; or it carries the data


DESIGNS = [
    Design("shipped: keepAlive 5 min, a poke then a sync", SHIPPED_KEEPALIVE_MIN, True, True),
    Design("keepAlive 9 min", LONGEST_KEEPALIVE_MIN, True, True),
    Design("+ pong from a mock route (no Lambda)", LONGEST_KEEPALIVE_MIN, False, True),
    Design("+ the poke carries the changes (no sync)", LONGEST_KEEPALIVE_MIN, False, False),
]


class Parts:
    """The measured parts, priced."""

    def __init__(
        self, kinds: dict[str, dict[str, float]], gb: float, head_read: float, sync_usd: float
    ) -> None:
        self.kinds, self.gb, self.head_read, self.sync_usd = kinds, gb, head_read, sync_usd

    def invocations(self, counts: dict[str, float]) -> dict[str, float]:
        """Dollars of `counts` invocations by kind: Lambda, DynamoDB, CloudWatch Logs."""
        lam = ddb = logs = 0.0
        per_gb_ms = self.gb * LAMBDA_ARM64_GB_SECOND_USD / 1000
        for name, n in counts.items():
            k = self.kinds[name]
            lam += n * (LAMBDA_REQUEST_USD + k["billed_ms"] * per_gb_ms)
            ddb += n * (k["read_units"] * READ_UNIT_USD + k["write_units"] * WRITE_UNIT_USD)
            logs += (
                n
                * k["log_bytes"]
                / GB
                * (CLOUDWATCH_LOGS_INGEST_GB_USD + CLOUDWATCH_LOGS_STORAGE_GB_MONTH_USD)
            )
        return {"lambda": lam, "dynamodb": ddb, "cloudwatch": logs}

    def device_hour(self, design: Design) -> dict[str, Any]:
        """$ per million device-hours: connect, init, subscribe, keepalives, POKES
        pokes (a fan-out each, attributed wholly to the device: its tenant's only
        subscriber), disconnect; against AppSync's connection minutes and real-time
        updates (the connect, the subscription's start, the pokes, carrying the data:
        no sync)."""
        pings = HOUR_MIN / design.keepalive_min
        counts = {"$connect": 1.0, "connection_init": 1.0, "subscribe": 1.0, "$disconnect": 1.0}
        counts["fan-out, 1 subscriber"] = POKES
        if design.pong_by_lambda:
            counts["ping"] = pings
        parts = self.invocations(counts)
        parts["dynamodb"] += self.head_read * READ_UNIT_USD
        # In: connection_init, subscribe, the pings; out: connection_ack, the pokes, the pongs.
        messages = 2 + pings + 1 + POKES + pings
        parts["connection_minutes"] = HOUR_MIN * WEBSOCKET_CONNECTION_MINUTE_USD
        parts["messages"] = messages * WEBSOCKET_MESSAGE_USD
        parts["sqs"] = 0.0
        parts["sync"] = POKES * self.sync_usd if design.sync_per_poke else 0.0
        out: dict[str, Any] = {k: v * M for k, v in parts.items()}
        out["total"] = sum(out.values())
        out["appsync"] = appsync_device_hour() * M
        out["messages_count"] = messages
        out["lambda_invocations"] = sum(counts.values())
        return out

    def socket_floor(self) -> float:
        """$ per million device-hours that any graphql-transport-ws design holding
        an API Gateway socket for the hour pays at least: the connection minutes, the
        13 messages the protocol needs (connection_init, its ack, subscribe, the
        pokes) and the invocations that set the socket up and take it down (as
        measured); no keepalive (pokes spaced under the idle timeout), no DynamoDB, no
        fan-out's function, no sync."""
        setup = self.invocations(
            {"$connect": 1.0, "connection_init": 1.0, "subscribe": 1.0, "$disconnect": 1.0}
        )
        minutes = HOUR_MIN * WEBSOCKET_CONNECTION_MINUTE_USD
        return (minutes + (3 + POKES) * WEBSOCKET_MESSAGE_USD + setup["lambda"]) * M

    def fan_out(self, devices: int, kind: dict[str, float], sync: bool) -> dict[str, Any]:
        """$ per million writes fanned out to `devices` subscribers of one tenant:
        the fan-out's invocation, its Query and claims, a message each, and (`sync`)
        the sync each device then runs; against AppSync's real-time update each."""
        parts = self.invocations({f"fan-out, {devices} subscribers": 1.0})
        parts["messages"] = devices * WEBSOCKET_MESSAGE_USD
        parts["sqs"] = 0.0
        parts["sync"] = devices * self.sync_usd if sync else 0.0
        out: dict[str, Any] = {k: v * M for k, v in parts.items()}
        out["total"] = sum(out.values())
        out["appsync"] = devices * APPSYNC_REALTIME_UPDATE_USD * M
        out["devices"] = devices
        out["billed_ms"] = kind["billed_ms"]
        out["read_units"] = kind["read_units"]
        out["write_units"] = kind["write_units"]
        return out


def appsync_device_hour() -> float:
    """AppSync: an hour's connection minutes, and as real-time updates the connect,
    the subscription's start and the pokes."""
    return HOUR_MIN * APPSYNC_CONNECTION_MINUTE_USD + (2 + POKES) * APPSYNC_REALTIME_UPDATE_USD


def polling(poll_usd: float, sync_usd: float, appsync: float) -> dict[str, float]:
    """No socket: `changes` every N minutes (at most POKES of an hour's polls find
    changes and are syncs). The interval at which that costs AppSync's device-hour,
    and the cost at 5 minutes."""

    def hour(interval_min: float) -> float:
        polls = HOUR_MIN / interval_min
        return (max(polls - POKES, 0.0) * poll_usd + min(polls, POKES) * sync_usd) * M

    polls_at_par = (appsync / M - POKES * sync_usd) / poll_usd + POKES
    return {
        "every_5_min": hour(5),
        "every_1_min": hour(1),
        "par_interval_min": HOUR_MIN / polls_at_par if polls_at_par > 0 else math.inf,
    }


def print_realtime_cost(r: dict[str, Any]) -> None:
    print(
        f"\nrealtime all in, $ per million device-hours (a device connected an hour, "
        f"{POKES} pokes and their syncs): API Gateway WebSocket + Lambda "
        f"({r['memory_mb']} MB) + DynamoDB + SQS + CloudWatch Logs, against AppSync"
    )
    header = (
        f"{'design':<44}{'conn min':>9}{'msgs':>7}{'Lambda':>8}{'DynamoDB':>9}{'SQS':>5}"
        f"{'CW':>6}{'sync':>7}{'total':>8}{'AppSync':>9}{'AppSync/':>9}"
    )
    print(header)
    print("-" * len(header))
    for name, c in r["device_hour"].items():
        print(
            f"{name:<44}{c['connection_minutes']:>9.2f}{c['messages']:>7.2f}{c['lambda']:>8.2f}"
            f"{c['dynamodb']:>9.2f}{c['sqs']:>5.1f}{c['cloudwatch']:>6.2f}{c['sync']:>7.2f}"
            f"{c['total']:>8.2f}{c['appsync']:>9.2f}{c['appsync'] / c['total']:>9.2f}"
        )
    print(
        f"{'floor of graphql-ws on an API Gateway socket':<44}{'':>65}{r['socket_floor']:>8.2f}"
        f"{c['appsync']:>9.2f}{c['appsync'] / r['socket_floor']:>9.2f}"
    )
    print("$ per million writes, one write of a tenant fanned out to its devices:")
    for name, f in r["fan_out"].items():
        label = f"{f['devices']} devices, {name}"
        print(
            f"{label:<44}{'':>9}{f['messages']:>7.0f}{f['lambda']:>8.2f}{f['dynamodb']:>9.2f}"
            f"{f['sqs']:>5.1f}{f['cloudwatch']:>6.2f}{f['sync']:>7.0f}{f['total']:>8.0f}"
            f"{f['appsync']:>9.0f}{f['appsync'] / f['total']:>9.2f}"
        )
    p = r["polling"]
    print(
        f"no socket, polling `changes`: every 5 min ${p['every_5_min']:.2f}, every minute "
        f"${p['every_1_min']:.2f} per million device-hours; as cheap as AppSync's "
        f"device-hour at one poll every {p['par_interval_min']:.1f} min"
    )
    inv = r["invocations"]
    print(
        "measured per invocation (billed ms, read / write units): "
        + ", ".join(
            f"{name} {k['billed_ms']:.1f} ms {k['read_units']:g}/{k['write_units']:g}"
            for name, k in inv.items()
        )
        + f"; a subscribe's head read {r['subscribe_head_read_units']:g} RCU; the sync a "
        f"poke triggers ${r['sync_usd']:.2f} per million ({REALTIME_PRICES_AS_OF})"
    )
