"""A service over the session's table with a short retention and a clock the test
moves (no sleeps), and DynamoDB's TTL at its earliest. AWS documents that TTL deletes
an expired item some time after its `exp` (typically within days): tests model the
two extremes, an item removed the moment it expires and one still stored."""

from __future__ import annotations

from typing import Any

from api.domain.cursor import CursorCodec
from api.domain.retention import Retention
from api.ordering import wall_clock_ms
from api.service import SyncService
from api.storage.store import DynamoStore

RETENTION_S = 60
# Past the retention and its margin: every deletion written before is expired.
EXPIRED_S = 2 * RETENTION_S + 5


class Clock:
    def __init__(self) -> None:
        self.now_ms = wall_clock_ms()

    def __call__(self) -> int:
        return self.now_ms

    def advance(self, seconds: float) -> None:
        self.now_ms += int(seconds * 1000)


def short_retention_service(store: DynamoStore, clock: Clock) -> SyncService:
    return SyncService(
        store, CursorCodec("test-cursor-secret"), clock, retention=Retention(RETENTION_S)
    )


def ttl_removes_expired(ddb: Any, table: str, tenant: str, now_ms: int) -> int:
    """DynamoDB's TTL at its earliest: every item of the tenant's log and history
    whose `exp` has passed is deleted now. Returns how many."""
    removed = 0
    for suffix in ("#LOG", "#HIST"):
        items = ddb.query(
            TableName=table,
            KeyConditionExpression="pk = :pk",
            ExpressionAttributeValues={":pk": {"S": f"T#{tenant}{suffix}"}},
            ConsistentRead=True,
        )["Items"]
        for item in items:
            if "exp" in item and int(item["exp"]["N"]) < now_ms // 1000:
                ddb.delete_item(TableName=table, Key={"pk": item["pk"], "sk": item["sk"]})
                removed += 1
    return removed
