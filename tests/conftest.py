"""Test session setup: one DynamoDB Local (in memory, free port) and one S3 engine
(moto's server, its own process, free port) for the whole session.

Tests isolate themselves with unique tenant ids; the table is shared. The
environment is set before any settings are read, as the app would see it.
"""

from __future__ import annotations

import dataclasses
import os
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from starlette.testclient import TestClient

from api.app import create_app
from api.settings import Settings
from api.storage import models
from api.storage.table import ensure_table
from scripts.local_engine import LocalEngine, free_port
from scripts.local_s3 import LocalS3, ensure_bucket
from tests.support.faults import hooks_on
from tests.support.gql import TEST_AUTH_SECRET, GraphQLClient
from tests.support.torn import TornEngine

# The files that take longest in scripts/test --all (its JUnit reports), collected
# first: its workers take files in collection order (--no-loadscope-reorder), and a
# long one handed out last runs alone at the end (the bench's 3 minutes did). The
# deploy test after three others: its first test needs serverless's npm packages,
# which scripts/test --all fetches beside the first tests (some 45 s on a fresh
# clone, that its worker waited for when it came second).
LONGEST_FIRST = (
    "tests/bench/",
    "tests/integration/test_concurrency.py",
    "tests/integration/test_torn_sync.py",
    "tests/integration/test_export.py",
    "tests/deploy/test_serverless.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    def rank(item: pytest.Item) -> int:
        found = (i for i, prefix in enumerate(LONGEST_FIRST) if item.nodeid.startswith(prefix))
        return next(found, len(LONGEST_FIRST))

    items.sort(key=rank)  # stable: each file's tests, and the others, keep their order


@pytest.fixture(scope="session")
def engine() -> Iterator[LocalEngine]:
    with LocalEngine(free_port(), data_dir=None, short_lived=True) as running:
        yield running


@pytest.fixture(scope="session")
def blob_engine() -> Iterator[LocalS3]:
    with LocalS3(free_port()) as running:
        yield running


@pytest.fixture(scope="module")
def sns_engine() -> Iterator[LocalS3]:
    """A local engine of the module's own for SNS: what `tests.support.sns` reads back
    (`/moto-api/data.json`) is every service's state of its engine, and the session's
    blob engine, shared with every other test, answered it 500 in CI's full parallel run."""
    with LocalS3(free_port()) as running:
        yield running


@pytest.fixture(scope="session")
def settings(engine: LocalEngine, blob_engine: LocalS3) -> Settings:
    settings = dataclasses.replace(
        Settings.from_env({}),
        dynamodb_endpoint=engine.endpoint,
        s3_endpoint=blob_engine.endpoint,
        blob_bucket="sync-test-blobs",
        table_name="sync-test",
        cursor_secret="test-cursor-secret",
        auth_secret=TEST_AUTH_SECRET,
    )
    os.environ["DYNAMODB_ENDPOINT"] = engine.endpoint
    os.environ["TABLE_NAME"] = settings.table_name
    os.environ["S3_ENDPOINT"] = blob_engine.endpoint
    os.environ["BLOB_BUCKET"] = settings.blob_bucket
    os.environ["CURSOR_SECRET"] = settings.cursor_secret
    os.environ["SYNC_AUTH_SECRET"] = settings.auth_secret
    settings.apply_local_credentials()
    ensure_table(settings.dynamodb_client(), settings.table_name)
    ensure_bucket(
        settings.s3_client(),
        settings.blob_bucket,
        settings.aws_region,
        settings.blob_cors_origins,
    )
    models.bind(settings)
    return settings


@pytest.fixture(scope="session")
def ddb(settings: Settings) -> Any:
    """A raw boto3 client on the test table, to look at stored items directly."""
    return settings.dynamodb_client()


@pytest.fixture
def tenant() -> str:
    return f"t-{uuid.uuid4().hex[:12]}"


@pytest.fixture(scope="session")
def app_client(settings: Settings) -> Iterator[TestClient]:
    with TestClient(create_app(settings)) as client:
        yield client


@pytest.fixture
def gql(app_client: TestClient) -> GraphQLClient:
    return GraphQLClient(app_client)


@pytest.fixture
def inject(settings: Settings) -> Iterator[Callable[[str, Callable[..., Any]], None]]:
    """Register a botocore event hook on the store's client, for failure injection.

    Faults enter at the HTTP layer between the store and DynamoDB Local, so the
    code under test runs unchanged. Hooks are removed after the test.
    """
    with hooks_on(models.RecordItem._get_connection().connection.client.meta.events) as register:
        yield register


@pytest.fixture(scope="session")
def torn(engine: LocalEngine) -> Iterator[TornEngine]:
    """The torn-commit engine (tests/support/torn.py) in front of the session's DynamoDB
    Local: transactions applied item by item, with pauses and rare long stalls."""
    seed = int(os.environ.get("TORN_SEED", "1"))
    with TornEngine(engine.endpoint, seed=seed) as running:
        yield running


@pytest.fixture
def unhurried_exports(monkeypatch: pytest.MonkeyPatch) -> None:
    """Export calls without their time bound (CALL_S) and their pause between steps:
    a test that asserts what a call did, not when it stopped, holds on a loaded
    machine (a 2 s call then stops early), and takes half the time. The read and
    write budgets stay on."""
    from api.service import exports

    monkeypatch.setattr(exports, "CALL_S", 120.0)
    monkeypatch.setattr(exports, "PAUSE", 0.0)
