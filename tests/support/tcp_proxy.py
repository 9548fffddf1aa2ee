"""A plain TCP proxy: what a server's `REALTIME_PEER_URL` may pass through (a port
forward, a sidecar). Bytes go both ways unchanged; when one side closes, so does
the other. Runs on an event loop of its own thread; its target may be set after it
listens (the server behind it picks its port when it starts)."""

from __future__ import annotations

import asyncio
import contextlib
import threading

from scripts.local_engine import free_port


class TcpProxy:
    def __init__(self, target: tuple[str, int] | None = None) -> None:
        self.port = free_port()
        self.target = target  # None: connections are closed at once
        self._writers: set[asyncio.StreamWriter] = set()  # both ends of each connection
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        self._server = asyncio.run_coroutine_threadsafe(self._listen(), self._loop).result()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def _listen(self) -> asyncio.Server:
        return await asyncio.start_server(self._connection, "127.0.0.1", self.port)

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        target = self.target
        try:
            if target is None:
                raise ConnectionRefusedError
            upstream_reader, upstream_writer = await asyncio.open_connection(*target)
        except OSError:
            writer.close()
            return
        self._writers |= {writer, upstream_writer}
        try:
            await asyncio.gather(
                _pipe(reader, upstream_writer),
                _pipe(upstream_reader, writer),
                return_exceptions=True,
            )
        finally:
            self._writers -= {writer, upstream_writer}

    def stop(self) -> None:
        async def close() -> None:
            self._server.close()
            for writer in list(self._writers):
                writer.close()

        asyncio.run_coroutine_threadsafe(close(), self._loop).result(timeout=10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)

    def __enter__(self) -> TcpProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


async def _pipe(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
    try:
        while data := await source.read(65536):
            sink.write(data)
            await sink.drain()
    finally:
        with contextlib.suppress(Exception):
            sink.close()
