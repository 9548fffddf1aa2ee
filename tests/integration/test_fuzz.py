"""Operations generated from schema.graphql, valid and invalid: never an internal error."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis_graphql import Mode, from_schema, nodes
from starlette.testclient import TestClient

from api.settings import PROJECT_ROOT
from tests.support.gql import bearer

SCHEMA = (PROJECT_ROOT / "examples" / "family" / "schema.graphql").read_text()
CODES = {
    "UNAUTHENTICATED",
    "FORBIDDEN",
    "BAD_USER_INPUT",
    "NOT_FOUND",
    "CONFLICT",
    "ALREADY_EXISTS",
    "INVALID_CURSOR",
    "UNAVAILABLE",
}
# Tenants the fuzzing caller belongs to; generated ids often fall outside them.
TENANTS = ["", "0", "fuzz", "a"]
CUSTOM_SCALARS = {
    "Time": st.one_of(st.just("2026-11-21T23:02:38.123Z"), st.text(max_size=30)).map(nodes.String),
    "Date": st.one_of(st.just("1990-04-01"), st.text(max_size=12)).map(nodes.String),
}


def _check(app_client: TestClient, query: str) -> None:
    response = app_client.post("/graphql", json={"query": query}, headers=bearer(TENANTS))
    assert response.status_code == 200, (query, response.text)
    body: dict[str, Any] = response.json()
    for error in body.get("errors", []):
        code = error.get("extensions", {}).get("code")
        assert code in CODES, (query, error)


FUZZ = settings(
    # 150 took some 30-45 s a mode on 2 cores; CI's 12 minutes are spent.
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@pytest.mark.slow
@pytest.mark.parametrize("mode", [Mode.POSITIVE, Mode.NEGATIVE], ids=["valid", "invalid"])
def test_generated_operations_never_fail_internally(app_client: TestClient, mode: Mode) -> None:
    @FUZZ
    @given(query=from_schema(SCHEMA, custom_scalars=CUSTOM_SCALARS, mode=mode))
    def run(query: str) -> None:
        _check(app_client, query)

    run()
