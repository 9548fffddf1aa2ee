"""The API and a folder of static files on one origin, as a CDN or a load balancer in
front of both would serve them: `/example/...` is the folder (EXAMPLE_PAGE_DIR), every
other request (HTTP, WebSocket, lifespan) goes to the API's own app, unchanged.
For `api_server(app="tests.support.page_app:create_app")`."""

from __future__ import annotations

import os

from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Receive, Scope, Send

from api.app import create_app as create_api

PREFIX = "/example"


def create_app() -> ASGIApp:
    api = create_api()
    static = StaticFiles(directory=os.environ["EXAMPLE_PAGE_DIR"])

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"].startswith(f"{PREFIX}/"):
            await static({**scope, "path": scope["path"][len(PREFIX) :]}, receive, send)
        else:
            await api(scope, receive, send)

    return app
