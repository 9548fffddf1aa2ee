"""API Gateway WebSocket events as the realtime function receives them, from the
recorded ones in tests/deploy/events (tests/deploy and scripts/bench drive the
handlers with them)."""

from __future__ import annotations

import json
from typing import Any

from api.settings import PROJECT_ROOT

EVENTS = PROJECT_ROOT / "tests" / "deploy" / "events"


def websocket_event(
    name: str, connection_id: str, body: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The recorded event `name` (ws_connect.json, ws_message.json, ...) of the
    connection `connection_id`, carrying `body` as its message."""
    text = (EVENTS / name).read_text().replace("{{connectionId}}", connection_id)
    event: dict[str, Any] = json.loads(text)
    if body is not None:
        event["body"] = json.dumps(body)
    return event
