"""`scripts/serve`: DynamoDB Local (unless DYNAMODB_ENDPOINT is set), the table, the
local S3 engine (unless S3_ENDPOINT is set), the bucket, uvicorn."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import sys

import uvicorn

from api.app import create_app
from api.settings import Settings
from api.storage.table import ensure_table
from scripts.local_engine import EngineError, LocalEngine
from scripts.local_s3 import LocalS3, ensure_bucket


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    settings = Settings.from_env()
    with contextlib.ExitStack() as stack:
        if settings.dynamodb_endpoint is None:
            engine = LocalEngine(settings.dynamodb_local_port, settings.data_dir)
            print(f"==> starting DynamoDB Local on port {engine.port}, data in {settings.data_dir}")
            try:
                engine.start()
            except EngineError as exc:
                print(f"error: {exc}", file=sys.stderr)
                return 1
            stack.callback(engine.stop)
            settings = dataclasses.replace(settings, dynamodb_endpoint=engine.endpoint)
        else:
            print(f"==> using DynamoDB at {settings.dynamodb_endpoint}")
        created = ensure_table(settings.dynamodb_client(), settings.table_name)
        print(f"==> table {settings.table_name}: {'created' if created else 'exists'}")
        if settings.s3_endpoint is None:
            blobs = LocalS3(settings.s3_local_port)
            print(f"==> starting the S3 engine (moto) on port {blobs.port}, blobs in memory")
            try:
                blobs.start()
            except EngineError as exc:
                print(f"error: {exc}", file=sys.stderr)
                return 1
            stack.callback(blobs.stop)
            settings = dataclasses.replace(settings, s3_endpoint=blobs.endpoint)
        else:
            print(f"==> using S3 at {settings.s3_endpoint}")
        created = ensure_bucket(settings.s3_client(), settings.blob_bucket, settings.aws_region)
        print(f"==> bucket {settings.blob_bucket}: {'created' if created else 'exists'}")
        print(f"==> GraphQL and GraphiQL on http://127.0.0.1:{settings.port}/graphql")
        uvicorn.run(
            create_app(settings),
            host="127.0.0.1",
            port=settings.port,
            log_level="info",
            # A WebSocket message is bounded like a request body (uvicorn's default: 16 MB).
            ws_max_size=settings.max_body_bytes,
        )
    print("==> stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
