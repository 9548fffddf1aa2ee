"""`scripts/serve`: DynamoDB Local (unless DYNAMODB_ENDPOINT is set), the table, the
local S3 engine (unless S3_ENDPOINT is set), the bucket, uvicorn."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import sys

import uvicorn

from api.app import create_app, freeze_startup_heap
from api.graphql.ws_protocol import BoundedWebSockets
from api.settings import Settings
from api.storage.table import ensure_table
from scripts.local_engine import EngineError, EngineProcess, LocalEngine
from scripts.local_s3 import LocalS3, ensure_bucket


def _started(stack: contextlib.ExitStack, engine: EngineProcess, holding: str) -> bool:
    """Start a local engine, stopped with `stack`; False (said on stderr) if it fails."""
    print(f"==> starting {engine.name} on port {engine.port}, {holding}")
    try:
        engine.start()
    except EngineError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return False
    stack.callback(engine.stop)
    return True


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    settings = Settings.from_env()
    with contextlib.ExitStack() as stack:
        if settings.dynamodb_endpoint is None:
            engine = LocalEngine(settings.dynamodb_local_port, settings.data_dir)
            if not _started(stack, engine, f"data in {settings.data_dir}"):
                return 1
            settings = dataclasses.replace(settings, dynamodb_endpoint=engine.endpoint)
        else:
            print(f"==> using DynamoDB at {settings.dynamodb_endpoint}")
        created = ensure_table(settings.dynamodb_client(), settings.table_name)
        print(f"==> table {settings.table_name}: {'created' if created else 'exists'}")
        if settings.s3_endpoint is None:
            # Beside DynamoDB Local's data: the blobs of its entities survive a restart.
            blobs = LocalS3(settings.s3_local_port, settings.data_dir / "s3")
            if not _started(stack, blobs, f"blobs kept in {blobs.store}"):
                return 1
            settings = dataclasses.replace(settings, s3_endpoint=blobs.endpoint)
        else:
            print(f"==> using S3 at {settings.s3_endpoint}")
        created = ensure_bucket(
            settings.s3_client(),
            settings.blob_bucket,
            settings.aws_region,
            settings.blob_cors_origins,
        )
        origins = ", ".join(settings.blob_cors_origins) or "none"
        state = "created" if created else "exists"
        print(f"==> bucket {settings.blob_bucket}: {state}, CORS for origins {origins}")
        print(f"==> GraphQL and GraphiQL on http://127.0.0.1:{settings.port}/graphql")
        app = create_app(settings)
        freeze_startup_heap()
        uvicorn.run(
            app,
            host="127.0.0.1",
            port=settings.port,
            log_level="info",
            # A WebSocket message is bounded like a request body (uvicorn's default: 16 MB).
            ws_max_size=settings.max_body_bytes,
            # And what a socket sends before its connection_ack (issue 48).
            ws=BoundedWebSockets,
        )
    print("==> stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
