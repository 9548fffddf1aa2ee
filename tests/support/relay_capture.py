"""A server that keeps a copy of every `POST /internal/pokes` it is sent (its headers
and body, as they came over the wire), as someone who can see the traffic between
servers would: `captured(base)` gives them back, to replay them.

Run by `api_server(app="tests.support.relay_capture:create_app")`.
"""

from __future__ import annotations

import base64
from typing import Any

import httpx2
from starlette.responses import JSONResponse

from api.app import create_app as create_api
from api.realtime.relay import PATH


def create_app() -> Any:
    api = create_api()
    posts: list[dict[str, Any]] = []

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["path"] == "/relay-captured":
            await JSONResponse(posts)(scope, receive, send)
            return
        if scope["type"] != "http" or scope["path"] != PATH:
            await api(scope, receive, send)
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
        posts.append({"headers": headers, "body": base64.b64encode(body).decode()})

        async def again() -> dict[str, Any]:
            return {"type": "http.request", "body": body, "more_body": False}

        await api(scope, again, send)

    return app


def captured(base: str) -> list[tuple[dict[str, str], bytes]]:
    """The posts `base` was sent so far, in the order they came: (headers, body)."""
    posts = httpx2.get(f"{base}/relay-captured", timeout=5).json()
    return [(p["headers"], base64.b64decode(p["body"])) for p in posts]


def replay(base: str, post: tuple[dict[str, str], bytes]) -> int:
    """Send a captured post to `base` again, byte for byte; its answer's status."""
    headers, body = post
    kept = {k: v for k, v in headers.items() if k not in ("host", "content-length")}
    return httpx2.post(f"{base}{PATH}", content=body, headers=kept, timeout=30).status_code
