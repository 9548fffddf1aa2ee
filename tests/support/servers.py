"""Independent API server processes sharing one table, as Lambda instances do."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx2

from api.settings import PROJECT_ROOT, Settings
from scripts.local_engine import free_port, stop_process

# Servers that relay pokes sign them with a key from the cursor secret, which must
# then be a real secret (Settings.check); they share this one.
RELAYED_CURSOR_SECRET = "relayed-servers-cursor-secret-0123456789"
# Their /healthz answers details (whether they read the stream) to this token.
HEALTH_TOKEN = "test-servers-health-token"

# The running servers' processes, by base URL (`crash`).
_RUNNING: dict[str, subprocess.Popen[bytes]] = {}


def crash(base_url: str) -> None:
    """Kill a server as a crash would (SIGKILL: no request finishes, nothing is flushed)."""
    _RUNNING[base_url].kill()
    _RUNNING[base_url].wait()


def started(
    process: subprocess.Popen[Any], base: str, timeout_s: float, every_s: float = 0.1
) -> bool:
    """Whether the server `process` started answers 200 on `base`/healthz within
    `timeout_s` (False: it exited first, or did not answer in time)."""
    deadline = time.monotonic() + timeout_s
    # One client for the polls: each new client builds a TLS context (the CA bundle
    # loaded, some 40 ms of CPU), 20 or more a server start.
    with httpx2.Client(timeout=2) as http:
        while True:
            try:
                if http.get(f"{base}/healthz").status_code == 200:
                    return True
            except httpx2.TransportError:
                pass
            if process.poll() is not None or time.monotonic() > deadline:
                return False
            time.sleep(every_s)


@contextmanager
def api_server(
    settings: Settings,
    clock_offset_ms: int = 0,
    extra_env: dict[str, str] | None = None,
    app: str = "api.app:create_app",
    relayed: bool = False,
    log_file: Path | None = None,
) -> Iterator[str]:
    """Run `uvicorn <app>` (an app factory) in its own process; yields its base URL.
    `relayed`: the server takes part in the stream reader's lease at its base URL.
    `log_file`: where its output (stdout and stderr, so its log) goes."""
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    env = {
        **os.environ,
        "DYNAMODB_ENDPOINT": settings.dynamodb_endpoint or "",
        "TABLE_NAME": settings.table_name,
        "CURSOR_SECRET": settings.cursor_secret,
        "SYNC_AUTH_SECRET": settings.auth_secret,
        "CLOCK_OFFSET_MS": str(clock_offset_ms),
        "HEALTH_TOKEN": HEALTH_TOKEN,
        # The settings' S3 engine when they name one (the bench's: `local_engines`);
        # else the environment's (the tests set S3_ENDPOINT for the session).
        **(
            {"S3_ENDPOINT": settings.s3_endpoint, "BLOB_BUCKET": settings.blob_bucket}
            if settings.s3_endpoint
            else {}
        ),
        **({"REALTIME_PEER_URL": base, "CURSOR_SECRET": RELAYED_CURSOR_SECRET} if relayed else {}),
        **(extra_env or {}),
    }
    log = None if log_file is None else log_file.open("ab")
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "uvicorn",
            app,
            "--factory",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--log-level",
            "warning",
            # A WebSocket message is bounded like a request body (uvicorn's default: 16 MB).
            "--ws-max-size",
            str(settings.max_body_bytes),
            # A socket's bytes before its connection_ack are bounded (issue 48).
            "--ws",
            "api.graphql.ws_protocol:BoundedWebSockets",
            *os.environ.get("TEST_UVICORN_ARGS", "").split(),
        ],
        cwd=PROJECT_ROOT,
        env=env,
        stdout=log,
        stderr=log,
    )
    try:
        # A shared, loaded machine starts slowly.
        if not started(process, base, timeout_s=90):
            raise RuntimeError(f"API server on port {port} did not start")
        _RUNNING[base] = process
        yield base
    finally:
        _RUNNING.pop(base, None)
        stop_process(process)
        if log is not None:
            log.close()


def stream_readers(bases: list[str]) -> list[str]:
    """The relayed servers (`api_server(relayed=True)`) that say they read the table's
    stream (their /healthz)."""
    return [
        base
        for base in bases
        if httpx2.get(
            f"{base}/healthz", timeout=5, headers={"Authorization": f"Bearer {HEALTH_TOKEN}"}
        ).json()["realtime"]["readsStream"]
    ]


def one_stream_reader(bases: list[str], within_s: float) -> str:
    """The one server among `bases` that reads the stream, once there is exactly one."""
    deadline = time.monotonic() + within_s
    while True:
        readers = stream_readers(bases)
        if len(readers) == 1:
            return readers[0]
        if time.monotonic() > deadline:
            raise TimeoutError(f"stream readers after {within_s} s: {readers}")
        time.sleep(0.2)
