"""Which server reads the table's stream: one holder of a lease item in the table,
as the Kinesis Client Library leases shards to workers.

AWS advises no more than two processes reading one stream shard at once (the
DynamoDB Streams quotas). So, whatever the number of servers, one reads: the
holder of the lease. It hands each head change to the others
(`api.realtime.relay`), and another server takes over when it stops renewing.

Every server in this mode joins at its first subscription. Each heartbeat (a
third of the lease, 5 s by default) it
- puts its server item: its URL and a counter it raises at every heartbeat;
- reads the lease (eventually consistent); if it holds it, it renews it (raises
  the lease's counter), conditioned on still holding it; if the lease's counter
  has not moved for a whole lease by this server's own clock, it takes it,
  conditioned on the counter being the one it saw, so one of several servers
  trying at once wins.

The lease's counter when a server takes it is that reader's epoch: every take
raises the counter, so a later reader's epoch is higher than any earlier one's
(the item is never deleted, a clean shutdown only clears its holder). Followers
refuse posts not newer than the last they took by (epoch, number)
(`api.realtime.relay`), which keeps captured posts from being replayed.

No server compares its clock with another's: liveness is a counter that moved
within a lease, measured on the observer's monotonic clock (as the KCL does), so
a server whose wall clock is off by minutes neither steals the lease nor drops
out of the reader's list.

The holder posts to the servers its heartbeat read found live, and to each server
whose item it sees put in the table's stream as it reads it (`announced`): a server
that joins is posted to within a stream poll, not at the holder's next heartbeat,
until which its subscribers heard of no other server's write (up to 5 s late).

The holder reads the stream while it holds the lease and its reading makes
progress: a reader that has not completed a stream poll for a lease (no
permission on the stream, the streams endpoint unreachable) steps down and
leaves the lease alone for two leases, so that another server can try. A holder
whose renewals fail stops reading before the others can take over; its table
calls time out within a heartbeat (short botocore timeouts), so that a hung call
cannot keep it reading.

Cost (on-demand, us-east-1, 30-day month): each follower puts its item every 5 s
(1 write unit) and reads the lease (0.5 read unit): $0.32 + $0.03 a month. The
reader puts its item, renews the lease (1 write unit) and Queries the servers
(1 read unit, more once many lapsed items wait for TTL) every 5 s: $0.71 a month.
The stream costs one reader's GetRecords, $2.07 a month per shard, however many
servers there are. A head change costs no table unit.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

from botocore.exceptions import ClientError

from api.realtime.failures import RepeatedFailures
from api.storage import keys

logger = logging.getLogger("api.realtime")

# Items lapse for DynamoDB's TTL a day after their last heartbeat: only to clean up
# (liveness is the counter, never this time).
_KEEP_S = 24 * 3600


class Reader(Protocol):
    def start(self) -> None: ...

    def stop(self) -> None: ...

    @property
    def progressed_at(self) -> float:
        """When (time.monotonic) its reading last made progress."""
        ...


class LeaseItems:
    """The lease and the servers' items (partition RT#STREAM), through boto3."""

    def __init__(self, dynamodb: Any, table_name: str) -> None:
        self._dynamodb = dynamodb
        self._table = table_name

    def announce(self, server_id: str, url: str, beat: int) -> None:
        self._dynamodb.put_item(
            TableName=self._table,
            Item={
                "pk": {"S": keys.READERS_PK},
                "sk": {"S": keys.server_sk(server_id)},
                "url": {"S": url},
                "n": {"N": str(beat)},
                keys.TTL_ATTRIBUTE: {"N": str(int(time.time()) + _KEEP_S)},
            },
        )

    def holder(self) -> tuple[str | None, int]:
        """Who holds the lease (None: nobody) and its counter (0 if nobody ever held
        it). Eventually consistent: a stale answer only delays a takeover."""
        item = self._dynamodb.get_item(
            TableName=self._table, Key=self._lease_key(), ConsistentRead=False
        ).get("Item")
        if item is None:
            return None, 0
        holder = item.get("holder", {}).get("S")
        return holder, int(item["n"]["N"])

    def renew(self, server_id: str) -> bool:
        """Raise the lease's counter, if `server_id` holds it. Whether it did."""
        renewed = self._update(
            "SET n = n + :one, #exp = :exp",
            "holder = :me",
            {":me": {"S": server_id}, ":one": {"N": "1"}},
        )
        return renewed is not None

    def take(self, server_id: str, seen: int | None) -> int | None:
        """Take the lease, if its counter is still `seen` (None: if nobody holds it).
        The raised counter, this reader's epoch, if it did."""
        if seen is None:
            return self._update(
                "SET holder = :me, n = if_not_exists(n, :zero) + :one, #exp = :exp",
                "attribute_not_exists(holder)",
                {":me": {"S": server_id}, ":zero": {"N": "0"}, ":one": {"N": "1"}},
            )
        return self._update(
            "SET holder = :me, n = :next, #exp = :exp",
            "n = :seen",
            {":me": {"S": server_id}, ":seen": {"N": str(seen)}, ":next": {"N": str(seen + 1)}},
        )

    def servers(self) -> dict[str, tuple[str, int]]:
        """Every server's item not yet removed: id -> (URL, counter); consistent."""
        found: dict[str, tuple[str, int]] = {}
        start: dict[str, Any] | None = None
        while True:
            kwargs: dict[str, Any] = {
                "TableName": self._table,
                "KeyConditionExpression": "pk = :pk",
                "ExpressionAttributeValues": {":pk": {"S": keys.READERS_PK}},
                "ConsistentRead": True,
            }
            if start is not None:
                kwargs["ExclusiveStartKey"] = start
            page = self._dynamodb.query(**kwargs)
            for item in page.get("Items", []):
                server_id = keys.server_of(item["sk"]["S"])
                if server_id is not None:
                    found[server_id] = (item["url"]["S"], int(item["n"]["N"]))
            start = page.get("LastEvaluatedKey")
            if start is None:
                return found

    def _update(self, update: str, condition: str, values: dict[str, Any]) -> int | None:
        """The lease's counter after the update; None if its condition failed."""
        try:
            answer = self._dynamodb.update_item(
                TableName=self._table,
                Key=self._lease_key(),
                UpdateExpression=update,
                ConditionExpression=condition,
                ExpressionAttributeNames={"#exp": keys.TTL_ATTRIBUTE},
                ExpressionAttributeValues={
                    **values,
                    ":exp": {"N": str(int(time.time()) + _KEEP_S)},
                },
                ReturnValues="UPDATED_NEW",
            )
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") == "ConditionalCheckFailedException":
                return None
            raise
        return int(answer["Attributes"]["n"]["N"])

    def leave(self, server_id: str) -> None:
        """Remove the server's item, and its hold on the lease if it holds it (a clean
        shutdown: another server takes over at its next heartbeat, not a lease
        later). The lease keeps its counter, so the next reader's epoch is higher."""
        self._dynamodb.delete_item(
            TableName=self._table,
            Key={"pk": {"S": keys.READERS_PK}, "sk": {"S": keys.server_sk(server_id)}},
        )
        try:
            self._dynamodb.update_item(
                TableName=self._table,
                Key=self._lease_key(),
                UpdateExpression="REMOVE holder",
                ConditionExpression="holder = :me",
                ExpressionAttributeValues={":me": {"S": server_id}},
            )
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") != "ConditionalCheckFailedException":
                raise

    @staticmethod
    def _lease_key() -> dict[str, Any]:
        return {"pk": {"S": keys.READERS_PK}, "sk": {"S": keys.LEASE_SK}}


