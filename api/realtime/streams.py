"""Head changes from the table's DynamoDB stream (view type NEW_IMAGE).

Every write updates its tenant's head (`api.storage.keys`), so the head's stream
records are the tenant's commits. AWS documents that a transaction's changes
reach the stream only after the transaction completes ("Amazon DynamoDB
Transactions: How it works"): when a head record is read, every item of that
write is applied, and a sync started afterwards includes it.

`head_changes` reads records as both consumers get them (`GetRecords` locally,
the Lambda event on AWS). `StreamFollower` is the local consumer: a thread that
reads the stream of the table and publishes each head change, so a write on
another server process wakes this one's subscribers. The stream also carries the
servers' own items (`api.realtime.lease`): the reader learns from them of a
server that joins (`announced_servers`) within a poll, not at its next heartbeat.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Collection, Iterable, Mapping
from typing import Any

from api.domain.audiences import UNTOLD, Audience, coalesced, head_audience, merged
from api.realtime.failures import RepeatedFailures
from api.realtime.signals import DELETING, deleting
from api.storage import keys

logger = logging.getLogger("api.realtime")

# GetRecords per shard at most this often: the latency a write on another server
# adds before its poke (stream reads cost per call, not per subscriber).
POLL_INTERVAL_S = 0.25
# New shards (DynamoDB rolls them every few hours) are looked for this often.
DESCRIBE_INTERVAL_S = 10.0
# After an error the follower starts again (and catches up) after this long.
RETRY_WAIT_S = 5.0
# A catch-up reads at most this many heads per BatchGetItem, asking again for the
# keys a throttled call leaves unprocessed this often before restarting.
_BATCH_GET_KEYS = 100
_BATCH_GET_ROUNDS = 5


def head_changes(
    records: Iterable[Mapping[str, Any]], named_deletions: bool = False
) -> dict[str, str]:
    """Tenant -> the newest head token among `records` (others are ignored); DELETING
    for a tenant being deleted (its head carries the deletion's mark), with
    `named_deletions` naming the head's last token (`signals.deleting`)."""
    return {t: token for t, (token, _) in head_pokes(records, named_deletions).items()}


def head_pokes(
    records: Iterable[Mapping[str, Any]], named_deletions: bool = False
) -> dict[str, tuple[str, Audience]]:
    """`head_changes`, each tenant's token with who it pokes: the members whose view
    its heads' transactions changed, merged (`audience_of`)."""
    newest: dict[str, tuple[str, Audience]] = {}
    for record in records:
        if record.get("eventName") not in ("INSERT", "MODIFY"):
            continue
        change = record.get("dynamodb", {})
        tenant_id = keys.tenant_of_head(
            change.get("Keys", {}).get("pk", {}).get("S", ""),
            change.get("Keys", {}).get("sk", {}).get("S", ""),
        )
        image = change.get("NewImage", {})
        token = image.get("tok", {}).get("S")
        if keys.DELETING_ATTRIBUTE in image:
            named = named_deletions and isinstance(token, str)
            token = deleting(token) if named else DELETING
        if tenant_id is None or not isinstance(token, str):
            continue
        audience = None if keys.DELETING_ATTRIBUTE in image else audience_of(image)
        before = newest.get(tenant_id)
        if before is None:
            newest[tenant_id] = (token, audience)
        else:
            newest[tenant_id] = coalesced((token, audience), before)
    return newest


def audience_of(image: Mapping[str, Any]) -> Audience:
    """Whose view a head's transaction changed, from its image (`head_audience`)."""
    # (Imported here: a socket's $connect imports this module, never PynamoDB.)
    from api.storage.codecs import head_from_raw

    return head_audience(head_from_raw(dict(image)))


def announced_servers(records: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    """Server -> its URL, for each server item put among `records` (a heartbeat of a
    server in the stream reader's lease, `api.realtime.lease`)."""
    found: dict[str, str] = {}
    for record in records:
        if record.get("eventName") not in ("INSERT", "MODIFY"):
            continue
        change = record.get("dynamodb", {})
        item_keys = change.get("Keys", {})
        if item_keys.get("pk", {}).get("S") != keys.READERS_PK:
            continue
        server_id = keys.server_of(item_keys.get("sk", {}).get("S", ""))
        url = change.get("NewImage", {}).get("url", {}).get("S")
        if server_id is not None and isinstance(url, str):
            found[server_id] = url
    return found


class StreamFollower:
    """Reads the table's stream from now on and calls `publish(tenant, token,
    audience)` for every head change, until `stop()`. Shards present at the start are read from
    their latest record, shards that appear later from their first.

    Each (re)start catches up: once its iterators are taken, it reads the heads of
    the `subscribed()` tenants and publishes them. A write committed before the
    iterators were taken (while the first subscription was registering, or while
    the follower waited after an error) is in that read; one committed after is in
    the stream. Without it such a write was announced by nobody until the tenant's
    next write. Cost: one consistent read unit per subscribed tenant per restart
    (BatchGetItem, 100 heads a call). `caught_up()` is called after each, so that
    the servers this one hands its pokes to catch up too (`api.realtime.relay`).
    `announced(server, url)` is called for each server item put (the lease's
    heartbeats), so that a reader posts to a server that joins at once."""

    def __init__(
        self,
        dynamodb: Any,
        streams: Any,
        table_name: str,
        publish: Callable[[str, str, Audience], None],
        poll_interval_s: float = POLL_INTERVAL_S,
        subscribed: Callable[[], Collection[str]] = frozenset,
        retry_wait_s: float = RETRY_WAIT_S,
        caught_up: Callable[[], None] = lambda: None,
        announced: Callable[[str, str], None] | None = None,
    ) -> None:
        self._dynamodb = dynamodb
        self._streams = streams
        self._table_name = table_name
        self._publish = publish
        self._poll_interval_s = poll_interval_s
        self._subscribed = subscribed
        self._retry_wait_s = retry_wait_s
        self._caught_up = caught_up  # after each (re)start's catch-up: the relay's cue
        self._announced = announced  # servers' heartbeats: the lease's (a reader's) cue
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None
        self.reads = 0  # GetRecords calls, for the benchmark's cost figures
        self.failures = RepeatedFailures(logger, "reading the table's stream")
        # When (time.monotonic) it was started or last completed a poll of its shards:
        # a lease holder whose reading stands still steps down (api.realtime.lease).
        self.progressed_at = time.monotonic()

    def start(self) -> None:
        if self._thread is None:
            self.progressed_at = time.monotonic()
            self._thread = threading.Thread(target=self._run, name="stream-follower", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stopped.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _run(self) -> None:
        while not self._stopped.is_set():
            try:
                self._follow()
            except Exception as exc:  # a failing stream must not end the process's pokes
                self.failures.failed(exc, f"; restarting every {self._retry_wait_s} s")
                self._stopped.wait(self._retry_wait_s)

    def _follow(self) -> None:
        described = self._dynamodb.describe_table(TableName=self._table_name)["Table"]
        arn = described.get("LatestStreamArn")
        if arn is None:
            logger.warning(
                "table %s has no stream: writes on other servers wake no subscriber here",
                self._table_name,
            )
            self._stopped.wait(60)
            return
        iterators: dict[str, str | None] = {}
        seen: set[str] = set()
        first = True
        next_describe = 0.0
        while not self._stopped.is_set():
            if time.monotonic() >= next_describe:
                for shard in self._shards(arn):
                    shard_id = shard["ShardId"]
                    if shard_id in seen:
                        continue
                    seen.add(shard_id)
                    closed = "EndingSequenceNumber" in shard.get("SequenceNumberRange", {})
                    if first and closed:
                        continue  # history from before this process started
                    iterators[shard_id] = self._streams.get_shard_iterator(
                        StreamArn=arn,
                        ShardId=shard_id,
                        ShardIteratorType="LATEST" if first else "TRIM_HORIZON",
                    )["ShardIterator"]
                if first:
                    self._catch_up()  # what committed before the iterators were taken
                first = False
                next_describe = time.monotonic() + DESCRIBE_INTERVAL_S
            for shard_id, iterator in list(iterators.items()):
                if iterator is None:
                    del iterators[shard_id]  # closed: its children come with a describe
                    continue
                page = self._streams.get_records(ShardIterator=iterator, Limit=1000)
                self.reads += 1
                iterators[shard_id] = page.get("NextShardIterator")
                records = page.get("Records", [])
                changes = head_pokes(records, named_deletions=True)
                for tenant_id, (token, audience) in changes.items():
                    self._publish(tenant_id, token, audience)
                if self._announced is not None:
                    for server_id, url in announced_servers(records).items():
                        self._announced(server_id, url)
            self.progressed_at = time.monotonic()
            self.failures.worked()
            self._stopped.wait(self._poll_interval_s)

    def _catch_up(self) -> None:
        """Publish the current head of every subscribed tenant (consistent reads)."""
        publish_heads(
            self._dynamodb, self._table_name, self._subscribed(), self._publish, self._stopped.wait
        )
        self._caught_up()

    def _shards(self, arn: str) -> list[dict[str, Any]]:
        shards: list[dict[str, Any]] = []
        start: str | None = None
        while True:
            kwargs: dict[str, Any] = {"StreamArn": arn}
            if start is not None:
                kwargs["ExclusiveStartShardId"] = start
            description = self._streams.describe_stream(**kwargs)["StreamDescription"]
            shards += description.get("Shards", [])
            start = description.get("LastEvaluatedShardId")
            if start is None:
                return shards


def publish_heads(
    dynamodb: Any,
    table_name: str,
    tenants: Collection[str],
    publish: Callable[[str, str, Audience], None],
    wait: Callable[[float], object] = time.sleep,
) -> None:
    """Read the heads of `tenants` (consistent BatchGetItem, 100 a call) and publish
    each tenant's token: 1 read unit a tenant. Raises if throttling leaves some
    unread after 5 rounds, so that the caller tries again. A head whose transaction
    was not every member's is published to its audience, and UNTOLD to the others:
    a catch-up follows pokes that may have been missed, whose audiences the head
    does not tell, so each of their subscriptions checks its member's view first."""
    ordered = sorted(tenants)
    for start in range(0, len(ordered), _BATCH_GET_KEYS):
        wanted = [
            {"pk": {"S": keys.log_pk(t)}, "sk": {"S": keys.HEAD_SK}}
            for t in ordered[start : start + _BATCH_GET_KEYS]
        ]
        request = {table_name: {"Keys": wanted, "ConsistentRead": True}}
        for round_ in range(_BATCH_GET_ROUNDS):
            if round_:
                wait(0.05 * 2**round_)  # throttled: back off
            answer = dynamodb.batch_get_item(RequestItems=request)
            heads = [
                {"eventName": "MODIFY", "dynamodb": {"Keys": item, "NewImage": item}}
                for item in answer.get("Responses", {}).get(table_name, [])
            ]
            for tenant_id, (token, audience) in head_pokes(heads, named_deletions=True).items():
                # The head's transaction's audience is told; the others check (a
                # head of every member's: every member, as before).
                publish(tenant_id, token, merged(audience, UNTOLD))
            request = answer.get("UnprocessedKeys") or {}
            if not request:
                break
        else:
            raise RuntimeError("reading heads: some left unprocessed after 5 rounds")
