"""One tenant's reads cannot take the worker pool: two requests of 30 `changes`
aliases each, all held inside DynamoDB, leave another tenant's read (another
caller's) answered at once (it waited 98.7 s behind them), and at most
READERS_PER_TENANT of them are in the pool at a time."""

from __future__ import annotations

import concurrent.futures
import threading
from collections.abc import Callable
from typing import Any

import pytest
from starlette.testclient import TestClient

from api.tenant_gate import READERS_PER_TENANT
from tests.support.gql import GraphQLClient, bearer

pytestmark = pytest.mark.serial  # scripts/test --all runs it alone (pyproject.toml)

Inject = Callable[[str, Callable[..., Any]], None]


@pytest.mark.slow
def test_a_tenants_heavy_reads_leave_other_tenants_a_worker(
    app_client: TestClient, gql: GraphQLClient, tenant: str, inject: Inject
) -> None:
    heavy, light = f"{tenant}-heavy", f"{tenant}-light"
    gql.create(heavy, "Person", {})
    gql.create(light, "Person", {})
    release = threading.Event()
    inside = [0, 0]  # now, most at once
    lock = threading.Lock()

    def hold_heavy(params: dict[str, Any], **_: Any) -> None:
        # The heavy tenant's log reads, not each request's check of the caller's access
        # (its membership partition): held too, that check kept both requests' aliases
        # out of the pool until its 20 s hold ran out.
        if f"T#{heavy}#LOG" not in str(params):
            return
        with lock:
            inside[0] += 1
            inside[1] = max(inside[1], inside[0])
        release.wait(20)
        with lock:
            inside[0] -= 1

    inject("before-call.dynamodb.Query", hold_heavy)
    aliases = " ".join(
        f"a{i}: changes(tenantID: $t, limit: 1) {{ changeToken }}" for i in range(30)
    )
    query = f"query($t: ID!) {{ {aliases} }}"
    pool = concurrent.futures.ThreadPoolExecutor(3)
    try:
        attacks = [pool.submit(gql.execute, query, {"t": heavy}) for _ in range(2)]
        while inside[1] < READERS_PER_TENANT:  # the heavy tenant's reads are held
            threading.Event().wait(0.05)
        # Another caller's: the heavy one's own calls wait behind its share
        # (`test_caller_admission`).
        light_read = pool.submit(
            gql.execute,
            "query($t: ID!) { changes(tenantID: $t) { changeToken } }",
            {"t": light},
            bearer([light], sub="light-reader"),
        )
        body = light_read.result(timeout=10)  # answered while the heavy reads are held
        assert "errors" not in body, body
        assert inside[1] == READERS_PER_TENANT, inside
    finally:
        release.set()
        pool.shutdown(wait=True)
    for attack in attacks:
        result = attack.result()
        codes = {e["extensions"]["code"] for e in result.get("errors", [])}
        assert codes <= {"UNAVAILABLE"}, result  # refused beyond the queue, never a 500