class StreamReaderLease:
    """This server's heartbeat: announces it, and reads the stream (`reader()`,
    handing on to `follow(servers)`) while it holds the lease."""

    def __init__(
        self,
        items: LeaseItems,
        server_id: str,
        url: str,
        reader: Callable[[], Reader],
        follow: Callable[[dict[str, str]], None],
        lease_s: float,
        clock: Callable[[], float] = time.monotonic,
        on_take: Callable[[], None] | None = None,
    ) -> None:
        self._items = items
        self._on_take = on_take  # counts takeovers (`api.metrics`)
        self.server_id = server_id
        self._url = url
        self._new_reader = reader
        self._follow = follow
        self._lease_s = lease_s
        self._heartbeat_s = lease_s / 3
        self._clock = clock
        self._beats = 0
        self._reader: Reader | None = None
        self.epoch = 0  # the lease's counter when this server last took it
        self._renewed_at = 0.0  # when this server last renewed the lease it holds
        self._hold_off_until = 0.0  # a reader that made no progress waits to retake
        self._lease_seen: tuple[str | None, int, float] | None = None  # holder, n, since
        self._servers_seen: dict[str, tuple[int, float]] = {}  # id -> counter, since
        self._lock = threading.Lock()  # the heartbeat against stop()
        self.failures = RepeatedFailures(logger, "the stream reader's heartbeat")
        # While reading: the servers posted to (None: not reading), and those the stream
        # showed putting their items (id -> URL, when), against a heartbeat's read of the
        # servers that began before the put and would drop them.
        self._following: dict[str, str] | None = None
        self._announced: dict[str, tuple[str, float]] = {}
        self._following_lock = threading.Lock()
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def reading(self) -> bool:
        return self._reader is not None

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="stream-lease", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        with self._lock:  # waits for a heartbeat under way (its calls time out)
            self._stopped.set()
            self._step_down()
        try:
            self._items.leave(self.server_id)
        except Exception:  # the lease is taken over once its counter stops
            logger.exception("leaving the stream readers failed")

    def _run(self) -> None:
        while not self._stopped.is_set():
            with self._lock:
                if self._stopped.is_set():
                    return
                try:
                    self._beat()
                    self.failures.worked()
                except Exception as exc:
                    self.failures.failed(exc)
                    # Stop reading before the others can see the lease stand still.
                    if self._clock() - self._renewed_at > self._lease_s - self._heartbeat_s:
                        self._step_down()
            self._stopped.wait(self._heartbeat_s)

    def _beat(self) -> None:
        now = self._clock()
        self._beats += 1
        self._items.announce(self.server_id, self._url, self._beats)
        if self._reader is not None:
            if now - self._reader.progressed_at > self._lease_s:
                logger.warning("the stream reader made no progress for a lease: stepping down")
                self._step_down()
                self._hold_off_until = now + 2 * self._lease_s
                return
            if not self._items.renew(self.server_id):
                self._step_down()
                return
        else:
            if now < self._hold_off_until or not self._may_take(now):
                return
        self._renewed_at = now
        read_at = self._clock()
        live = self._live_servers(now)
        with self._following_lock:
            # A server the stream showed since this read began is live, whatever it says.
            announced = {s: (u, at) for s, (u, at) in self._announced.items() if at >= read_at}
            self._announced = announced
            live.update({server_id: url for server_id, (url, _) in announced.items()})
            self._following = dict(live)
            self._follow(live)
        if self._reader is None:
            logger.info("server %s reads the table's stream", self.server_id)
            self._reader = self._new_reader()
            self._reader.start()

    def announced(self, server_id: str, url: str) -> None:
        """The stream this server reads shows `server_id` putting its item (a heartbeat,
        the first when it joins): while reading, post to it from now on."""
        if server_id == self.server_id:
            return
        with self._following_lock:
            if self._following is None:
                return
            self._announced[server_id] = (url, self._clock())
            if self._following.get(server_id) != url:
                self._following[server_id] = url
                self._follow(dict(self._following))

    def caught_up(self) -> None:
        """The reader has taken its iterators (at each (re)start of its reading): a server
        that put its item since the heartbeat's read, before then, is in neither. So the
        servers are read once more (1 read unit a restart) and those whose counter moved
        since the heartbeat saw them are posted to, as if the stream had shown them."""
        try:
            servers = self._items.servers()
        except Exception:  # the next heartbeat reads them
            logger.exception("reading the servers after the stream reader's start failed")
            return
        seen = self._servers_seen
        for server_id, (url, n) in servers.items():
            before = seen.get(server_id)
            if before is None or before[0] != n:
                self.announced(server_id, url)

    def _may_take(self, now: float) -> bool:
        """Whether this server took the lease: nobody ever held it, or its counter has
        not moved for a lease by this server's clock."""
        holder, n = self._items.holder()
        if holder is None:
            epoch = self._items.take(self.server_id, None)
        else:
            seen = self._lease_seen
            if seen is None or (seen[0], seen[1]) != (holder, n):
                self._lease_seen = (holder, n, now)  # it moved: its holder is alive
                return False
            if now - seen[2] <= self._lease_s:
                return False
            epoch = self._items.take(self.server_id, n)
        if epoch is None:
            return False
        self.epoch = epoch
        if self._on_take is not None:
            self._on_take()
        return True

    def _live_servers(self, now: float) -> dict[str, str]:
        """The other servers whose counters moved within a lease (a server seen for the
        first time counts as live)."""
        live: dict[str, str] = {}
        seen: dict[str, tuple[int, float]] = {}
        for server_id, (url, n) in self._items.servers().items():
            before = self._servers_seen.get(server_id)
            since = before[1] if before is not None and before[0] == n else now
            seen[server_id] = (n, since)
            if server_id != self.server_id and now - since <= self._lease_s:
                live[server_id] = url
        self._servers_seen = seen
        return live

    def _step_down(self) -> None:
        if self._reader is not None:
            logger.info("server %s stops reading the table's stream", self.server_id)
            self._reader.stop()
            self._reader = None
        with self._following_lock:
            self._following = None
            self._announced = {}
            self._follow({})
