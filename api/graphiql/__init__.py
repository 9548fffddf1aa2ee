"""GraphiQL served entirely by the API: no CDN, so it works offline.

The assets come from the npm packages graphiql, react, react-dom and graphql,
installed (pinned) into .cache/graphiql by the setup scripts and served from
/graphiql/assets/. Only the files the page needs are served.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
from pathlib import Path

from starlette.requests import Request
from starlette.responses import FileResponse, PlainTextResponse, Response

from api.settings import PROJECT_ROOT

NODE_MODULES = PROJECT_ROOT / ".cache" / "graphiql" / "node_modules"
ASSETS = {
    "react.js": "react/umd/react.production.min.js",
    "react-dom.js": "react-dom/umd/react-dom.production.min.js",
    "graphiql.js": "graphiql/graphiql.min.js",
    "graphiql.css": "graphiql/graphiql.min.css",
}
DEFAULT_QUERY = """# Sync a tenant like a device does: follow `cursor` until it is null, then
# keep `changeToken` and pass it as `since` next time.
#
# Every request needs a token. Make one with
#   scripts/token --sub alice --tenant family1
# and paste it in the Headers tab below:
#   {"Authorization": "Bearer <token>"}
query Sync($tenantID: ID!, $since: ID, $cursor: String) {
  changes(tenantID: $tenantID, since: $since, cursor: $cursor, limit: 100) {
    items {
      __typename
      id
      changeToken
      updatedAt
      ... on Person { givenName familyName relationship profileColor }
      ... on Reminder { title dueAt completed }
      ... on DeletedItem { type }
    }
    cursor
    changeToken
  }
}
"""
DEFAULT_VARIABLES = '{\n  "tenantID": "family1"\n}'
DEFAULT_HEADERS = '{\n  "Authorization": "Bearer <paste a token from scripts/token>"\n}'

_PAGE = """<!doctype html>
<html lang="en">
<head>
  <meta charset="utf-8">
  <title>Offline sync API - GraphiQL</title>
  <meta name="viewport" content="width=device-width, initial-scale=1">
  <link rel="stylesheet" href="/graphiql/assets/graphiql.css">
  <style>body {{ margin: 0; height: 100vh; }} #graphiql {{ height: 100vh; }}</style>
</head>
<body>
  <div id="graphiql">Loading GraphiQL...</div>
  <script src="/graphiql/assets/react.js"></script>
  <script src="/graphiql/assets/react-dom.js"></script>
  <script src="/graphiql/assets/graphiql.js"></script>
  <script>
    const fetcher = GraphiQL.createFetcher({{ url: "/graphql" }});
    ReactDOM.createRoot(document.getElementById("graphiql")).render(
      React.createElement(GraphiQL, {{
        fetcher,
        defaultQuery: {query},
        variables: {variables},
        headers: {headers},
        defaultEditorToolsVisibility: true,
        isHeadersEditorEnabled: true,
        shouldPersistHeaders: false,
      }})
    );
  </script>
</body>
</html>
"""


def page_html() -> str:
    return _PAGE.format(
        query=json.dumps(DEFAULT_QUERY),
        variables=json.dumps(DEFAULT_VARIABLES),
        headers=json.dumps(DEFAULT_HEADERS),
    )


def _inline_script_hash(html: str) -> str:
    (script,) = re.findall(r"<script>(.*?)</script>", html, flags=re.DOTALL)
    return "sha256-" + base64.b64encode(hashlib.sha256(script.encode()).digest()).decode()


# The page runs only its own scripts (the inline one by its hash) and talks only to
# this server, and no other site may frame it. Headers typed into the page (the
# bearer token) are not persisted in the browser's storage.
SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'self'; "
        f"script-src 'self' '{_inline_script_hash(page_html())}'; "
        "style-src 'self' 'unsafe-inline'; img-src 'self' data:; font-src 'self' data:; "
        "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'"
    ),
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}


def assets_installed() -> bool:
    return all((NODE_MODULES / path).is_file() for path in ASSETS.values())


async def asset(request: Request) -> Response:
    name = request.path_params["name"]
    relative = ASSETS.get(name)
    if relative is None:
        return PlainTextResponse("Not Found", status_code=404)
    path = Path(NODE_MODULES / relative)
    if not path.is_file():
        return PlainTextResponse(
            "GraphiQL assets are not installed: run scripts/serve, which installs them",
            status_code=503,
        )
    media = "text/css" if name.endswith(".css") else "application/javascript"
    return FileResponse(path, media_type=media, headers={"Cache-Control": "max-age=86400"})
