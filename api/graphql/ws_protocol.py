"""uvicorn's WebSocket protocol with a bound on what a socket sends before it is
acknowledged (`--ws api.graphql.ws_protocol:BoundedWebSockets`; scripts/serve and
the tests' servers use it).

A client that floods WebSocket ping frames before `connection_init` is answered by
uvicorn itself, a pong written for every ping, with no message reaching the app:
parsing 200,000 of them (1.2 MB) and writing their pongs held the event loop for
seconds at a time on a loaded machine, so the app's own deadlines fired late (the
12 s ack deadline at 20 s, beside a CPU hog at load 15; issue 48, finding 9). A
graphql-transport-ws client sends a `connection_init` of a few KB (a token) and
waits for the server's `connection_ack`: past UNACKNOWLEDGED_BYTES before it, the
connection is aborted at once, before the bytes are parsed."""

from __future__ import annotations

from typing import Any

from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol

# What a socket may send after its handshake and before the server's connection_ack:
# a connection_init (its token: a few KB) and a few pings, many times over.
UNACKNOWLEDGED_BYTES = 64 * 1024


class BoundedWebSockets(WebSocketsSansIOProtocol):
    """Aborts a connection that sends more than UNACKNOWLEDGED_BYTES before the app
    sends it `connection_ack`."""

    _acknowledged = False
    _unacknowledged_bytes = 0

    def data_received(self, data: bytes) -> None:
        if self.handshake_complete and not self._acknowledged:
            self._unacknowledged_bytes += len(data)
            if self._unacknowledged_bytes > UNACKNOWLEDGED_BYTES:
                self.logger.info(
                    "websocket aborted: %d bytes before connection_ack",
                    self._unacknowledged_bytes,
                )
                self.transport.abort()
                return
        super().data_received(data)

    async def send(self, message: Any) -> None:
        if message.get("type") == "websocket.send" and '"connection_ack"' in (
            message.get("text") or ""
        ):
            self._acknowledged = True
        await super().send(message)
