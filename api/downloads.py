"""The download of a finished export (contract 3.9): GET /exports/<tenant>/<export>
with the link `exportTenant` gave. The link is its own authorization (signed with
the job's key, valid for minutes), so a browser or `curl` can fetch it; a request
that is not a valid link costs one GetItem and gets 404, an expired one 410."""

from __future__ import annotations

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from api.domain.errors import SyncError
from api.domain.identifiers import check_identifier
from api.graphql.exports import DOWNLOAD_PATH
from api.service import SyncService
from api.service.exports import Link

_MAX_SIGNATURE = 64


def export_route(service: SyncService) -> Route:
    async def download(request: Request) -> Response:
        exports = service.exports
        tenant, export = request.path_params["tenant"], request.path_params["export"]
        until = request.query_params.get("until", "")
        signature = request.query_params.get("sig", "")
        try:
            check_identifier(tenant, "tenantID")
            check_identifier(export, "exportID")
        except SyncError:
            return _refused(404, "no such export")
        if exports is None or not until.isdigit() or len(until) > 16:
            return _refused(404, "no such export")
        if not signature or len(signature) > _MAX_SIGNATURE:
            return _refused(404, "no such export")
        try:
            link, size = await run_in_threadpool(
                exports.check_link, tenant, export, int(until), signature
            )
        except SyncError as exc:
            return _refused(503 if exc.retryable else 400, exc.code)
        if link is Link.UNKNOWN:
            return _refused(404, "no such export")
        if link is Link.EXPIRED:
            return _refused(410, "this link has expired: ask exportTenant for a fresh one")
        filename = f"{export}.jsonl.gz"
        return StreamingResponse(
            exports.file(tenant, export),
            media_type="application/gzip",
            headers={
                "Content-Length": str(size),
                "Content-Disposition": f'attachment; filename="{filename}"',
                "Cache-Control": "private, no-store",
            },
        )

    return Route(
        DOWNLOAD_PATH.replace("{tenant}", "{tenant:str}").replace("{export}", "{export:str}"),
        download,
        methods=["GET"],
    )


def _refused(status: int, message: str) -> Response:
    return JSONResponse({"error": message}, status_code=status)
