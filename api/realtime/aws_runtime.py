"""What an AWS realtime Lambda builds once per instance and reuses across
invocations (the WebSocket routes', the fan-out's, the drain's), each part on its
first use; and running one stored operation through the schema: shared by
`api.realtime.aws` (the routes) and `api.realtime.fanout` (the stream's fan-out).

Nothing of GraphQL, JWT, the service or PynamoDB is imported with this module:
every socket's `$connect` runs in this process and uses none of them (it checks
the subprotocol); a part's module is imported when the part is first built. With
SnapStart every part is built before the snapshot (`Runtime.build_all`, called by
`api.realtime.aws.before_snapshot`, which imports the modules that use them too), so
a restored instance has them all. The modules that use the runtime import it, never
the other way round."""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, TypeVar, cast

from botocore.exceptions import BotoCoreError, ClientError

from api import metric_sinks, metrics
from api.settings import Settings

if TYPE_CHECKING:
    from api.auth import Authenticator
    from api.graphql.schema import SyncSchema
    from api.realtime.connections import Connections
    from api.service import SyncService
    from api.service.pushes import Pushes

logger = logging.getLogger("api.realtime")

T = TypeVar("T")


class _BuiltOnFirstUse(Generic[T]):
    """A part of the runtime, built by `build` the first time it is asked for, once:
    the fan-out asks from several worker threads at a time."""

    def __init__(self, build: Callable[[Runtime], T]) -> None:
        self._build = build
        self._name = build.__name__

    def __get__(self, rt: Runtime, owner: type | None = None) -> T:
        parts = rt._parts
        if self._name not in parts:
            with rt._lock:
                if self._name not in parts:
                    parts[self._name] = self._build(rt)
        return cast(T, parts[self._name])


class FanOutIncomplete(Exception):
    """Some subscribers were not sent their event: the batch is to be retried (only
    they are sent it again: the others' claims hold)."""


@dataclass
class Runtime:
    """What a Lambda instance builds once and reuses across invocations."""

    settings: Settings
    # What an invocation counts, written when it ends (EMF on Lambda: `api.metrics`).
    metrics: metrics.Metrics = field(default_factory=metrics.Metrics)
    _parts: dict[str, Any] = field(default_factory=dict, init=False, repr=False, compare=False)
    _lock: Any = field(default_factory=threading.RLock, init=False, repr=False, compare=False)

    @_BuiltOnFirstUse
    def service(self) -> SyncService:
        """The service over PynamoDB's client (a subscribe's first read, the drain)."""
        from api.domain.cursor import CursorCodec
        from api.domain.retention import Retention
        from api.service import SyncService
        from api.storage import models
        from api.storage.store import DynamoStore

        models.bind(self.settings)
        return SyncService(
            DynamoStore(),
            CursorCodec(self.settings.cursor_secret),
            retention=Retention(self.settings.retention_seconds),
            history=self.settings.history,
        )

    @_BuiltOnFirstUse
    def schema(self) -> SyncSchema:
        """The GraphQL schema: a subscribe, and a fan-out with subscribers."""
        from api.graphql.schema import make_schema

        return make_schema(self.settings)

    @_BuiltOnFirstUse
    def authenticator(self) -> Authenticator:
        """JWT verification: connection_init."""
        from api.auth import Authenticator

        return Authenticator(self.settings)

    @_BuiltOnFirstUse
    def connections(self) -> Connections:
        """The connections' and subscriptions' items, through a DynamoDB client of
        their own: every route but $connect, and the fan-out."""
        from api.realtime.connections import Connections

        return Connections(self.settings.dynamodb_client(), self.settings.table_name)

    @_BuiltOnFirstUse
    def management(self) -> Any:
        """API Gateway's Management API (boto3 client): each message sent, each hang-up."""
        import boto3

        return boto3.client(
            "apigatewaymanagementapi",
            region_name=self.settings.aws_region,
            endpoint_url=self.settings.websocket_management_url,
        )

    @_BuiltOnFirstUse
    def streams(self) -> Any:
        """The table's stream (boto3 dynamodbstreams client): the drain reads failed
        batches back."""
        return self.settings.dynamodb_client("dynamodbstreams")

    @_BuiltOnFirstUse
    def pushes(self) -> Pushes | None:
        """Silent pushes (None: no platform application configured): the fan-out's
        rounds and the push queue's flushes."""
        from api.push_setup import make_pushes

        return make_pushes(
            self.settings,
            members=lambda tenant, token: self.service.roster_at(tenant, token),
            seen=lambda tenant, after, sub: self.service.latest_seen(tenant, after, sub),
        )

    @_BuiltOnFirstUse
    def push_queue(self) -> Any:
        """SQS (boto3 client): a token waiting for a device's window, delayed to its end."""
        import boto3

        # Locally (the tests) the engine that serves SNS serves SQS too.
        return boto3.client(
            "sqs", region_name=self.settings.aws_region, endpoint_url=self.settings.sns_endpoint
        )

    def build_all(self) -> None:
        """Every part: what a SnapStart snapshot is to hold, so that no restored
        instance builds any (the hook imports the modules that use them:
        `api.realtime.aws.before_snapshot`)."""
        for part in (
            "service",
            "schema",
            "authenticator",
            "connections",
            "management",
            "streams",
            "pushes",
            "push_queue",
        ):
            getattr(self, part)

    def send(self, connection_id: str, message: dict[str, Any]) -> bool:
        """PostToConnection; False when the connection is gone (and forget it)."""
        return self.post(connection_id, message) is not False

    def post(self, connection_id: str, message: dict[str, Any]) -> bool | None:
        """PostToConnection: True if sent, False if the connection is gone (it is
        forgotten), None if it failed otherwise (logged)."""
        try:
            self.management.post_to_connection(
                ConnectionId=connection_id, Data=json.dumps(message).encode()
            )
        except ClientError as exc:
            if exc.response["Error"]["Code"] == "GoneException":
                self.connections.close(connection_id)
                return False
            logger.warning("PostToConnection failed: %s", exc.response["Error"]["Code"])
            return None
        except BotoCoreError as exc:
            logger.warning("PostToConnection failed: %s", exc)
            return None
        return True

    def hang_up(self, connection_id: str, why: str) -> None:
        """Close the socket (graphql-ws would close with a 44xx code) and forget it."""
        logger.info("closing websocket: %s", why)
        with contextlib.suppress(ClientError, BotoCoreError):  # already gone
            self.management.delete_connection(ConnectionId=connection_id)
        self.connections.close(connection_id)


def build_runtime(settings: Settings) -> Runtime:
    settings.apply_local_credentials()
    return Runtime(settings=settings, metrics=metric_sinks.for_lambda(settings.metrics))


@functools.cache
def runtime() -> Runtime:
    return build_runtime(Settings.from_env())
