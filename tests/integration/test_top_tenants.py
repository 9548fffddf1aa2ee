"""`scripts/top-tenants` answers from a real server's log: `python -m scripts.serve`
(uvicorn, the log format scripts/serve gives it) on the tests' engines."""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import redirect_stdout
from pathlib import Path

import httpx2
import pytest

from api.settings import PROJECT_ROOT, Settings
from scripts import top_tenants
from scripts.local_engine import free_port
from tests.support.gql import GraphQLClient
from tests.support.servers import started

pytestmark = pytest.mark.slow


@pytest.fixture
def served(settings: Settings, tmp_path: Path) -> Iterator[tuple[str, Path]]:
    port = free_port()
    log_path = tmp_path / "serve.log"
    log = log_path.open("w")
    # The tests' engines (DYNAMODB_ENDPOINT, S3_ENDPOINT: the settings fixture).
    process = subprocess.Popen(
        [sys.executable, "-m", "scripts.serve"],
        cwd=PROJECT_ROOT,
        env={**os.environ, "PORT": str(port)},
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        if not started(process, url, timeout_s=60, every_s=0.2):
            raise RuntimeError(f"the server did not start:\n{log_path.read_text()}")
        yield url, log_path
    finally:
        os.killpg(process.pid, signal.SIGINT)
        process.wait(timeout=30)
        log.close()


def test_top_tenants_ranks_a_servers_tenants_by_capacity(served: tuple[str, Path]) -> None:
    url, log_path = served
    busy, light, reader = (
        f"t-{name}-{uuid.uuid4().hex[:8]}" for name in ("busy", "light", "reader")
    )
    with httpx2.Client(base_url=url, timeout=30) as http:
        gql = GraphQLClient(http)
        for i in range(3):
            gql.create(busy, "Person", {"givenName": f"p{i}"})
        gql.sync(busy)
        gql.create(light, "Person", {})
        gql.sync(reader)
    # The server writes a request's line once its answer is sent: on a loaded
    # machine the reader's came after the script read the log (CI, load 15).
    deadline = time.monotonic() + 30
    while reader not in log_path.read_text() and time.monotonic() < deadline:
        time.sleep(0.1)
    out = io.StringIO()
    with redirect_stdout(out):
        top_tenants.main([str(log_path), "--top", "3"])
    header, *rows, footer = out.getvalue().splitlines()
    assert header.split()[:3] == ["tenant", "requests", "read"]
    ranked = [row.split() for row in rows]
    assert [r[0] for r in ranked] == [busy, light, reader]  # the most capacity first
    requests = {r[0]: int(r[1]) for r in ranked}
    assert requests == {busy: 4, light: 1, reader: 1}  # 3 creates and a one-page sync
    writes = {r[0]: float(r[3]) for r in ranked}
    assert writes[busy] > writes[light] > 0 == writes[reader]
    dollars = [float(r[5]) for r in ranked]
    assert dollars[0] > dollars[1] > 0 and dollars[2] > 0
    assert "Not attributed: S3 storage" in footer
