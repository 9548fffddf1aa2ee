"""WebSocket connections and their subscriptions, kept in the table (AWS only).

API Gateway holds the sockets and Lambda holds nothing between invocations, so
what a connection is (its caller, its token's expiry, its subscriptions) lives
in the table (`api.storage.keys`: the socket and subscription items). Every item
has a TTL: API Gateway closes a connection after at most two hours, and a
`$disconnect` that never ran leaves nothing behind for longer than that.

boto3's errors are translated here into `SubscriptionRefused` or `Unavailable`.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from api.domain.errors import Unavailable
from api.storage import keys

# API Gateway closes a WebSocket after two hours; an hour more covers clock skew
# and a late $disconnect.
CONNECTION_TTL_S = 3 * 3600


class SubscriptionRefused(Exception):
    """The connection is gone, already has this subscription id, or is full."""


@dataclass(frozen=True)
class Connection:
    connection_id: str
    sub: str
    tenants: frozenset[str]
    until: float  # the token's exp
    subscriptions: dict[str, str] = field(default_factory=dict)  # id -> tenant


# What a subscription item may hold of its operation: the fan-out reads every
# subscription item of a tenant on each of its writes (1 read unit per 4 KB), so
# their size is its cost. A changesAvailable document is ~150 characters and its
# variables ~80; stored verbatim, 200 subscriptions padded with 120 KB each cost
# 2,944 read units per write, and now at most 200 x 5 KB = 1 MB (about 250 units).
MAX_STORED_DOCUMENT = 4 * 1024
MAX_STORED_VARIABLES = 1024  # characters of the declared variables' JSON


@dataclass(frozen=True)
class Operation:
    """A subscription's GraphQL operation: what the fan-out executes again."""

    query: str
    variables: dict[str, Any]  # only those the operation declares
    name: str | None  # the operationName, needed when the document holds several

    def key(self) -> str:
        """Equal for operations that give every subscriber the same event."""
        return json.dumps([self.query, self.variables, self.name], sort_keys=True)


@dataclass(frozen=True)
class Subscription:
    connection_id: str
    subscription_id: str
    tenant_id: str
    operation: Operation
    sub: str
    until: float
    last: str | None = None  # the token last sent on it (None: none yet)


