"""What an AWS realtime Lambda builds once per instance and reuses across
invocations (the WebSocket routes', the fan-out's, the drain's), and running one
stored operation through the schema: shared by `api.realtime.aws` (the routes)
and `api.realtime.fanout` (the stream's fan-out)."""

from __future__ import annotations

import contextlib
import functools
import json
import logging
from dataclasses import dataclass, field
from typing import Any

import boto3
from botocore.exceptions import BotoCoreError, ClientError

from api import metrics
from api.auth import Authenticator, Principal
from api.domain.cursor import CursorCodec
from api.domain.retention import Retention
from api.graphql.context import Context
from api.graphql.schema import SyncSchema, make_schema
from api.realtime.connections import Connections, Operation
from api.service import SyncService
from api.settings import Settings
from api.storage import models
from api.storage.lazy_client import LazyClient
from api.storage.store import DynamoStore

logger = logging.getLogger("api.realtime")


@dataclass
class Runtime:
    """What a Lambda instance builds once and reuses across invocations."""

    settings: Settings
    service: SyncService
    schema: SyncSchema
    authenticator: Authenticator
    connections: Connections
    management: Any  # boto3 apigatewaymanagementapi client
    streams: Any  # boto3 dynamodbstreams client (the drain reads failed batches back)
    # What an invocation counts, written when it ends (EMF on Lambda: `api.metrics`).
    metrics: metrics.Metrics = field(default_factory=metrics.Metrics)

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
    models.bind(settings)
    service = SyncService(
        DynamoStore(),
        CursorCodec(settings.cursor_secret),
        retention=Retention(settings.retention_seconds),
        history=settings.history,
    )
    # Made on first use, as the HTTP function's S3 client (each client loads and
    # parses its service model): a $connect or $disconnect sends nothing, and only
    # the drain reads the stream. With SnapStart the hook makes both before the
    # snapshot (`api.realtime.aws.before_snapshot`).
    management = LazyClient(
        lambda: boto3.client(
            "apigatewaymanagementapi",
            region_name=settings.aws_region,
            endpoint_url=settings.websocket_management_url,
        )
    )
    return Runtime(
        settings=settings,
        service=service,
        schema=make_schema(settings),
        authenticator=Authenticator(settings),
        connections=Connections(settings.dynamodb_client(), settings.table_name),
        management=management,
        streams=LazyClient(lambda: settings.dynamodb_client("dynamodbstreams")),
        metrics=metrics.for_lambda(settings.metrics),
    )


@functools.cache
def runtime() -> Runtime:
    return build_runtime(Settings.from_env())


async def execute(rt: Runtime, operation: Operation, principal: Principal, feed: Any) -> Any:
    """The results of `operation` for `principal`, whose tokens come from `feed`."""
    context = Context(request=None, service=rt.service, principal=principal, feed=feed)
    return await rt.schema.subscribe(
        operation.query,
        variable_values=operation.variables,
        context_value=context,
        operation_name=operation.name,
    )


def next_message(subscription_id: str, result: Any) -> dict[str, Any]:
    payload: dict[str, Any] = {"data": result.data}
    if result.errors:  # coded already, by the schema (SyncSchema.process_errors)
        payload["errors"] = [e.formatted for e in result.errors]
    return {"id": subscription_id, "type": "next", "payload": payload}
