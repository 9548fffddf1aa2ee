"""`scripts/serve` stops when told, whatever its connections and its engine do: a
real `python -m scripts.serve` on a DynamoDB Local of the test's own (as a server
started with DYNAMODB_ENDPOINT naming another server's engine), that engine frozen
(SIGSTOP) under a subscription and requests of one tenant, then its group's SIGTERM.
A stopped server lingered for 15 s to 90 minutes: uvicorn waited without a limit for
tasks held by calls the engine never answered, requests waiting in the tenant's gate
behind them. Also: a port another process holds is refused at once, naming it."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.client import HTTPConnection
from pathlib import Path
from typing import Any

import httpx2
import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from api.settings import PROJECT_ROOT, Settings
from scripts.local_engine import LocalEngine, free_port
from tests.support.gql import TEST_AUTH_SECRET, GraphQLClient, bearer
from tests.support.servers import started
from tests.support.sockets import PROTOCOL, ws_url

pytestmark = [pytest.mark.slow, pytest.mark.serial]

# The promise is 10 s (scripts/serve: STOP_DEADLINE_S); the test waits longer, so that
# a loaded machine does not fail it, and far less than the held requests would hold
# the server: 16 reads of one tenant, 4 at a time in its gate, each call given up by
# PynamoDB after 3 attempts of 5 s, kept it some 60 s.
EXIT_WITHIN_S = 30
HELD_REQUESTS = 16


@pytest.fixture
def frozen() -> Iterator[LocalEngine]:
    """A DynamoDB Local of this test's own, which it freezes."""
    with LocalEngine(free_port(), None, short_lived=True) as running:
        yield running
        if running.pid is not None:
            os.kill(running.pid, signal.SIGCONT)


def _serve(env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "scripts.serve"],
            cwd=PROJECT_ROOT,
            env={**os.environ, **env},
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def _held(url: str, tenant: str, sent: threading.Semaphore, answers: list[Any]) -> None:
    query = f'query Held {{ changes(tenantID: "{tenant}") {{ changeToken }} }}'
    host, port = url.removeprefix("http://").split(":")
    http = HTTPConnection(host, int(port), timeout=120)
    try:
        headers = {"content-type": "application/json", **bearer([tenant])}
        http.request("POST", "/graphql", json.dumps({"query": query}), headers)
        sent.release()
        answer = http.getresponse()
        answers.append((answer.status, json.loads(answer.read())))
    except Exception as exc:  # noqa: BLE001 - what the test reports
        answers.append(exc)
        sent.release()
    finally:
        http.close()


