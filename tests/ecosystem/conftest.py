"""Servers of the catalog's releases beside the one a client test file starts
(docs/evolution.md), shared by the RxDB and WatermelonDB tests: a release 1
server (a rollback) and a release 2 server that retired release 1
(MIN_CLIENT_RELEASE=2), both of the tests' app tests/apps/release2/, on the session's table.
Session-scoped: `scripts/test --all` runs both files in one process (serial), so
the two starts are paid once."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from api.settings import Settings
from tests.support.release2 import SERVER_ENV
from tests.support.servers import api_server


@pytest.fixture(scope="session")
def release_servers(settings: Settings) -> Iterator[dict[str, str]]:
    """GraphQL URLs: "release1" (SYNC_RELEASE=1), "min2" (MIN_CLIENT_RELEASE=2)."""
    with (
        api_server(settings, extra_env={**SERVER_ENV, "SYNC_RELEASE": "1"}) as old,
        api_server(settings, extra_env={**SERVER_ENV, "MIN_CLIENT_RELEASE": "2"}) as retiring,
    ):
        yield {"release1": f"{old}/graphql", "min2": f"{retiring}/graphql"}
