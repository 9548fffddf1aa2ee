"""Which server reads the table's stream: one holder of a lease item in the table,
as the Kinesis Client Library leases shards to workers.

AWS advises no more than two processes reading one stream shard at once (the
DynamoDB Streams quotas). So, whatever the number of servers, one reads: the
holder of the lease. It hands each head change to the others
(`api.realtime.relay`), and another server takes over when its lease lapses.

Every server in this mode joins at its first subscription. Each heartbeat (a
third of the lease, 5 s by default) it
- puts its server item (its URL; lapses after one lease, 15 s): the reader posts
  to the servers whose items have not lapsed;
- reads the lease (eventually consistent); if it holds it, it renews it,
  conditioned on still holding it; if the lease has lapsed (or never was), it
  takes it, conditioned on it being lapsed still, so one of several servers
  trying at once wins.

The holder reads the stream while its lease holds; on a failed renewal it stops
before the lease can lapse. Clocks: a lease's end is compared with each server's
wall clock, so a server whose clock runs ahead may take a lease early; two
readers for a moment are still within AWS's advice of two, and a poke that both
hand on arrives twice, which costs nothing (each event is newer than the last).

Cost (on-demand, us-east-1): each server puts its item every 5 s (1 write unit)
and reads the lease (0.5 read unit): 518,400 write units a month, $0.32, and
$0.03 of reads. The holder also renews the lease (1 write unit) and Queries the
servers (1 read unit) every 5 s: $0.39 a month more. The stream costs what one
reader's GetRecords cost, $2.07 a month per shard, however many servers there
are. A head change costs no table unit; each follower gets at most 4 posts a
second (one per stream poll, carrying every tenant written meanwhile).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

from botocore.exceptions import ClientError

from api.storage import keys

logger = logging.getLogger("api.realtime")


class Reader(Protocol):
    def start(self) -> None: ...

    def stop(self) -> None: ...


class LeaseItems:
    """The lease and the servers' items (partition RT#STREAM), through boto3."""

    def __init__(self, dynamodb: Any, table_name: str) -> None:
        self._dynamodb = dynamodb
        self._table = table_name

    def announce(self, server_id: str, url: str, until: int) -> None:
        self._dynamodb.put_item(
            TableName=self._table,
            Item={
                "pk": {"S": keys.READERS_PK},
                "sk": {"S": keys.server_sk(server_id)},
                "url": {"S": url},
                keys.TTL_ATTRIBUTE: {"N": str(until)},
            },
        )

    def holder(self) -> tuple[str | None, int]:
        """Who holds the lease, and until when (epoch seconds); (None, 0) if nobody
        ever did. Eventually consistent: a stale answer only delays a takeover."""
        item = self._dynamodb.get_item(
            TableName=self._table, Key=self._lease_key(), ConsistentRead=False
        ).get("Item")
        if item is None:
            return None, 0
        return item["holder"]["S"], int(item[keys.TTL_ATTRIBUTE]["N"])

    def hold(self, server_id: str, until: int, now: int) -> bool:
        """Renew or take the lease until `until`: only if `server_id` holds it or it has
        lapsed at `now`. Whether it did."""
        try:
            self._dynamodb.update_item(
                TableName=self._table,
                Key=self._lease_key(),
                UpdateExpression="SET holder = :me, #exp = :until",
                ConditionExpression="attribute_not_exists(pk) OR holder = :me OR #exp < :now",
                ExpressionAttributeNames={"#exp": keys.TTL_ATTRIBUTE},
                ExpressionAttributeValues={
                    ":me": {"S": server_id},
                    ":until": {"N": str(until)},
                    ":now": {"N": str(now)},
                },
            )
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") == "ConditionalCheckFailedException":
                return False
            raise
        return True

    def servers(self, now: int) -> dict[str, str]:
        """The servers whose items have not lapsed at `now`: id -> URL (consistent)."""
        found: dict[str, str] = {}
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
                if server_id is not None and int(item[keys.TTL_ATTRIBUTE]["N"]) >= now:
                    found[server_id] = item["url"]["S"]
            start = page.get("LastEvaluatedKey")
            if start is None:
                return found

    def leave(self, server_id: str) -> None:
        """Remove the server's item, and the lease if it holds it (a clean shutdown:
        another server takes over at its next heartbeat, not a lease later)."""
        self._dynamodb.delete_item(
            TableName=self._table,
            Key={"pk": {"S": keys.READERS_PK}, "sk": {"S": keys.server_sk(server_id)}},
        )
        try:
            self._dynamodb.delete_item(
                TableName=self._table,
                Key=self._lease_key(),
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
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._items = items
        self.server_id = server_id
        self._url = url
        self._new_reader = reader
        self._follow = follow
        self._lease_s = lease_s
        self._heartbeat_s = lease_s / 3
        self._clock = clock
        self._reader: Reader | None = None
        self._held_until = 0.0
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
        self._stopped.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._step_down()
        try:
            self._items.leave(self.server_id)
        except Exception:  # the items lapse on their own within a lease
            logger.exception("leaving the stream readers failed")

    def _run(self) -> None:
        while not self._stopped.is_set():
            try:
                self._beat()
            except Exception:
                logger.exception("stream reader heartbeat failed")
                # Stop reading before the lease can lapse and another server take it.
                if self._clock() > self._held_until - self._heartbeat_s:
                    self._step_down()
            self._stopped.wait(self._heartbeat_s)

    def _beat(self) -> None:
        now = self._clock()
        until = int(now + self._lease_s)
        self._items.announce(self.server_id, self._url, until)
        if self._reader is None:
            holder, held_until = self._items.holder()
            if holder is not None and holder != self.server_id and held_until >= now:
                return  # another server reads
        if not self._items.hold(self.server_id, until, int(now)):
            self._step_down()
            return
        self._held_until = until
        self._follow(
            {s: url for s, url in self._items.servers(int(now)).items() if s != self.server_id}
        )
        if self._reader is None:
            logger.info("server %s reads the table's stream", self.server_id)
            self._reader = self._new_reader()
            self._reader.start()

    def _step_down(self) -> None:
        if self._reader is not None:
            logger.info("server %s stops reading the table's stream", self.server_id)
            self._reader.stop()
            self._reader = None
            self._follow({})