def _read_connections(pid: int, port: int) -> int:
    """The connections to `port` that process `pid` accepted and read every byte of
    (Linux /proc: its sockets, their receive queues)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        with contextlib.suppress(OSError):
            target = os.readlink(fd)
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    read = 0
    for line in Path(f"/proc/{pid}/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        local, state, queues, inode = fields[1], fields[3], fields[4], fields[9]
        unread = int(queues.split(":")[1], 16)
        established = state == "01"
        if int(local.split(":")[1], 16) == port and established and inode in inodes:
            read += unread == 0
    return read


def test_a_stopped_server_exits_answering_what_it_holds(
    settings: Settings, frozen: LocalEngine, tenant: str, tmp_path: Path
) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = tmp_path / "serve.log"
    process = _serve({"PORT": str(port), "DYNAMODB_ENDPOINT": frozen.endpoint}, log)
    try:
        assert started(process, url, timeout_s=90, every_s=0.2), log.read_text()
        with httpx2.Client(base_url=url, headers=bearer([tenant]), timeout=30) as http:
            GraphQLClient(http).create(tenant, "Person", {"givenName": "Ann"})  # a first event
        ws = connect(ws_url(url), subprotocols=[PROTOCOL], open_timeout=10)
        payload = {"Authorization": bearer([tenant])["Authorization"]}
        ws.send(json.dumps({"type": "connection_init", "payload": payload}))
        assert json.loads(ws.recv(timeout=10)) == {"type": "connection_ack"}
        query = f'subscription {{ changesAvailable(tenantID: "{tenant}") {{ changeToken }} }}'
        ws.send(json.dumps({"id": "1", "type": "subscribe", "payload": {"query": query}}))
        assert json.loads(ws.recv(timeout=30))["type"] == "next"

        assert frozen.pid is not None
        os.kill(frozen.pid, signal.SIGSTOP)  # the engine answers nothing from now on
        answers: list[Any] = []
        sent = threading.Semaphore(0)
        clients = [
            threading.Thread(target=_held, args=(url, tenant, sent, answers), daemon=True)
            for _ in range(HELD_REQUESTS)
        ]
        for client in clients:
            client.start()
        for _ in clients:
            assert sent.acquire(timeout=60)
        # Evidence that the server holds them, 4 in the engine's hands, 12 in the
        # tenant's gate: it read every byte of each (and of the socket's).
        deadline = time.monotonic() + 60
        while _read_connections(process.pid, port) < HELD_REQUESTS + 1:
            assert time.monotonic() < deadline, _read_connections(process.pid, port)
            time.sleep(0.1)
        assert not answers, answers

        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=EXIT_WITHIN_S)
        except subprocess.TimeoutExpired:
            pytest.fail(
                f"still running {EXIT_WITHIN_S} s after SIGTERM:\n{log.read_text()[-3000:]}"
            )

        with pytest.raises(ConnectionClosed) as closed:
            while True:
                ws.recv(timeout=10)
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 1012, closed.value
        for client in clients:
            client.join(timeout=10)
        assert len(answers) == HELD_REQUESTS, answers
        for answer in answers:
            assert not isinstance(answer, Exception), answers
            status, body = answer
            assert status == 503, answers
            assert body["errors"][0]["extensions"]["code"] == "UNAVAILABLE", answers
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def _children(pid: int) -> list[int]:
    return [
        int(child)
        for task in Path(f"/proc/{pid}/task").iterdir()
        for child in (task / "children").read_text().split()
    ]


def test_a_server_whose_own_engine_is_frozen_stops_with_it(tmp_path: Path) -> None:
    """scripts/serve with its own engines, its DynamoDB Local frozen under requests,
    then its group's SIGTERM (a frozen engine gets the SIGTERM only once it runs
    again: 15-20 s): it exits, the requests answered UNAVAILABLE, no engine left
    behind, and no traceback for the requests it answered and cancelled."""
    env = {k: v for k, v in os.environ.items() if k not in ("DYNAMODB_ENDPOINT", "S3_ENDPOINT")}
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env |= {
        "PORT": str(port),
        "DYNAMODB_LOCAL_PORT": str(free_port()),
        "S3_LOCAL_PORT": str(free_port()),
        "DATA_DIR": str(tmp_path / "data"),
        "SYNC_AUTH_SECRET": TEST_AUTH_SECRET,
    }
    log = tmp_path / "serve.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "scripts.serve"],
            cwd=PROJECT_ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    engines: list[int] = []
    try:
        assert started(process, url, timeout_s=180, every_s=0.3), log.read_text()
        engines = _children(process.pid)
        java = [p for p in engines if b"DynamoDBLocal" in Path(f"/proc/{p}/cmdline").read_bytes()]
        assert len(java) == 1 and len(engines) == 2, engines
        os.kill(java[0], signal.SIGSTOP)
        tenant = "frozen-own"
        answers: list[Any] = []
        sent = threading.Semaphore(0)
        clients = [
            threading.Thread(target=_held, args=(url, tenant, sent, answers), daemon=True)
            for _ in range(8)
        ]
        for client in clients:
            client.start()
        for _ in clients:
            assert sent.acquire(timeout=60)
        deadline = time.monotonic() + 60
        while _read_connections(process.pid, port) < len(clients):
            assert time.monotonic() < deadline, _read_connections(process.pid, port)
            time.sleep(0.1)

        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=EXIT_WITHIN_S)
        except subprocess.TimeoutExpired:
            tail = log.read_text()[-3000:]
            pytest.fail(f"still running {EXIT_WITHIN_S} s after SIGTERM:\n{tail}")
        for client in clients:
            client.join(timeout=10)
        assert [a if isinstance(a, Exception) else a[0] for a in answers] == [503] * 8, answers
        deadline = time.monotonic() + 10
        while [p for p in engines if Path(f"/proc/{p}").exists()]:
            assert time.monotonic() < deadline, f"engines left behind: {engines}"
            time.sleep(0.1)
        text = log.read_text()
        assert "Traceback" not in text, text[text.find("Traceback") - 300 :][:3000]
    finally:
        for pid in [process.pid, *engines]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        process.wait()


def test_a_port_in_use_is_refused_at_once_naming_its_setting(tmp_path: Path) -> None:
    """Another DynamoDB Local on its port: the server wrote into that engine's data
    (and a busy HTTP port failed after the engines started, some 18 s, with a bare
    Errno 98; a busy S3 port in a CreateBucket 501 traceback)."""
    env = {k: v for k, v in os.environ.items() if k not in ("DYNAMODB_ENDPOINT", "S3_ENDPOINT")}
    for setting in ("PORT", "DYNAMODB_LOCAL_PORT", "S3_LOCAL_PORT"):
        ports = {name: free_port() for name in ("PORT", "DYNAMODB_LOCAL_PORT", "S3_LOCAL_PORT")}
        with socket.socket() as holder:
            holder.bind(("127.0.0.1", ports[setting]))
            holder.listen()
            run = subprocess.run(
                [sys.executable, "-m", "scripts.serve"],
                cwd=PROJECT_ROOT,
                env={
                    **env,
                    **{name: str(port) for name, port in ports.items()},
                    "DATA_DIR": str(tmp_path / setting),
                },
                capture_output=True,
                text=True,
                timeout=60,
            )
        assert run.returncode == 1, (setting, run.stdout, run.stderr)
        assert f"port {ports[setting]} " in run.stderr and f"set {setting} " in run.stderr, (
            setting,
            run.stderr,
        )
        assert "starting" not in run.stdout, (setting, run.stdout)  # nothing was started
        assert not (tmp_path / setting).exists(), setting
