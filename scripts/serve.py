"""`scripts/serve`: DynamoDB Local (unless DYNAMODB_ENDPOINT is set), the table, the
local S3 engine (unless S3_ENDPOINT is set), the bucket, silent pushes through the
same engine's SNS (unless a platform application is set), uvicorn.

Its ports are claimed before anything starts: a port another process holds is
refused at once, naming the setting that moves it (an engine started on a taken
port would leave the server writing into whatever engine answers there).

Stopping (SIGTERM or Ctrl-C) takes a few seconds whatever its connections and the
engines do: sockets are closed with 1012 (uvicorn), requests still unanswered
after STOP_ANSWER_S are answered `UNAVAILABLE` (`api.http.InFlight`), tasks still
running after STOP_GRACE_S are cancelled (uvicorn's `timeout_graceful_shutdown`),
and a process still alive STOP_DEADLINE_S after the signal (a worker thread held
by an engine that does not answer: a thread cannot be stopped) kills its engines
and exits. A second signal exits at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import signal
import socket
import sys
import threading
from collections.abc import Callable, Iterator

import uvicorn

from api.app import create_app, freeze_startup_heap
from api.graphql.ws_protocol import BoundedWebSockets
from api.http import InFlight
from api.settings import Settings, is_loopback
from api.storage.table import ensure_table
from scripts.local_engine import EngineError, EngineProcess, LocalEngine
from scripts.local_s3 import LocalS3, ensure_bucket, ensure_push_applications

# After a stop signal: unanswered requests are answered UNAVAILABLE after STOP_ANSWER_S
# (a request that a healthy engine answers ends first), tasks still running are
# cancelled after STOP_GRACE_S, engines get ENGINE_STOP_S between SIGTERM and SIGKILL
# (DynamoDB Local's SQLite and the S3 engine's journal survive a kill), and the process
# exits STOP_DEADLINE_S after the signal at the latest.
STOP_ANSWER_S = 2.0
STOP_GRACE_S = 4
ENGINE_STOP_S = 3.0
STOP_DEADLINE_S = 8.0

log = logging.getLogger("scripts.serve")


def busy_ports(settings: Settings) -> list[str]:
    """What stands in the way of the ports this server would take: for each port
    another process holds, the sentence that says so and what moves it."""
    wanted = [(settings.port, "PORT", "its HTTP port")]
    if settings.dynamodb_endpoint is None:
        wanted.append((settings.dynamodb_local_port, "DYNAMODB_LOCAL_PORT", "DynamoDB Local's"))
    if settings.s3_endpoint is None:
        wanted.append((settings.s3_local_port, "S3_LOCAL_PORT", "the S3 engine's"))
    refusals = []
    for port, setting, what in wanted:
        try:
            with bound(port):
                pass
        except OSError:
            refusals.append(
                f"port {port} ({what}, {setting}) is in use by another process: stop it, "
                f"or set {setting} to a free port (docs/settings.md)"
            )
    return refusals


@contextlib.contextmanager
def bound(port: int) -> Iterator[socket.socket]:
    """A socket bound to 127.0.0.1:`port` as uvicorn binds its own (SO_REUSEADDR: a
    port whose last connections linger in TIME_WAIT is free); OSError if taken."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", port))
        yield sock
    finally:
        sock.close()


class StoppingServer(uvicorn.Server):
    """uvicorn's server, stopped within STOP_DEADLINE_S of a signal (module docstring)."""

    def __init__(self, config: uvicorn.Config, in_flight: InFlight, hard_stop: Callable[[], None]):
        super().__init__(config)
        self._in_flight = in_flight
        self._hard_stop = hard_stop
        self._loop: asyncio.AbstractEventLoop | None = None
        self._signalled = False

    async def serve(self, sockets: list[socket.socket] | None = None) -> None:
        self._loop = asyncio.get_running_loop()
        await super().serve(sockets)

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        # uvicorn's raises the signal again once it has stopped, which ended the
        # process before its engines were stopped: this one returns instead.
        handled = (signal.SIGINT, signal.SIGTERM)
        original = {sig: signal.signal(sig, self.handle_exit) for sig in handled}
        try:
            yield
        finally:
            for sig, handler in original.items():
                signal.signal(sig, handler)

    def handle_exit(self, sig: int, frame: object) -> None:
        if self._signalled:  # a second signal: no more waiting
            log.warning("stopping now (a second signal)")
            self._hard_stop()
            return
        self._signalled = True
        self.should_exit = True
        deadline = threading.Timer(STOP_DEADLINE_S, self._past_deadline)
        deadline.daemon = True
        deadline.start()
        if self._loop is not None:
            self._loop.call_soon_threadsafe(
                self._loop.call_later, STOP_ANSWER_S, self._in_flight.stop
            )

    def _past_deadline(self) -> None:
        log.error(
            "still not stopped %.0f s after the signal (calls to an engine that does not "
            "answer hold worker threads): exiting now",
            STOP_DEADLINE_S,
        )
        self._hard_stop()


