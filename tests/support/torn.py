"""A torn-commit DynamoDB for tests: a proxy in front of DynamoDB Local.

DynamoDB Local runs each transaction alone and atomically. Amazon DynamoDB does
not (see docs/ordering.md): a `TransactWriteItems` first prepares every item
(checks its condition and marks it as part of an ongoing transaction), then
commits each item on its own storage node, so a Query running meanwhile can see
some items in their new state and others in their old one, and a stalled
transaction stays half applied until DynamoDB's recovery finishes it.

This proxy forwards every request unchanged except these:

- `TransactWriteItems`, run the way the transactions paper (Idziorek et al.,
  USENIX ATC 2023) describes:
  1. prepare: if any of its items is marked by a transaction still committing,
     the transaction is cancelled with `TransactionConflict` at that position;
     otherwise all its items are marked;
  2. all conditions are checked atomically, by DynamoDB Local running the same
     transaction with every action turned into a `ConditionCheck` (cancellation
     reasons come back unchanged, in position);
  3. commit: each item is applied as a separate single-item write, in random
     order, after a random pause and, rarely, a long stall; each item's mark is
     released as soon as its own write is applied. Reads pass straight through
     and see the transaction half applied. The response comes after the last item.
- `PutItem`, `UpdateItem`, `DeleteItem` on a marked item: `TransactionConflictException`.
- `Query`, read-committed item by item and not one snapshot: the proxy reads the
  key range twice, a random pause apart, and answers each item as one of the two
  reads saw it (present, absent, old or new), chosen at random per item, then
  applies the order, `Limit` and `LastEvaluatedKey` itself. Nothing documents
  that a Query reads its items in key order or at one instant, so a sync must
  not depend on it.

`BatchWriteItem` and every other read pass through unchanged. Randomness is seeded.
Tests can also hold chosen items of the next transactions (`hold`) to force an
interleaving: held items are applied last, once the test releases them.

With `tear=False` it forwards every request unchanged, after `latency_ms`: a
network between the server and DynamoDB, for benchmarks that count round trips.

With `hide_until_committed` it breaks premise P1 of docs/ordering.md (monotonic
visibility), to show what rests on it: while a transaction commits, a Query sees
none of its writes (a new item is absent, an updated one in its state before),
even those already applied and already seen by another transaction's check,
until its last item is applied. (Items it deletes are not brought back.) With
`release_marks_at_prepare` it breaks P2 (marks last until applied): a
transaction's items stop being part of it once its conditions are checked, before
any is applied, so a later transaction touching one is not cancelled.

With `ttl` (`TtlSweep`) it models DynamoDB's TTL as AWS documents it ("Using
time to live": an item is deleted some time after its `exp`, typically within a
few days, and may be read until then): every item written through it with an
`exp` is deleted at a random time after that `exp` (a delay drawn per item, or
never within the test, at `never_rate`), by a sweeper thread, as a plain delete
conditioned on the item's `exp` being unchanged (and not while a transaction is
applying it). `expire_now()` removes every expired item at once, the earliest
TTL may act. DynamoDB Local's own TTL still runs as well (some time after `exp`
too): "never" is not guaranteed, only allowed.

With `faults` (`StoreFaults`), it also does, at random and at the given rates,
what Amazon DynamoDB does now and then and DynamoDB Local never: throttles
(`ThrottlingException`) and answers 500 (`InternalServerError`) before applying
a request; answers a `BatchGetItem` with every key unprocessed; cancels a
transaction with `ThrottlingError`; applies a write and then loses its answer (a
500 after the write); answers `TransactionInProgressException` to a retried
transaction (same `ClientRequestToken`) whose first answer was lost, as DynamoDB
does while the first is still committing; and stalls a request (a latency spike).
"""

from __future__ import annotations

import json
import random
import re
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import urllib3

_TARGET_PREFIX = "DynamoDB_20120810."
_PLAIN_WRITES = {"PutItem", "UpdateItem", "DeleteItem"}
_PLACEHOLDER = re.compile(r"[#:][A-Za-z0-9_]+")
_FORWARDED_HEADERS = ("Content-Type", "X-Amz-Target", "Authorization", "X-Amz-Date")

Key = tuple[str, str]  # (table, canonical JSON of the item's key)


