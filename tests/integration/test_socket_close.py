"""A client that closes its socket right after an operation's result (before its
`complete` is sent) is no fault of the server: at most an info line, never a
traceback (issue 37, finding 7: Strawberry logged "Exception in worker task" with
WebSocketDisconnected, or KeyError from forgetting the operation twice). Against a
real uvicorn server, whose log the test reads."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from websockets.sync.client import connect

from api.settings import Settings
from tests.support.gql import bearer
from tests.support.servers import api_server
from tests.support.sockets import PROTOCOL, ws_url

pytestmark = pytest.mark.serial  # scripts/test --all runs it alone (pyproject.toml)

ROUNDS = 30


@pytest.mark.slow
def test_a_socket_closed_right_after_a_result_logs_no_traceback(
    settings: Settings, tenant: str, tmp_path: Path
) -> None:
    log = tmp_path / "server.log"
    query = f'query Closing {{ changes(tenantID: "{tenant}") {{ changeToken }} }}'
    with api_server(settings, app="tests.support.logged_app:create_app", log_file=log) as url:
        for _ in range(ROUNDS):
            with connect(ws_url(url), subprotocols=[PROTOCOL], open_timeout=10) as ws:
                payload = {"Authorization": bearer([tenant])["Authorization"]}
                ws.send(json.dumps({"type": "connection_init", "payload": payload}))
                assert json.loads(ws.recv(timeout=10)) == {"type": "connection_ack"}
                ws.send(json.dumps({"id": "1", "type": "subscribe", "payload": {"query": query}}))
                assert json.loads(ws.recv(timeout=10))["type"] == "next"
            # Closed at once, with the operation's `complete` still to send.
        # Evidence that every operation ended: its request-log line, written when it
        # ends (after whatever its end logged).
        deadline = time.monotonic() + 60
        while log.read_text().count('"operation":"Closing"') < ROUNDS:
            assert time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.2)
    text = log.read_text()
    assert "Traceback" not in text, text[text.index("Traceback") - 200 :][:3000]
    assert "ERROR" not in text, text[-3000:]
