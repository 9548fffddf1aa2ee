"""One caller cannot take a server's worker pool, whatever tenants its token names:
a token of 12 tenants sends each 29 `changes` aliases at once, on a real server whose
DynamoDB (Local, through a proxy) holds those tenants' Queries as a slow table would.
At most CALLS_PER_CALLER of them are in flight at a time (each tenant's gate alone
let 4 x 12 in, every one of the 40 workers), and another caller's one-item read is
answered while they are held."""

from __future__ import annotations

import concurrent.futures
import dataclasses
from collections.abc import Iterator
from typing import Any

import httpx2
import pytest

from api.settings import Settings
from api.tenant_gate import CALLS_PER_CALLER
from tests.support.dynamo_proxy import DynamoProxy, Hold
from tests.support.gql import bearer
from tests.support.servers import api_server

# A server of its own and held calls, several seconds: scripts/test --all, alone.
pytestmark = [pytest.mark.slow, pytest.mark.serial]

TENANTS = 12
ALIASES = 29
# Each of the hog's Queries is held this long (below botocore's 5 s read timeout,
# after which the server would send it again), until the test lets them all go.
HELD_S = 3.0
_READ = "changes(tenantID: $t, limit: 1) { changeToken }"
READS = "query($t: ID!) { " + " ".join(f"a{i}: {_READ}" for i in range(ALIASES)) + " }"
ONE_ITEM = "query($t: ID!, $id: ID!) { person(tenantID: $t, id: $id) { id givenName } }"
CREATE = "mutation($i: CreatePersonInput!) { createPerson(input: $i) { person { id } } }"


@pytest.fixture
def server(settings: Settings) -> Iterator[tuple[str, DynamoProxy]]:
    assert settings.dynamodb_endpoint is not None
    with DynamoProxy(settings.dynamodb_endpoint) as proxy:
        slow = dataclasses.replace(settings, dynamodb_endpoint=proxy.endpoint)
        with api_server(slow) as base:
            yield base, proxy


def _post(base: str, query: str, variables: dict[str, Any], headers: dict[str, str]) -> Any:
    answer = httpx2.post(
        f"{base}/graphql",
        json={"query": query, "variables": variables},
        headers=headers,
        timeout=120,
    )
    return answer.json()


def test_a_caller_naming_many_tenants_leaves_other_callers_a_worker(
    server: tuple[str, DynamoProxy], tenant: str
) -> None:
    base, proxy = server
    hog_tenants = [f"{tenant}-hog{i:02d}" for i in range(TENANTS)]
    other = f"{tenant}-other"
    hog_headers = bearer(hog_tenants, sub="hog")
    other_headers = bearer([other], sub="other")
    created = _post(
        base, CREATE, {"i": {"tenantID": other, "person": {"givenName": "Ann"}}}, other_headers
    )
    person = created["data"]["createPerson"]["person"]["id"]

    hog: Hold = proxy.hold(
        lambda op, body: op == "Query" and any(t in str(body) for t in hog_tenants),
        once=False,
        limit_s=HELD_S,
    )
    # The hog's calls held when the other caller's read reached DynamoDB.
    held_then: list[int] = []

    def other_reaches(operation: str, body: dict[str, Any]) -> bool:
        if other in str(body) and not hog.go.is_set():
            held_then.append(hog.now)
        return False  # never held

    proxy.hold(other_reaches, once=False)
    pool = concurrent.futures.ThreadPoolExecutor(TENANTS + 1)
    try:
        attacks = [pool.submit(_post, base, READS, {"t": t}, hog_headers) for t in hog_tenants]
        # Once the hog's calls are held in DynamoDB, the other caller reads.
        assert hog.reached.wait(60), "the hog's reads never reached DynamoDB"
        read = _post(base, ONE_ITEM, {"t": other, "id": person}, other_headers)
        most = hog.most
        hog.go.set()  # the rest of the hog's calls run unheld
        assert read.get("data", {}).get("person", {}).get("givenName") == "Ann", read
        # The read was admitted while the hog's calls were held in DynamoDB...
        assert held_then and min(held_then) > 0, held_then
        # ...which held no more than one caller's share of the workers.
        assert most <= CALLS_PER_CALLER, (
            f"one caller held {most} calls in flight at once (its share: {CALLS_PER_CALLER})"
        )
        results = [a.result(timeout=120) for a in attacks]
    finally:
        hog.go.set()
        pool.shutdown(wait=True)
    # What the hog sent beyond its queue is refused, retryable, never a 500.
    for result in results:
        codes = {e["extensions"]["code"] for e in result.get("errors", [])}
        assert codes <= {"UNAVAILABLE"}, result