@dataclass(eq=False)
class Action:
    """One action of a transaction: its kind (Put, Update, Delete, ConditionCheck)."""

    kind: str
    body: dict[str, Any]
    key: Key
    key_attributes: dict[str, Any]


@dataclass
class Hold:
    """Items matching `match` are applied only after `release()`."""

    match: Callable[[Action], bool]
    released: threading.Event = field(default_factory=threading.Event)
    reached: threading.Event = field(default_factory=threading.Event)
    times: int = 1

    def release(self) -> None:
        self.released.set()


@dataclass(frozen=True)
class StoreFaults:
    """Rates per request of what DynamoDB does now and then (see the module's text)."""

    throttle: float = 0.0
    server_error: float = 0.0
    lost_after_apply: float = 0.0  # writes only
    in_progress: float = 0.0  # of the retries of a transaction whose answer was lost
    unprocessed: float = 0.0  # a BatchGetItem answered with every key unprocessed
    cancelled_throttling: float = 0.0  # a transaction cancelled with ThrottlingError
    spike: float = 0.0
    spike_seconds: tuple[float, float] = (0.1, 0.6)


# What the fault runs inject, per request: rare enough that syncs make progress,
# frequent enough that a few hundred operations meet each several times.
AWS_FAULTS = StoreFaults(
    throttle=0.02,
    server_error=0.02,
    lost_after_apply=0.03,
    in_progress=0.5,
    unprocessed=0.05,
    cancelled_throttling=0.03,
    spike=0.01,
)

_WRITES = {"PutItem", "UpdateItem", "DeleteItem", "BatchWriteItem", "TransactWriteItems"}
_TTL_ATTRIBUTE = "exp"


@dataclass(frozen=True)
class TtlSweep:
    """When expired items go (see the module's text): each `delay_s` after its `exp`
    (uniform), or never within the test at `never_rate`; swept every `tick_s`."""

    delay_s: tuple[float, float] = (0.0, 5.0)
    never_rate: float = 0.25
    tick_s: float = 0.1


@dataclass
class TornStats:
    transactions: int = 0
    committed: int = 0
    conflicts: int = 0  # cancelled at prepare: an item was part of an ongoing transaction
    condition_failures: int = 0
    plain_write_conflicts: int = 0
    stalls: int = 0
    calls: int = 0  # requests of any kind
    idempotent_retries: int = 0  # a committed transaction's token sent again
    ttl_removed: int = 0  # expired items deleted by the TTL sweep (`TtlSweep`)
    # Injected store faults (`StoreFaults`).
    throttled: int = 0
    server_errors: int = 0
    lost_after_apply: int = 0
    in_progress: int = 0
    unprocessed: int = 0
    cancelled_throttling: int = 0
    spikes: int = 0
    # Seconds spent answering requests: the upstream engine's and any added latency
    # (scripts/bench-push splits a run's time with it).
    answering_s: float = 0.0


