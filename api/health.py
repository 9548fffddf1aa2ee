"""`GET /healthz`: whether this server is healthy, for anyone (a load balancer, a
local user's `curl`); what it runs on (the table, the bucket, the realtime status
with this server's id) only for a caller holding `HEALTH_TOKEN`.

Without the token the answer is the status code and `{"status": ...}` alone: "ok"
(200: the table and the blob store answer), "degraded" (200: the table answers,
the blob store does not, so only attachments fail), "unavailable" or "error"
(503: the table does not answer)."""

from __future__ import annotations

import hmac
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from api.domain.errors import SyncError
from api.settings import Settings
from api.storage.blobs import S3Blobs
from api.storage.store import DynamoStore
from api.worker_threads import RunBlocking

logger = logging.getLogger("api")


def authorized(request: Request, token: str | None) -> bool:
    """Whether the request carries `Authorization: Bearer <token>` (never, unset).
    Compared as bytes: `compare_digest` refuses a `str` with a character outside
    ASCII (TypeError), and a header may carry any byte (a 500 with a traceback,
    issue 48); the header's bytes (Starlette decodes them as latin-1) against the
    token's UTF-8."""
    if not token:
        return False
    scheme, _, given = request.headers.get("authorization", "").partition(" ")
    sent = given.strip().encode("latin-1")
    return scheme.lower() == "bearer" and hmac.compare_digest(sent, token.encode())


def health_check(
    settings: Settings,
    store: DynamoStore,
    blobs: S3Blobs,
    realtime_status: Callable[[], dict[str, Any]] | None,
    run_blocking: RunBlocking,
) -> Callable[[Request], Awaitable[Response]]:
    async def healthz(request: Request) -> Response:
        # Who may see the details is decided before any call to S3 or DynamoDB.
        detailed = authorized(request, settings.health_token)
        # The blob store is reported beside the table; without it only attachments
        # fail, so the server stays "ok" for sync (200) and says which part is down.
        blob_store = {
            "bucket": settings.blob_bucket,
            "reachable": await run_blocking(blobs.reachable),
        }
        answer: dict[str, Any]
        try:
            await run_blocking(store.head, "healthz")
        except SyncError as exc:
            answer = {"status": "unavailable", "table": settings.table_name, "error": exc.code}
            code = 503
        except Exception:
            logger.exception("health check failed")
            answer = {"status": "error", "table": settings.table_name}
            code = 503
        else:
            answer = {
                "status": "ok" if blob_store["reachable"] else "degraded",
                "table": settings.table_name,
                "reachable": True,
            }
            code = 200
        if not detailed:
            return JSONResponse({"status": answer["status"]}, status_code=code)
        answer["blobs"] = blob_store
        if code == 200 and realtime_status is not None:
            answer["realtime"] = realtime_status()
        return JSONResponse(answer, status_code=code)

    return healthz


def metrics_endpoint(
    settings: Settings, exposition: Callable[[], bytes]
) -> Callable[[Request], Awaitable[Response]]:
    """`GET /metrics`: the Prometheus exposition (`api.metrics`), for the holder of
    the health token only, as /healthz's details (401 otherwise: a scraper
    configured without it says so at once)."""
    from prometheus_client import CONTENT_TYPE_LATEST

    async def metrics(request: Request) -> Response:
        if not authorized(request, settings.health_token):
            return JSONResponse({"error": "the bearer token of HEALTH_TOKEN is needed"}, 401)
        return Response(exposition(), media_type=CONTENT_TYPE_LATEST)

    return metrics
