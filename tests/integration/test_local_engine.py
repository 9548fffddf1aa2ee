"""DynamoDB Local as the embedded engine: persistence, readiness, no orphan JVM."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import boto3
import pytest
from pynamodb.attributes import UnicodeAttribute
from pynamodb.models import Model

from api.settings import PROJECT_ROOT
from api.storage.table import definition, ensure_table
from scripts.local_engine import LocalEngine, free_port


def _model_for(endpoint: str) -> Any:
    class Note(Model):
        class Meta:
            table_name = "persist-check"
            region = "us-east-1"
            host = endpoint
            aws_access_key_id = "local"
            aws_secret_access_key = "local"

        pk = UnicodeAttribute(hash_key=True)
        sk = UnicodeAttribute(range_key=True)
        text = UnicodeAttribute()

    return Note


def _client(endpoint: str) -> Any:
    return boto3.client(
        "dynamodb",
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id="local",
        aws_secret_access_key="local",
    )


@pytest.mark.slow
def test_data_survives_a_restart_on_the_same_data_dir(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    port = free_port()
    with LocalEngine(port, data_dir, short_lived=True) as engine:
        assert ensure_table(_client(engine.endpoint), "persist-check") is True
        _model_for(engine.endpoint)("p", "s", text="written before restart").save()
    assert any(data_dir.iterdir()), "DynamoDB Local wrote nothing to the data directory"

    with LocalEngine(free_port(), data_dir, short_lived=True) as engine:
        assert ensure_table(_client(engine.endpoint), "persist-check") is False
        item = _model_for(engine.endpoint).get("p", "s", consistent_read=True)
        assert item.text == "written before restart"


def test_table_creation_is_idempotent_and_uses_the_one_definition(engine: LocalEngine) -> None:
    client = _client(engine.endpoint)
    assert ensure_table(client, "idempotent-check") is True
    assert ensure_table(client, "idempotent-check") is False
    table = client.describe_table(TableName="idempotent-check")["Table"]
    assert table["KeySchema"] == definition()["KeySchema"]
    assert table["BillingModeSummary"]["BillingMode"] == "PAY_PER_REQUEST"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is dead but still listed until reaped.
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().split(")")[-1].split()[0] != "Z"


@pytest.mark.slow
def test_jvm_dies_with_a_killed_parent() -> None:
    script = textwrap.dedent(
        """
        import sys, time
        from scripts.local_engine import LocalEngine, free_port
        engine = LocalEngine(free_port(), None, short_lived=True)
        engine.start()
        print(engine._process.pid, flush=True)
        time.sleep(600)
        """
    )
    parent = subprocess.Popen(
        [sys.executable, "-c", script], cwd=PROJECT_ROOT, stdout=subprocess.PIPE, text=True
    )
    try:
        assert parent.stdout is not None
        jvm_pid = int(parent.stdout.readline())
        assert _alive(jvm_pid)
        parent.send_signal(signal.SIGKILL)
        parent.wait()
        deadline = time.monotonic() + 15
        while _alive(jvm_pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _alive(jvm_pid), "DynamoDB Local outlived its killed parent"
    finally:
        parent.kill()
        parent.wait()
        if parent.stdout is not None:
            parent.stdout.close()
