"""The stream follower leaves no hole: a write committed while it takes its shard
iterators (issue: the first write after a process's first subscription) or while it
waits to restart after an error is announced by its catch-up read of the heads.

The writes come from the store directly, as another server's would; the follower
reads DynamoDB Local's own stream of the table.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import pytest
from botocore.config import Config

from api.domain.audiences import Audience
from api.domain.cursor import CursorCodec
from api.realtime.streams import StreamFollower
from api.service import SyncService
from api.settings import Settings
from api.storage.store import DynamoStore
from tests.support.family import PERSON
from tests.support.faults import Fault, connection_refused, dynamodb_error, hooks_on

# A capability beyond the sync core: scripts/test --all (pyproject's `slow`).
pytestmark = [pytest.mark.slow, pytest.mark.serial]


class _Published:
    def __init__(self) -> None:
        self.tokens: dict[str, list[str]] = {}
        self.lock = threading.Lock()

    def __call__(self, tenant_id: str, token: str, audience: Audience = None) -> None:
        with self.lock:
            self.tokens.setdefault(tenant_id, []).append(token)

    def wait_for(self, tenant_id: str, token: str, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self.lock:
                if token in self.tokens.get(tenant_id, []):
                    return True
            time.sleep(0.05)
        return False


def _following(
    settings: Settings, tenant: str
) -> tuple[SyncService, _Published, StreamFollower, Any]:
    """A tenant with a first write, and a follower (not started) of the table's
    stream for it: the service, what the follower publishes, it, its streams client."""
    service = SyncService(DynamoStore(), CursorCodec("x"))
    service.create(PERSON, tenant, "p0", {})
    published = _Published()
    streams = settings.dynamodb_client("dynamodbstreams")
    follower = StreamFollower(
        settings.dynamodb_client(),
        streams,
        settings.table_name,
        published,
        poll_interval_s=0.1,
        subscribed=lambda: {tenant},
        retry_wait_s=1.0,
    )
    return service, published, follower, streams


def test_a_write_while_the_follower_takes_its_iterators_is_announced(
    settings: Settings, tenant: str
) -> None:
    service, published, follower, streams = _following(settings, tenant)
    written: list[str] = []

    def write_meanwhile(**_: Any) -> None:
        # Another server commits W1 while this follower's GetShardIterator is on
        # its way: the iterator at LATEST lies after W1.
        if not written:
            written.append(service.create(PERSON, tenant, "p1", {}).change_token)
            time.sleep(1.0)

    with hooks_on(streams.meta.events) as register:
        register("before-call.dynamodbstreams.GetShardIterator", write_meanwhile)
        follower.start()
        try:
            assert published.wait_for(tenant, _when(written), 8), published.tokens
        finally:
            follower.stop()


def test_a_write_while_the_follower_restarts_after_an_error_is_announced(
    settings: Settings, tenant: str
) -> None:
    service, published, follower, streams = _following(settings, tenant)
    failure = Fault(lambda: dynamodb_error("InternalServerError", "injected"), times=0)
    with hooks_on(streams.meta.events) as register:
        register("before-send.dynamodbstreams.GetRecords", failure)
        follower.start()
        try:
            time.sleep(1.5)  # following: iterators taken, reading
            first = service.create(PERSON, tenant, "p1", {}).change_token
            assert published.wait_for(tenant, first, 8), published.tokens
            failure.times = 10**9  # the stream fails: the follower waits, then restarts
            time.sleep(0.6)
            lost = service.create(PERSON, tenant, "p2", {}).change_token
            failure.stop()
            assert published.wait_for(tenant, lost, 10), published.tokens
        finally:
            follower.stop()


def _when(written: list[str]) -> str:
    """W1's token once the hook has written it (the follower thread writes it)."""
    deadline = time.monotonic() + 5
    while not written and time.monotonic() < deadline:
        time.sleep(0.05)
    assert written, "GetShardIterator was never called"
    return written[0]


def test_a_down_engine_is_logged_once_then_less_and_less_often(
    settings: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    """A follower whose engine is down logged a traceback at every restart (every 5 s:
    465 of them while a stopped server lingered); now once, then at the 2nd, 4th,
    8th... failure in a row in a line, and once when it reads again."""
    once = Config(retries={"total_max_attempts": 1})
    dynamodb = settings.dynamodb_client(config=once)
    follower = StreamFollower(
        dynamodb,
        settings.dynamodb_client("dynamodbstreams", config=once),
        settings.table_name,
        lambda tenant_id, token, audience: None,
        poll_interval_s=0.05,
        retry_wait_s=0.01,
    )
    down = Fault(connection_refused())
    caplog.set_level(logging.INFO, logger="api.realtime")
    with hooks_on(dynamodb.meta.events) as register:
        register("before-send.dynamodb.DescribeTable", down)
        follower.start()
        try:
            deadline = time.monotonic() + 60
            while follower.failures.count < 64 and time.monotonic() < deadline:
                time.sleep(0.02)
            failures = follower.failures.count
            said = [r for r in caplog.records if "stream" in r.getMessage()]
            down.stop()  # the engine is back
            deadline = time.monotonic() + 30
            while follower.failures.count and time.monotonic() < deadline:
                time.sleep(0.02)
            back = [r.getMessage() for r in caplog.records if "works again" in r.getMessage()]
        finally:
            follower.stop()
    assert failures >= 64, failures
    assert said[0].exc_info is not None, "the first failure's traceback"
    assert all(r.exc_info is None for r in said[1:]), "later failures: a line each"
    # 1, 2, 4, 8, 16, 32, 64 (and 128 on a machine that slow): not one a failure.
    assert len(said) <= 8, [r.getMessage() for r in said]
    assert "still fails (64 times in a row)" in said[6].getMessage()
    assert back and back[0].startswith("reading the table's stream works again after"), back