class Connections:
    def __init__(self, client: Any, table_name: str) -> None:
        self.client = client
        self._table = table_name

    def open(self, connection_id: str, sub: str, tenants: frozenset[str], until: float) -> bool:
        """Record an initialised connection; False if it was initialised before."""
        item = {
            "pk": {"S": keys.connection_pk(connection_id)},
            "sk": {"S": keys.CONNECTION_SK},
            "sub": {"S": sub},
            "tenants": {"L": [{"S": t} for t in sorted(tenants)]},
            "until": {"N": str(int(until))},
            "subs": {"M": {}},
            keys.TTL_ATTRIBUTE: {"N": str(int(time.time()) + CONNECTION_TTL_S)},
        }
        try:
            self._call(
                "put_item",
                TableName=self._table,
                Item=item,
                ConditionExpression="attribute_not_exists(pk)",
            )
        except SubscriptionRefused:
            return False
        return True

    def get(self, connection_id: str) -> Connection | None:
        item = self._call(
            "get_item",
            TableName=self._table,
            Key=self._connection_key(connection_id),
            ConsistentRead=True,
        ).get("Item")
        if item is None:
            return None
        return Connection(
            connection_id=connection_id,
            sub=item["sub"]["S"],
            tenants=frozenset(t["S"] for t in item["tenants"]["L"]),
            until=float(item["until"]["N"]),
            subscriptions={k: v["S"] for k, v in item.get("subs", {}).get("M", {}).items()},
        )

    def subscribe(self, connection: Connection, subscription: Subscription, limit: int) -> None:
        """Add a subscription to its connection (at most `limit` per connection), in one
        transaction with its subscription item (2 write units per KB of each)."""
        claim = {
            "TableName": self._table,
            "Key": self._connection_key(connection.connection_id),
            "UpdateExpression": "SET subs.#id = :tenant",
            "ConditionExpression": "attribute_exists(pk) AND attribute_not_exists(subs.#id) "
            "AND size(subs) < :limit",
            "ExpressionAttributeNames": {"#id": subscription.subscription_id},
            "ExpressionAttributeValues": {
                ":tenant": {"S": subscription.tenant_id},
                ":limit": {"N": str(limit)},
            },
        }
        item = {
            **self._subscription_key(subscription),
            "cid": {"S": subscription.connection_id},
            "sid": {"S": subscription.subscription_id},
            "q": {"S": subscription.operation.query},
            "v": {"S": json.dumps(subscription.operation.variables, separators=(",", ":"))},
            **({"op": {"S": name}} if (name := subscription.operation.name) else {}),
            "sub": {"S": subscription.sub},
            "until": {"N": str(int(subscription.until))},
            keys.TTL_ATTRIBUTE: {"N": str(int(time.time()) + CONNECTION_TTL_S)},
        }
        # Both or neither: a subscription item whose write failed after its id was
        # added to the connection left the id "in use", counted toward the limit.
        self._call(
            "transact_write_items",
            TransactItems=[{"Update": claim}, {"Put": {"TableName": self._table, "Item": item}}],
        )

    def unsubscribe(self, connection_id: str, subscription_id: str) -> None:
        try:
            old = self._call(
                "update_item",
                TableName=self._table,
                Key=self._connection_key(connection_id),
                UpdateExpression="REMOVE subs.#id",
                ConditionExpression="attribute_exists(subs.#id)",
                ExpressionAttributeNames={"#id": subscription_id},
                ReturnValues="UPDATED_OLD",
            )
        except SubscriptionRefused:
            return  # never subscribed, or already gone
        tenant_id = old["Attributes"]["subs"]["M"][subscription_id]["S"]
        self._delete_subscription(tenant_id, connection_id, subscription_id)

    def close(self, connection_id: str) -> None:
        """Forget a connection and its subscriptions (idempotent)."""
        old = self._call(
            "delete_item",
            TableName=self._table,
            Key=self._connection_key(connection_id),
            ReturnValues="ALL_OLD",
        ).get("Attributes")
        for subscription_id, tenant in (old or {}).get("subs", {}).get("M", {}).items():
            self._delete_subscription(tenant["S"], connection_id, subscription_id)

    def subscriptions(self, tenant_id: str) -> Iterator[Subscription]:
        """Every subscription to the tenant, read consistently: a subscription whose
        registration succeeded before the head change was fanned out is among them.

        The window this closes: a subscribe registers (PutItem succeeds), reads the
        head (h0), then W1 commits and its stream record triggers this Query. An
        eventually consistent read "might not reflect the results of a recently
        completed write" (AWS, "Read consistency"), so it may miss the new
        subscription, whose snapshot already said h0: W1 would never reach it. A
        strongly consistent read reflects every write that succeeded before it.
        The subscribe's re-read of the head after registering does not close this
        on its own (tests/deploy: a stale replica). Costs twice the read units of
        an eventually consistent Query (1 per 4 KB)."""
        start: dict[str, Any] | None = None
        while True:
            kwargs: dict[str, Any] = {
                "TableName": self._table,
                "KeyConditionExpression": "pk = :pk",
                "ExpressionAttributeValues": {":pk": {"S": keys.subscriptions_pk(tenant_id)}},
                "ConsistentRead": True,
            }
            if start is not None:
                kwargs["ExclusiveStartKey"] = start
            page = self._call("query", **kwargs)
            for item in page.get("Items", []):
                yield Subscription(
                    connection_id=item["cid"]["S"],
                    subscription_id=item["sid"]["S"],
                    tenant_id=tenant_id,
                    operation=Operation(
                        query=item["q"]["S"],
                        variables=json.loads(item["v"]["S"]),
                        name=item["op"]["S"] if "op" in item else None,
                    ),
                    sub=item["sub"]["S"],
                    until=float(item["until"]["N"]),
                    last=item["last"]["S"] if "last" in item else None,
                )
            start = page.get("LastEvaluatedKey")
            if start is None:
                return

    def claim(self, subscription: Subscription, token: str) -> bool:
        """Record `token` as sent on the subscription if it is newer than the last one
        sent (and the subscription still exists); False if not: then do not send it.
        Claiming before sending makes each event newer than the last, whatever
        fan-outs, retries and subscribes race. 1 write unit per KB of the item."""
        try:
            self._call(
                "update_item",
                TableName=self._table,
                Key=self._subscription_key(subscription),
                UpdateExpression="SET #last = :token",
                ConditionExpression="attribute_exists(pk) "
                "AND (attribute_not_exists(#last) OR #last < :token)",
                ExpressionAttributeNames={"#last": "last"},
                ExpressionAttributeValues={":token": {"S": token}},
            )
        except SubscriptionRefused:
            return False
        return True

    def release(self, subscription: Subscription, token: str) -> None:
        """Undo `claim(subscription, token)` when sending failed (unless a newer token
        was claimed since), so that a retry sends it again."""
        if subscription.last is None:
            update, values = "REMOVE #last", {":token": {"S": token}}
        else:
            update = "SET #last = :previous"
            values = {":token": {"S": token}, ":previous": {"S": subscription.last}}
        with contextlib.suppress(SubscriptionRefused):
            self._call(
                "update_item",
                TableName=self._table,
                Key=self._subscription_key(subscription),
                UpdateExpression=update,
                ConditionExpression="#last = :token",
                ExpressionAttributeNames={"#last": "last"},
                ExpressionAttributeValues=values,
            )

    def _delete_subscription(
        self, tenant_id: str, connection_id: str, subscription_id: str
    ) -> None:
        self._call(
            "delete_item",
            TableName=self._table,
            Key=_subscription_key(tenant_id, connection_id, subscription_id),
        )

    @staticmethod
    def _subscription_key(subscription: Subscription) -> dict[str, Any]:
        return _subscription_key(
            subscription.tenant_id, subscription.connection_id, subscription.subscription_id
        )

    @staticmethod
    def _connection_key(connection_id: str) -> dict[str, Any]:
        return {"pk": {"S": keys.connection_pk(connection_id)}, "sk": {"S": keys.CONNECTION_SK}}

    def _call(self, operation: str, **kwargs: Any) -> dict[str, Any]:
        try:
            result: dict[str, Any] = getattr(self.client, operation)(**kwargs)
        except ClientError as exc:
            if _condition_failed(exc.response):
                raise SubscriptionRefused() from exc
            raise Unavailable(f"the data store failed: {exc.response['Error']['Code']}") from exc
        except BotoCoreError as exc:
            raise Unavailable("the data store is unreachable") from exc
        return result


def _condition_failed(response: dict[str, Any]) -> bool:
    """A condition was false: of a write, or of one of a transaction's items (a
    cancelled transaction for any other reason, a conflict or throttling, is not)."""
    code = response["Error"]["Code"]
    if code == "TransactionCanceledException":
        reasons = [r.get("Code") for r in response.get("CancellationReasons", [])]
        return "ConditionalCheckFailed" in reasons
    return bool(code == "ConditionalCheckFailedException")


def _subscription_key(tenant_id: str, connection_id: str, subscription_id: str) -> dict[str, Any]:
    return {
        "pk": {"S": keys.subscriptions_pk(tenant_id)},
        "sk": {"S": keys.subscription_sk(connection_id, subscription_id)},
    }
