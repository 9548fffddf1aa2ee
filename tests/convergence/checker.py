"""A randomized convergence checker: many devices, one tenant, faults everywhere.

Devices edit at random, go offline and online, crash (losing memory, keeping
their SQLite file), and lose requests and responses; some edits set a photo or
file to a small blob attached offline (uploaded by the device's next push, with
its uploads failing too). At the end all sync and the checker asserts that every
device equals the server, that every acknowledged write is in the final state or
superseded by a later one, that no write was applied twice, that no deletion was
lost, and that every blob the server's entities reference downloads with its own
bytes on every device. A failure names the seed
and prints the history of the entity that diverged.

    scripts/converge --devices 8 --ops 2000 --seed 1 [--seeds 20] [--torn] [--servers N]
        [--retention SECONDS]

With a short retention, devices offline longer than it get RESYNC_REQUIRED and
resync (contract 3.6), unsynced edits and all.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import random
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import boto3
from sync_client import HttpBlobTransport, HttpTransport, SyncClient, SyncReport, TransportError
from sync_client.client import PushOutcome, SyncFailed

from api.auth import make_local_token
from api.domain.catalog import BY_CODE
from api.settings import Settings
from api.storage import keys
from api.storage.table import ensure_table
from scripts.local_engine import LocalEngine, free_port
from scripts.local_s3 import LocalS3, ensure_bucket
from tests.convergence.faults import DeviceCrash, FaultyBlobs, FaultyTransport
from tests.support.servers import api_server
from tests.support.store_state import tenant_state
from tests.support.torn import AWS_FAULTS, StoreFaults, TornEngine

SECRET = "converge-secret-" + "x" * 40
RATES = {"lost_request": 0.05, "lost_response": 0.08, "crash_after_send": 0.03}
ACTIONS = ["edit"] * 6 + ["sync", "sync", "push", "pull", "offline", "crash"]
# Edits that set `photo`/`file` pick one of a few small blobs: devices attach the
# same bytes independently (uploaded once, then alreadyPresent), and a tenant's
# blobs stay few. Each write that sets one costs the server a blob check (on the
# local engine a HeadObject and a read), so runs with them take longer.
ATTACH_RATE = 0.15
BLOB_TYPES = ["image/jpeg", "image/png", "application/pdf"]
WORDS = ["red", "green", "blue", "north", "south", "apple", "pear", "plum", "oak", "elm"]


class Divergence(AssertionError):
    pass


@dataclass
class Event:
    step: int
    device: int
    what: str
    entity: str | None = None
    detail: str = ""

    def __str__(self) -> str:
        return f"  step {self.step:>5} device {self.device}: {self.what} {self.detail}"


@dataclass
class Device:
    index: int
    path: Path
    transport: FaultyTransport
    acks: list[PushOutcome]
    client: SyncClient | None = None

    def open(self, tenant: str) -> SyncClient:
        self.client = SyncClient(
            self.path,
            tenant,
            self.transport,
            on_push_result=self.acks.append,
            blobs=FaultyBlobs(HttpBlobTransport(timeout=10), self.transport),
        )
        return self.client


@dataclass
class Run:
    seed: int
    devices: int
    ops: int
    events: list[Event] = field(default_factory=list)
    stats: dict[str, int] = field(default_factory=lambda: defaultdict(int))


@dataclass(frozen=True)
class BlobPool:
    """The run's blobs (a few random small byte strings, each with its content type),
    and how often an edit sets a photo or file: 0, none (the run is then exactly
    as it was before attachments existed: the same random draws)."""

    items: list[tuple[bytes, str]]
    rate: float

    @classmethod
    def for_seed(cls, seed: int, rate: float) -> BlobPool:
        rng = random.Random(f"blobs {seed}")
        return cls(
            [(rng.randbytes(rng.randint(16, 256)), BLOB_TYPES[i % 3]) for i in range(4)], rate
        )


def _random_changes(
    rng: random.Random, type_name: str, client: SyncClient, pool: BlobPool
) -> dict[str, Any]:
    if type_name == "Person":
        names = ["givenName", "familyName", "occupation", "phoneNumber"]
        chosen = rng.sample(names, rng.randint(1, 2))
        changes: dict[str, Any] = {
            n: (None if rng.random() < 0.1 else f"{rng.choice(WORDS)}{rng.randint(0, 99)}")
            for n in chosen
        }
    else:
        changes = {
            "title": f"{rng.choice(WORDS)} {rng.randint(0, 99)}",
            "completed": rng.random() < 0.5,
        }
    if pool.rate and rng.random() < pool.rate:
        field_name = "photo" if type_name == "Person" else "file"
        if rng.random() < 0.2:
            changes[field_name] = None
        else:
            data, content_type = rng.choice(pool.items)
            changes[field_name] = client.attach(data, content_type)  # offline or not
    return changes


def run_once(
    seed: int,
    devices: int,
    ops: int,
    urls: list[str],
    ddb: Any,
    table: str,
    away_s: float = 0,
    attach_rate: float = ATTACH_RATE,
) -> Run:
    """One seeded run against running servers (device i talks to server i mod n);
    raises Divergence with the seed on failure. With `away_s`, the fleet pauses
    that long twice (a third and two thirds in), past the servers' retention: every
    device's token, offline edits and all, is then older than it. `attach_rate`:
    the share of edits that also set a photo or file (0: none)."""
    rng = random.Random(seed)
    tenant = f"conv-{seed}-{int(time.time() * 1000) % 10**9}"
    token = make_local_token(SECRET, "checker", [tenant], 3600)
    run = Run(seed, devices, ops)
    pool = BlobPool.for_seed(seed, attach_rate)
    with tempfile.TemporaryDirectory() as tmp:
        fleet = []
        for i in range(devices):
            transport = FaultyTransport(
                HttpTransport(urls[i % len(urls)], token), random.Random(seed * 1000 + i), RATES
            )
            device = Device(i, Path(tmp) / f"device{i}.sqlite3", transport, [])
            device.open(tenant)
            fleet.append(device)
        for step in range(ops):
            if away_s and step in (ops // 3, 2 * ops // 3):
                run.events.append(Event(step, -1, f"everyone away {away_s} s"))
                time.sleep(away_s)
            device = rng.choice(fleet)
            _act(run, step, rng, device, tenant, pool)
        _settle(run, fleet, tenant)
        _check(run, fleet, urls[0], token, tenant, ddb, table)
        _check_blobs(run, fleet, pool, _server_state(ddb, table, tenant), Path(tmp))
        for device in fleet:
            assert device.client is not None
            device.client.close()
    return run


def _act(
    run: Run,
    step: int,
    rng: random.Random,
    device: Device,
    tenant: str,
    pool: BlobPool,
) -> None:
    client = device.client
    assert client is not None
    action = rng.choice(ACTIONS)
    run.stats[action] += 1
    try:
        if action == "edit":
            _edit(run, step, rng, device, client, pool)
        elif action in ("sync", "push", "pull"):
            report = client.sync() if action == "sync" else SyncReport()
            if action == "push":
                client.push()
            elif action == "pull":
                client.pull(report)
            run.stats["conflicts"] += report.conflicts
            run.stats["resyncs"] += report.resyncs
        elif action == "offline":
            device.transport.online = not device.transport.online
            run.events.append(
                Event(step, device.index, "online" if device.transport.online else "offline")
            )
        elif action == "crash":
            raise DeviceCrash("killed between operations")
    except (TransportError, SyncFailed) as exc:
        run.events.append(Event(step, device.index, f"{action} failed", detail=str(exc)[:60]))
    except DeviceCrash as exc:
        run.stats["crashes"] += 1
        run.events.append(Event(step, device.index, "crash", detail=str(exc)))
        client.close()
        device.open(tenant)


def _edit(
    run: Run,
    step: int,
    rng: random.Random,
    device: Device,
    client: SyncClient,
    pool: BlobPool,
) -> None:
    visible = client.items()
    roll = rng.random()
    if not visible or roll < 0.3:
        type_name = rng.choice(["Person", "Reminder"])
        entity_id = client.create(type_name, _random_changes(rng, type_name, client, pool))
        run.events.append(Event(step, device.index, "create", entity_id, type_name))
        return
    entity_id = rng.choice(sorted(visible))
    if roll < 0.4:
        client.delete(entity_id)
        run.events.append(Event(step, device.index, "delete", entity_id))
        return
    changes = _random_changes(rng, visible[entity_id]["__typename"], client, pool)
    client.update(entity_id, changes)
    run.events.append(Event(step, device.index, "update", entity_id, str(changes)))


def _settle(run: Run, fleet: list[Device], tenant: str) -> None:
    """Faults off, everyone online; sync until every outbox is empty, then pull once more."""
    for device in fleet:
        device.transport.online = True
        device.transport.enabled = False
    for _ in range(20):
        for device in fleet:
            assert device.client is not None
            _retrying(run, device.client.sync)
        if all(d.client is not None and d.client.pending() == 0 for d in fleet):
            break
    for device in fleet:
        assert device.client is not None
        _retrying(run, device.client.pull)


def _retrying(run: Run, call: Callable[[], object], attempts: int = 10) -> None:
    """`call` as a client does it: the store's faults stay on while devices settle, and
    an answer the server marks `retryable` (UNAVAILABLE: DynamoDB throttled or failed
    past the server's own retries) is tried again after a pause. Any other error fails."""
    for attempt in range(attempts):
        try:
            call()
            return
        except SyncFailed as exc:
            if not all(e.get("extensions", {}).get("retryable") for e in exc.errors):
                raise
            if attempt == attempts - 1:
                raise
            run.stats["settle retries"] += 1
            time.sleep(0.2 * (attempt + 1))


def _server_state(ddb: Any, table: str, tenant: str) -> dict[str, dict[str, Any]]:
    """Every entity of the tenant, live or deleted, as `changes` would return it: from
    the table itself (a first sync returns no deletions, contract 3.6)."""
    state: dict[str, dict[str, Any]] = {}
    for item in tenant_state(ddb, table, tenant).entities.values():
        item_type = BY_CODE[item["ty"]["S"]]
        common = {"id": item["id"]["S"], "changeToken": item["tok"]["S"]}
        if "del" in item:
            state[common["id"]] = {"__typename": "DeletedItem", **common, "type": item_type.code}
            continue
        fields = {k: _plain(v) for k, v in item.get("f", {}).get("M", {}).items()}
        state[common["id"]] = {
            "__typename": item_type.name,
            **common,
            **{name: fields.get(name) for name in item_type.field_names},
        }
    return state


def _plain(value: dict[str, Any]) -> Any:
    """A stored attribute as the API returns it: a map (an attachment's reference)
    as a dict with its size a number, anything else as its one value."""
    if "M" in value:
        return {
            k: int(v["N"]) if "N" in v else next(iter(v.values())) for k, v in value["M"].items()
        }
    return next(iter(value.values()))


def _check_blobs(
    run: Run,
    fleet: list[Device],
    pool: BlobPool,
    server: dict[str, dict[str, Any]],
    tmp: Path,
) -> None:
    """Every blob a live entity references downloads with its bytes on every device,
    and on a new one (which holds none of them)."""
    by_sha = {hashlib.sha256(data).hexdigest(): data for data, _ in pool.items}
    referenced = {
        value["sha256"]
        for item in server.values()
        for value in item.values()
        if isinstance(value, dict) and "sha256" in value
    }
    first = fleet[0].client
    assert first is not None
    fresh = SyncClient(tmp / "fresh.sqlite3", first.tenant_id, first.transport)
    clients = [d.client for d in fleet if d.client is not None] + [fresh]
    try:
        for sha in sorted(referenced):
            for index, client in enumerate(clients):
                if client.open(sha) != by_sha.get(sha):
                    raise Divergence(
                        f"seed {run.seed}: device {index} opened other bytes for blob {sha}"
                    )
    finally:
        fresh.close()
    run.stats["blobs referenced"] = len(referenced)


def _check(
    run: Run, fleet: list[Device], url: str, token: str, tenant: str, ddb: Any, table: str
) -> None:
    server = _server_state(ddb, table, tenant)
    live = {i: item for i, item in server.items() if item["__typename"] != "DeletedItem"}

    def fail(message: str, entity: str | None) -> None:
        history = "\n".join(str(e) for e in run.events if entity is None or e.entity == entity)
        acks = [
            f"  ack device? {a.entry.verb} {a.status} replayed={a.replayed} "
            f"token={(a.item or {}).get('changeToken')} cmid={a.entry.client_mutation_id}"
            for d in fleet
            for a in d.acks
            if a.entry.entity_id == entity
        ]
        raise Divergence(
            f"seed {run.seed} ({run.devices} devices, {run.ops} ops): {message}\n"
            f"history of {entity}:\n{history}\nacknowledgements:\n"
            + "\n".join(acks)
            + f"\nserver: {server.get(entity) if entity else ''}"
        )

    for device in fleet:
        client = device.client
        assert client is not None
        if client.pending():
            fail(f"device {device.index} still has {client.pending()} pending edits", None)
        view = client.items()
        for entity_id in set(view) | set(live):
            expected = live.get(entity_id)
            mine = view.get(entity_id)
            expected_fields = (
                None
                if expected is None
                else {
                    k: v
                    for k, v in expected.items()
                    if k not in ("id", "changeToken", "createdAt", "updatedAt") and v is not None
                }
            )
            if mine != expected_fields:
                fail(f"device {device.index} has {mine}, server has {expected_fields}", entity_id)
        versions = {v.entity_id: v.token for v in client.store.server_versions()}
        for entity_id, item in server.items():
            if item["__typename"] == "DeletedItem" and entity_id not in versions:
                continue  # deleted before this device's first sync (or its resync)
            if versions.get(entity_id) != item["changeToken"]:
                fail(
                    f"device {device.index} holds token {versions.get(entity_id)}, "
                    f"server {item['changeToken']}",
                    entity_id,
                )

    applied: dict[str, list[PushOutcome]] = defaultdict(list)
    by_cmid: dict[str, set[str]] = defaultdict(set)
    for device in fleet:
        for ack in device.acks:
            if ack.status == "APPLIED" and ack.item is not None:
                applied[ack.entry.entity_id].append(ack)
                by_cmid[str(ack.entry.client_mutation_id)].add(ack.item["changeToken"])
    for cmid, tokens in by_cmid.items():
        if len(tokens) != 1:
            fail(f"clientMutationID {cmid} was applied more than once: {tokens}", None)
    all_tokens = [next(iter(t)) for t in by_cmid.values()]
    if len(all_tokens) != len(set(all_tokens)):
        fail("two mutations were acknowledged with the same token", None)
    for entity_id, acks in applied.items():
        final = server.get(entity_id)
        if final is None:
            fail("an acknowledged write is missing from the server", entity_id)
        assert final is not None
        newest = max(a.item["changeToken"] for a in acks if a.item)
        if final["changeToken"] != newest:
            fail(
                f"final token {final['changeToken']} is not the newest acknowledged write {newest}",
                entity_id,
            )
        if any(a.entry.verb == "delete" for a in acks) and final["__typename"] != "DeletedItem":
            fail("an acknowledged deletion was lost", entity_id)
    for entity_id in server:
        if entity_id not in applied:
            fail("the server holds an entity no device was told about", entity_id)
    # Each acknowledged clientMutationID has exactly one stored outcome, with that token.
    for cmid, tokens in by_cmid.items():
        item = ddb.get_item(
            TableName=table,
            ConsistentRead=True,
            Key={"pk": {"S": keys.tenant_pk(tenant)}, "sk": {"S": keys.outcome_sk(cmid)}},
        ).get("Item")
        if item is None or next(iter(tokens)) not in item["out"]["S"]:
            fail(f"the stored outcome of {cmid} does not match its acknowledgement", None)
    run.stats["entities"] = len(server)
    run.stats["acknowledged"] = sum(len(a) for a in applied.values())
    for device in fleet:
        for key, count in device.transport.counts.items():
            run.stats[f"transport {key}"] += count


ENGINES: list[TornEngine] = []
STORE_FAULTS = AWS_FAULTS


@contextmanager
def environment(
    settings: Settings | None = None,
    servers: int = 1,
    torn_seed: int | None = None,
    retention_s: int | None = None,
    faults: StoreFaults | None = None,
) -> Iterator[tuple[list[str], Any, str]]:
    """Servers (and, without settings, their own DynamoDB Local), with `torn_seed`
    through the torn-commit engine (with `faults`, one that also throttles, fails
    and loses answers as DynamoDB does), keeping deletions `retention_s` (None: the
    default); yields their urls, a direct ddb client, the table. The engine, if
    any, is `ENGINES[-1]` meanwhile (its stats: what it injected)."""
    with contextlib_engine(settings) as settings, ExitStack() as stack:
        ddb = boto3.client(
            "dynamodb", endpoint_url=settings.dynamodb_endpoint, region_name=settings.aws_region
        )
        ensure_table(ddb, settings.table_name)
        env = {} if retention_s is None else {"RETENTION_SECONDS": str(retention_s)}
        if torn_seed is not None:
            assert settings.dynamodb_endpoint is not None
            torn = stack.enter_context(
                TornEngine(settings.dynamodb_endpoint, seed=torn_seed, faults=faults)
            )
            ENGINES.append(torn)
            stack.callback(ENGINES.remove, torn)
            env["DYNAMODB_ENDPOINT"] = torn.endpoint
        server_settings = dataclasses.replace(settings, auth_secret=SECRET)
        urls = [
            stack.enter_context(api_server(server_settings, extra_env=env)) for _ in range(servers)
        ]
        yield urls, ddb, settings.table_name


@contextmanager
def contextlib_engine(settings: Settings | None) -> Iterator[Settings]:
    if settings is not None:
        yield settings
        return
    with LocalEngine(free_port(), None, short_lived=True) as engine, LocalS3(free_port()) as blobs:
        local = dataclasses.replace(
            Settings.from_env({}),
            dynamodb_endpoint=engine.endpoint,
            table_name="converge",
            s3_endpoint=blobs.endpoint,
            blob_bucket="converge-blobs",
        )
        local.apply_local_credentials()
        ensure_bucket(local.s3_client(), local.blob_bucket, local.aws_region)
        yield local


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Randomized convergence checker.")
    parser.add_argument("--devices", type=int, default=8)
    parser.add_argument("--ops", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=1, help="first seed")
    parser.add_argument("--seeds", type=int, default=1, help="how many seeds from --seed")
    parser.add_argument(
        "--torn",
        action="store_true",
        help="through the torn-commit engine: transactions applied item by item, with stalls",
    )
    parser.add_argument(
        "--faults",
        action="store_true",
        help="with --torn: the store also throttles, answers 500, loses answers after "
        "applying a write, and answers TransactionInProgressException (STORE_FAULTS)",
    )
    parser.add_argument("--servers", type=int, default=None, help="default 1, 2 with --torn")
    parser.add_argument(
        "--attach-rate",
        type=float,
        default=ATTACH_RATE,
        help=f"share of edits that also set a photo or file (default {ATTACH_RATE}; 0: none)",
    )
    parser.add_argument(
        "--retention",
        type=int,
        default=None,
        help="seconds the servers keep deletions: devices offline longer resync",
    )
    args = parser.parse_args(argv)
    servers = args.servers or (2 if args.torn else 1)
    failures = 0
    torn_seed = args.seed if args.torn else None
    faults = STORE_FAULTS if args.faults else None
    with environment(
        servers=servers, torn_seed=torn_seed, retention_s=args.retention, faults=faults
    ) as (
        urls,
        ddb,
        table,
    ):
        print(f"{servers} server(s){', torn-commit engine' if args.torn else ''}", flush=True)
        for seed in range(args.seed, args.seed + args.seeds):
            started = time.perf_counter()
            try:
                away = 0 if args.retention is None else args.retention + 1
                run = run_once(
                    seed, args.devices, args.ops, urls, ddb, table, away, args.attach_rate
                )
            except Divergence as exc:
                failures += 1
                print(f"DIVERGED {exc}", flush=True)
                continue
            if faults is not None:
                injected = dataclasses.asdict(ENGINES[-1].stats)
                print(f"  store: {injected}", flush=True)
            stats = ", ".join(f"{k} {v}" for k, v in sorted(run.stats.items()))
            print(
                f"seed {seed}: converged in {time.perf_counter() - started:.1f} s ({stats})",
                flush=True,
            )
    print(f"{args.seeds - failures} passed, {failures} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