def _started(stack: contextlib.ExitStack, engine: EngineProcess, holding: str) -> bool:
    """Start a local engine, stopped with `stack`; False (said on stderr) if it fails."""
    print(f"==> starting {engine.name} on port {engine.port}, {holding}")
    try:
        engine.start()
    except EngineError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return False
    stack.callback(engine.stop, ENGINE_STOP_S)
    return True


def _local_pushes(settings: Settings) -> Settings:
    """Silent pushes through the local engine's SNS (moto's server serves SNS on the
    S3 engine's port): its platform applications made, each push logged (`api.pushes`:
    `silent push sent: tenant=... device=... changeToken=...`). Left alone when a
    platform application is configured, or S3 is not a local engine."""
    if settings.push_applications:
        print(f"==> silent pushes through SNS at {settings.sns_endpoint or 'AWS'}")
        return settings
    if settings.s3_endpoint is None or not is_loopback(settings.s3_endpoint):
        print("==> silent pushes: off (no platform application, S3 not a local engine)")
        return settings
    local = dataclasses.replace(
        settings, sns_endpoint=settings.sns_endpoint or settings.s3_endpoint
    )
    arns = ensure_push_applications(local.sns_client())
    print(f"==> silent pushes through the local engine's SNS at {local.sns_endpoint}, logged")
    return dataclasses.replace(
        local, push_apns_application_arn=arns["APNS"], push_fcm_application_arn=arns["FCM"]
    )


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    settings = Settings.from_env()
    refusals = busy_ports(settings)
    for refusal in refusals:
        print(f"error: {refusal}", file=sys.stderr)
    if refusals:
        return 1
    engines: list[EngineProcess] = []

    def hard_stop() -> None:
        for engine in engines:
            engine.kill()
        print("==> stopped (forced)", flush=True)
        sys.stderr.flush()
        os._exit(1)

    with contextlib.ExitStack() as stack:
        if settings.dynamodb_endpoint is None:
            engine = LocalEngine(settings.dynamodb_local_port, settings.data_dir)
            if not _started(stack, engine, f"data in {settings.data_dir}"):
                return 1
            engines.append(engine)
            settings = dataclasses.replace(settings, dynamodb_endpoint=engine.endpoint)
        else:
            print(f"==> using DynamoDB at {settings.dynamodb_endpoint}")
        created = ensure_table(settings.dynamodb_client(), settings.table_name)
        print(f"==> table {settings.table_name}: {'created' if created else 'exists'}")
        if settings.s3_endpoint is None:
            # Beside DynamoDB Local's data: the blobs of its entities survive a restart.
            blobs = LocalS3(settings.s3_local_port, settings.data_dir / "s3")
            if not _started(stack, blobs, f"blobs kept in {blobs.store}"):
                return 1
            engines.append(blobs)
            settings = dataclasses.replace(settings, s3_endpoint=blobs.endpoint)
        else:
            print(f"==> using S3 at {settings.s3_endpoint}")
        created = ensure_bucket(
            settings.s3_client(),
            settings.blob_bucket,
            settings.aws_region,
            settings.blob_cors_origins,
        )
        origins = ", ".join(settings.blob_cors_origins) or "none"
        state = "created" if created else "exists"
        print(f"==> bucket {settings.blob_bucket}: {state}, CORS for origins {origins}")
        settings = _local_pushes(settings)
        app = create_app(settings)
        freeze_startup_heap()
        config = uvicorn.Config(
            app,
            host="127.0.0.1",
            port=settings.port,
            log_level="info",
            # A WebSocket message is bounded like a request body (uvicorn's default: 16 MB).
            ws_max_size=settings.max_body_bytes,
            # And what a socket sends before its connection_ack (issue 48).
            ws=BoundedWebSockets,
            # Unbounded, a task that never ends (a request whose engine never answers)
            # kept a stopped server alive for as long.
            timeout_graceful_shutdown=STOP_GRACE_S,
        )
        server = StoppingServer(config, app.state.in_flight, hard_stop)
        try:
            listening = stack.enter_context(bound(settings.port))
        except OSError:  # taken since the check
            print(f"error: {busy_ports(settings)[0]}", file=sys.stderr)
            return 1
        print(f"==> GraphQL and GraphiQL on http://127.0.0.1:{settings.port}/graphql")
        server.run(sockets=[listening])
    print("==> stopped")
    return 0


if __name__ == "__main__":
    code = main()
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    # Not sys.exit: it waits for anyio's worker threads (not daemon threads), which
    # calls to an engine that does not answer hold for 15 s more (PynamoDB's 3
    # attempts of 5 s); what they do is no longer anyone's.
    os._exit(code)