class TornEngine:
    """The proxy; use as a context manager. `endpoint` replaces DynamoDB Local's."""

    def __init__(
        self,
        upstream: str,
        seed: int = 0,
        max_pause_ms: float = 3.0,
        stall_rate: float = 0.002,
        stall_seconds: tuple[float, float] = (0.5, 2.0),
        max_query_spread_ms: float = 10.0,
        tear: bool = True,
        latency_ms: float = 0.0,
        faults: StoreFaults | None = None,
        hide_until_committed: bool = False,
        release_marks_at_prepare: bool = False,
        ttl: TtlSweep | None = None,
    ) -> None:
        self.upstream = upstream.rstrip("/")
        self.ttl = ttl
        # Items written with an `exp`: key -> (table, key attributes, exp, when TTL
        # deletes it: None until it has expired, inf for never).
        self._expiring: dict[Key, tuple[str, dict[str, Any], int, float | None]] = {}
        self._ttl_headers: dict[str, str] = {}
        self._ttl_stop = threading.Event()
        self._ttl_thread: threading.Thread | None = None
        self.faults = faults
        self.hide_until_committed = hide_until_committed
        self.release_marks_at_prepare = release_marks_at_prepare
        self._hidden: dict[Key, dict[str, Any] | None] = {}  # key -> its state before
        self._lost_tokens: set[str] = set()  # transactions applied whose answer was lost
        self._committed_tokens: set[str] = set()  # ClientRequestTokens of committed ones
        self.tear = tear
        self.latency_ms = latency_ms
        self.max_pause_ms = max_pause_ms
        self.stall_rate = stall_rate
        self.stall_seconds = stall_seconds
        self.max_query_spread_ms = max_query_spread_ms
        self.stats = TornStats()
        self._rng = random.Random(seed)
        self._rng_lock = threading.Lock()
        self._marks: dict[Key, int] = {}
        self._marks_lock = threading.Lock()
        self._next_tx = 0
        self._holds: list[Hold] = []
        self._key_schemas: dict[str, list[str]] = {}
        self._http = urllib3.PoolManager(maxsize=64, retries=False)
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # --- lifecycle -----------------------------------------------------------

    @property
    def endpoint(self) -> str:
        assert self._server is not None, "start() the engine first"
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> None:
        engine = self

        class Handler(_Handler):
            torn = engine

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        self._ttl_stop.clear()
        self._ttl_thread = threading.Thread(target=self._sweep_expired, daemon=True)
        self._ttl_thread.start()

    def stop(self) -> None:
        self._ttl_stop.set()
        if self._ttl_thread is not None:
            self._ttl_thread.join(5)
            self._ttl_thread = None
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> TornEngine:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @contextmanager
    def hold(self, match: Callable[[Action], bool], times: int = 1) -> Iterator[Hold]:
        """Hold the matching item of the next `times` transactions until released."""
        hold = Hold(match, times=times)
        with self._marks_lock:
            self._holds.append(hold)
        try:
            yield hold
        finally:
            hold.release()
            with self._marks_lock:
                if hold in self._holds:
                    self._holds.remove(hold)

    # --- TTL ----------------------------------------------------------------------

    def expire_now(self, pk: str | None = None) -> int:
        """TTL at its earliest: delete every item tracked whose `exp` has passed (of the
        partition `pk` only, if given). Returns how many."""
        return self._remove_expired(time.time(), at_once=True, pk=pk)

    def _track_expiring(self, operation: str, headers: dict[str, str], request: Any) -> None:
        puts: list[tuple[str, dict[str, Any]]] = []
        if operation == "PutItem":
            puts.append((request["TableName"], request["Item"]))
        elif operation == "TransactWriteItems":
            for entry in request.get("TransactItems", []):
                if "Put" in entry:
                    puts.append((entry["Put"]["TableName"], entry["Put"]["Item"]))
        else:
            for table, requests in request.get("RequestItems", {}).items():
                puts += [(table, r["PutRequest"]["Item"]) for r in requests if "PutRequest" in r]
        for table, item in puts:
            if _TTL_ATTRIBUTE not in item:
                continue
            names = self._key_names(table, headers)
            key = self._key_of(table, item, headers)
            expires = int(item[_TTL_ATTRIBUTE]["N"])
            with self._marks_lock:
                self._ttl_headers = headers
                self._expiring[key] = (table, {n: item[n] for n in names}, expires, None)

    def _sweep_expired(self) -> None:
        while not self._ttl_stop.is_set():
            sweep = self.ttl
            self._ttl_stop.wait(0.1 if sweep is None else sweep.tick_s)
            if sweep is not None:
                self._remove_expired(time.time(), at_once=False)

    def _remove_expired(self, now: float, at_once: bool, pk: str | None = None) -> int:
        sweep = self.ttl or TtlSweep()
        due: list[tuple[Key, str, dict[str, Any], int]] = []
        with self._marks_lock, self._rng_lock:
            for key, (table, key_attributes, expires, when) in list(self._expiring.items()):
                if expires >= now or (pk is not None and key_attributes["pk"] != {"S": pk}):
                    continue
                if when is None:  # just expired: when TTL will get to it
                    when = (
                        float("inf")
                        if self._rng.random() < sweep.never_rate
                        else expires + self._rng.uniform(*sweep.delay_s)
                    )
                    self._expiring[key] = (table, key_attributes, expires, when)
                if (at_once or when <= now) and key not in self._marks:
                    due.append((key, table, key_attributes, expires))
            headers = dict(self._ttl_headers)
        removed = 0
        for key, table, key_attributes, expires in due:
            status, _ = self._forward(
                _TARGET_PREFIX + "DeleteItem",
                headers,
                json.dumps(
                    {
                        "TableName": table,
                        "Key": key_attributes,
                        "ConditionExpression": "#e = :e",
                        "ExpressionAttributeNames": {"#e": _TTL_ATTRIBUTE},
                        "ExpressionAttributeValues": {":e": {"N": str(expires)}},
                    }
                ).encode(),
            )
            with self._marks_lock:
                if self._expiring.get(key, (None, None, None))[2] == expires:
                    del self._expiring[key]
            if status == 200:
                removed += 1
        with self._rng_lock:
            self.stats.ttl_removed += removed
        return removed

    # --- requests ------------------------------------------------------------

    def handle(self, target: str, headers: dict[str, str], body: bytes) -> tuple[int, bytes]:
        operation = target.removeprefix(_TARGET_PREFIX)
        with self._rng_lock:
            self.stats.calls += 1
        if operation in ("PutItem", "TransactWriteItems", "BatchWriteItem"):
            self._track_expiring(operation, headers, json.loads(body))
        started = time.perf_counter()
        try:
            if self.latency_ms:
                time.sleep(self.latency_ms / 1000)
            if self.faults is None:
                return self._handle(operation, target, headers, body)
            return self._with_faults(self.faults, operation, target, headers, body)
        finally:
            with self._rng_lock:
                self.stats.answering_s += time.perf_counter() - started

    def _with_faults(
        self,
        faults: StoreFaults,
        operation: str,
        target: str,
        headers: dict[str, str],
        body: bytes,
    ) -> tuple[int, bytes]:
        token = None
        if operation == "TransactWriteItems":
            token = json.loads(body).get("ClientRequestToken")
        with self._rng_lock:
            spike, before, after, busy = (self._rng.random() for _ in range(4))
            pause = self._rng.uniform(*faults.spike_seconds)
            if token is not None and token in self._lost_tokens and busy < faults.in_progress:
                self.stats.in_progress += 1
                return _error(
                    "TransactionInProgressException",
                    "The transaction with the given request token is already in progress.",
                )
            if before < faults.throttle:
                self.stats.throttled += 1
                return _error(
                    "ThrottlingException", "Rate of requests exceeds the allowed throughput."
                )
            if before < faults.throttle + faults.server_error:
                self.stats.server_errors += 1
                return _internal_error()
            if operation == "BatchGetItem" and busy < faults.unprocessed:
                self.stats.unprocessed += 1
                keys = json.loads(body)["RequestItems"]
                return 200, json.dumps({"Responses": {}, "UnprocessedKeys": keys}).encode()
            if operation == "TransactWriteItems" and busy < faults.cancelled_throttling:
                self.stats.cancelled_throttling += 1
                actions = json.loads(body)["TransactItems"]
                reasons = [{"Code": "ThrottlingError", "Message": "Throughput exceeds the limit"}]
                reasons += [{"Code": "None"}] * (len(actions) - 1)
                return _error(
                    "TransactionCanceledException",
                    "Transaction cancelled, please refer cancellation reasons for specific "
                    "reasons [ThrottlingError]",
                    CancellationReasons=reasons,
                )
            if spike < faults.spike:
                self.stats.spikes += 1
        if spike < faults.spike:
            time.sleep(pause)
        status, data = self._handle(operation, target, headers, body)
        if status == 200 and operation in _WRITES and after < faults.lost_after_apply:
            with self._rng_lock:
                self.stats.lost_after_apply += 1
                if token is not None:
                    self._lost_tokens.add(token)
            return _internal_error()  # applied; the answer is lost
        return status, data

    def _handle(
        self, operation: str, target: str, headers: dict[str, str], body: bytes
    ) -> tuple[int, bytes]:
        if not self.tear:
            return self._forward(target, headers, body)
        if operation == "TransactWriteItems":
            return self._transact_write(headers, json.loads(body))
        if operation == "Query" and self.max_query_spread_ms > 0:
            return self._spread_query(headers, json.loads(body))
        if operation in _PLAIN_WRITES:
            request = json.loads(body)
            item = request.get("Key") or request.get("Item")
            key = self._key_of(request["TableName"], item, headers)
            with self._marks_lock:
                if key in self._marks:
                    self.stats.plain_write_conflicts += 1
                    return _error(
                        "TransactionConflictException",
                        "Transaction is ongoing for the item",
                    )
        return self._forward(target, headers, body)

    def _forward(self, target: str, headers: dict[str, str], body: bytes) -> tuple[int, bytes]:
        sent = {name: headers[name] for name in _FORWARDED_HEADERS if name in headers}
        sent["X-Amz-Target"] = target
        response = self._http.request("POST", self.upstream + "/", body=body, headers=sent)
        return response.status, response.data

    def _call(self, headers: dict[str, str], operation: str, request: dict[str, Any]) -> Any:
        status, data = self._forward(
            _TARGET_PREFIX + operation, headers, json.dumps(request).encode()
        )
        if status != 200:
            raise RuntimeError(f"torn engine: {operation} failed upstream: {data[:300]!r}")
        return json.loads(data)

    def _transact_write(
        self, headers: dict[str, str], request: dict[str, Any]
    ) -> tuple[int, bytes]:
        # AWS: "multiple identical calls [with one ClientRequestToken] have the same
        # effect as one single call" for 10 minutes: a retry of a transaction that
        # committed (its answer lost) succeeds again without applying anything.
        token = request.get("ClientRequestToken")
        with self._marks_lock:
            if token is not None and token in self._committed_tokens:
                self.stats.idempotent_retries += 1
                return 200, b"{}"
        actions = [self._action(entry, headers) for entry in request["TransactItems"]]
        with self._marks_lock:
            self.stats.transactions += 1
            busy = [action.key in self._marks for action in actions]
            if any(busy):
                self.stats.conflicts += 1
                return _cancelled(busy)
            self._next_tx += 1
            tx = self._next_tx
            for action in actions:
                self._marks[action.key] = tx
        try:
            status, data = self._forward(
                _TARGET_PREFIX + "TransactWriteItems",
                headers,
                json.dumps({"TransactItems": [_as_check(a) for a in actions]}).encode(),
            )
        except BaseException:
            self._unmark(actions, tx)
            raise
        if status != 200:
            self._unmark(actions, tx)
            self.stats.condition_failures += 1
            return status, data
        if self.release_marks_at_prepare:
            self._unmark(actions, tx)
        hidden = self._hide(headers, actions) if self.hide_until_committed else []
        try:
            units = self._commit(headers, actions, tx)
        finally:
            with self._marks_lock:
                for key in hidden:
                    self._hidden.pop(key, None)
        with self._marks_lock:
            self.stats.committed += 1
            if token is not None:
                self._committed_tokens.add(token)
        response: dict[str, Any] = {}
        if request.get("ReturnConsumedCapacity") in ("TOTAL", "INDEXES"):
            response["ConsumedCapacity"] = [
                {"TableName": table, "CapacityUnits": total} for table, total in units.items()
            ]
        return 200, json.dumps(response).encode()

    def _hide(self, headers: dict[str, str], actions: list[Action]) -> list[Key]:
        """Remember the state before the transaction of each item it writes."""
        hidden = []
        for action in actions:
            if action.kind == "ConditionCheck":
                continue
            table = action.key[0]
            before = self._call(
                headers,
                "GetItem",
                {"TableName": table, "Key": action.key_attributes, "ConsistentRead": True},
            ).get("Item")
            with self._marks_lock:
                self._hidden[action.key] = before
            hidden.append(action.key)
        return hidden

    def _as_before(self, table: str, items: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """`items` with those of transactions still committing in their state before."""
        with self._marks_lock:
            if not self._hidden:
                return items
            hidden = dict(self._hidden)
        shown = []
        for item in items:
            key = self._key_of(table, item)
            if key not in hidden:
                shown.append(item)
            elif hidden[key] is not None:
                shown.append(hidden[key])
        return shown

    def _spread_query(self, headers: dict[str, str], request: dict[str, Any]) -> tuple[int, bytes]:
        """A Query whose items are each read at some instant of its run (see above)."""
        table = request["TableName"]
        names = self._key_names(table, headers)
        unlimited = {k: v for k, v in request.items() if k != "Limit"}
        with self._rng_lock:
            spread = self._rng.uniform(0, self.max_query_spread_ms) / 1000
        early = self._query_all(headers, unlimited)
        time.sleep(spread)
        late = self._query_all(headers, unlimited)
        if early is None or late is None:  # an error: let DynamoDB Local say it
            return self._forward(_TARGET_PREFIX + "Query", headers, json.dumps(request).encode())
        seen: dict[str, list[dict[str, Any] | None]] = {}
        for item in early:
            seen[self._key_of(table, item)[1]] = [item, None]
        for item in late:
            seen.setdefault(self._key_of(table, item)[1], [None, None])[1] = item
        with self._rng_lock:
            chosen = [pair[self._rng.randrange(2)] for pair in seen.values()]
        items = self._as_before(table, [item for item in chosen if item is not None])
        sort_key = names[1] if len(names) > 1 else names[0]
        items.sort(
            key=lambda item: next(iter(item[sort_key].values())),
            reverse=request.get("ScanIndexForward", True) is False,
        )
        response: dict[str, Any] = {}
        limit = request.get("Limit")
        if limit is not None and len(items) >= limit:
            # DynamoDB returns a LastEvaluatedKey whenever it stops at the Limit.
            items = items[:limit]
            response["LastEvaluatedKey"] = {name: items[-1][name] for name in names}
        response.update(Items=items, Count=len(items), ScannedCount=len(items))
        if request.get("ReturnConsumedCapacity") in ("TOTAL", "INDEXES"):
            size = sum(len(json.dumps(item)) for item in items)
            units = max(1, -(-size // 4096)) * (1.0 if request.get("ConsistentRead") else 0.5)
            response["ConsumedCapacity"] = {"TableName": table, "CapacityUnits": units}
        return 200, json.dumps(response).encode()

    def _query_all(
        self, headers: dict[str, str], request: dict[str, Any]
    ) -> list[dict[str, Any]] | None:
        items: list[dict[str, Any]] = []
        page = dict(request)
        while True:
            status, data = self._forward(
                _TARGET_PREFIX + "Query", headers, json.dumps(page).encode()
            )
            if status != 200:
                return None
            result = json.loads(data)
            items += result.get("Items", [])
            if "LastEvaluatedKey" not in result:
                return items
            page["ExclusiveStartKey"] = result["LastEvaluatedKey"]

    def _commit(self, headers: dict[str, str], actions: list[Action], tx: int) -> dict[str, float]:
        with self._rng_lock:
            order = self._rng.sample(actions, len(actions))
            pauses = [self._rng.uniform(0, self.max_pause_ms) / 1000 for _ in order]
            stalls = [
                self._rng.uniform(*self.stall_seconds)
                if self._rng.random() < self.stall_rate
                else 0
                for _ in order
            ]
        held = self._claim_holds(actions)
        order = [a for a in order if a not in held] + [a for a in order if a in held]
        units: dict[str, float] = {}
        for action, pause, stall in zip(order, pauses, stalls, strict=True):
            if action in held:
                hold = held[action]
                hold.reached.set()
                hold.released.wait()
            time.sleep(pause)
            if stall:
                self.stats.stalls += 1
                time.sleep(stall)
            consumed = self._apply(headers, action)
            table = action.key[0]
            units[table] = units.get(table, 0.0) + 2 * consumed  # transactional: 2x
            with self._marks_lock:
                if self._marks.get(action.key) == tx:
                    del self._marks[action.key]
        return units

    def _apply(self, headers: dict[str, str], action: Action) -> float:
        body, table = action.body, action.key[0]
        common = {"TableName": table, "ReturnConsumedCapacity": "TOTAL"}
        if action.kind == "ConditionCheck":
            return 0.0
        if action.kind == "Put":
            result = self._call(headers, "PutItem", {**common, "Item": body["Item"]})
        elif action.kind == "Delete":
            result = self._call(headers, "DeleteItem", {**common, "Key": body["Key"]})
        else:
            expression = body["UpdateExpression"]
            update = {**common, "Key": body["Key"], "UpdateExpression": expression}
            update.update(_placeholders(body, expression))
            result = self._call(headers, "UpdateItem", update)
        return float(result.get("ConsumedCapacity", {}).get("CapacityUnits", 0.0))

    def _claim_holds(self, actions: list[Action]) -> dict[Action, Hold]:
        held: dict[Action, Hold] = {}
        with self._marks_lock:
            for hold in list(self._holds):
                for action in actions:
                    if hold.times > 0 and hold.match(action) and action not in held:
                        held[action] = hold
                        hold.times -= 1
        return held

    def _unmark(self, actions: list[Action], tx: int) -> None:
        with self._marks_lock:
            for action in actions:
                if self._marks.get(action.key) == tx:
                    del self._marks[action.key]

    def _action(self, entry: dict[str, Any], headers: dict[str, str]) -> Action:
        ((kind, body),) = entry.items()
        table = body["TableName"]
        item = body.get("Key") or body["Item"]
        names = self._key_names(table, headers)
        return Action(kind, body, self._key_of(table, item, headers), {n: item[n] for n in names})

    def _key_names(self, table: str, headers: dict[str, str] | None) -> list[str]:
        names = self._key_schemas.get(table)
        if names is None:
            described = self._call(headers or {}, "DescribeTable", {"TableName": table})
            names = [k["AttributeName"] for k in described["Table"]["KeySchema"]]
            self._key_schemas[table] = names
        return names

    def _key_of(
        self, table: str, item: dict[str, Any], headers: dict[str, str] | None = None
    ) -> Key:
        names = self._key_names(table, headers)
        return table, json.dumps([item[name] for name in names], sort_keys=True)


def _as_check(action: Action) -> dict[str, Any]:
    """The action as a ConditionCheck with the same condition (a tautology if none)."""
    body, key = action.body, action.key_attributes
    check: dict[str, Any] = {"TableName": action.key[0], "Key": key}
    condition = body.get("ConditionExpression")
    if condition is None:
        name = next(iter(key))
        check["ConditionExpression"] = "attribute_exists(#k) OR attribute_not_exists(#k)"
        check["ExpressionAttributeNames"] = {"#k": name}
    else:
        check["ConditionExpression"] = condition
        check.update(_placeholders(body, condition))
        if "ReturnValuesOnConditionCheckFailure" in body:
            check["ReturnValuesOnConditionCheckFailure"] = body[
                "ReturnValuesOnConditionCheckFailure"
            ]
    return {"ConditionCheck": check}


def _placeholders(body: dict[str, Any], expression: str) -> dict[str, Any]:
    """The expression attribute names and values that `expression` uses (DynamoDB
    rejects unused ones)."""
    used = set(_PLACEHOLDER.findall(expression))
    out: dict[str, Any] = {}
    names = {k: v for k, v in body.get("ExpressionAttributeNames", {}).items() if k in used}
    values = {k: v for k, v in body.get("ExpressionAttributeValues", {}).items() if k in used}
    if names:
        out["ExpressionAttributeNames"] = names
    if values:
        out["ExpressionAttributeValues"] = values
    return out


def _error(code: str, message: str, **extra: Any) -> tuple[int, bytes]:
    body = {"__type": f"com.amazonaws.dynamodb.v20120810#{code}", "message": message, **extra}
    return 400, json.dumps(body).encode()


def _internal_error() -> tuple[int, bytes]:
    body = {
        "__type": "com.amazonaws.dynamodb.v20120810#InternalServerError",
        "message": "Internal server error",
    }
    return 500, json.dumps(body).encode()


def _cancelled(busy: list[bool]) -> tuple[int, bytes]:
    reasons = [
        {"Code": "TransactionConflict", "Message": "Transaction is ongoing for the item"}
        if b
        else {"Code": "None"}
        for b in busy
    ]
    codes = ", ".join(r["Code"] for r in reasons)
    return _error(
        "TransactionCanceledException",
        f"Transaction cancelled, please refer cancellation reasons for specific reasons [{codes}]",
        CancellationReasons=reasons,
    )


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # Headers and body go out in two writes; with Nagle's algorithm the second
    # waits for the client's delayed ACK, about 40 ms a request.
    disable_nagle_algorithm = True
    torn: TornEngine

    def do_POST(self) -> None:  # noqa: N802 - http.server's naming
        length = int(self.headers.get("Content-Length", 0))
        body = self.rfile.read(length)
        headers = {name: value for name, value in self.headers.items()}
        target = self.headers.get("X-Amz-Target", "")
        try:
            status, data = self.torn.handle(target, headers, body)
        except Exception as exc:  # surfaced to the client as a 500, like a broken engine
            status, data = 500, json.dumps({"message": f"torn engine: {exc}"}).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/x-amz-json-1.0")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("x-amzn-RequestId", "torn")
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:  # noqa: N802 - DynamoDB answers a bare GET with 400
        self.send_response(400)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        pass
