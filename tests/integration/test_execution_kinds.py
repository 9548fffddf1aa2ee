"""The plain-record fast path (api/graphql/execution.py) on the field kinds of the
task tracker (examples/tasks/catalog.yaml): lists of every scalar kind, an object
(TaskAddress) and a list of them (TaskChecklist) are completed by it, and a page of
tasks answers exactly what graphql-core's own execution answers (a server without
the fast path, on the same table), nulls, empty lists and a deletion included."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import httpx2
import pytest

from api.settings import Settings
from scripts.bench_app_pages import AT_BOUNDS, SELECTIONS
from tests.support import kinds
from tests.support.gql import GraphQLClient, bearer
from tests.support.graphql_core_app import APP
from tests.support.servers import api_server

pytestmark = pytest.mark.slow  # server processes of their own

_PAGE = (
    "query($t: ID!) { changes(tenantID: $t, limit: 100) { items { __typename id "
    f"... on Task {{ {SELECTIONS['Task']} projectID }} "
    "... on Project { name memberIDs status hoursPerWeek } "
    "... on DeletedItem { type } } cursor } }"
)
_PUSH = (
    "mutation($i: PushChangesInput!) { pushChanges(input: $i) { results { status "
    "item { changeToken } } } }"
)
_PLAIN = """
from api.graphql.schema import default_schema
import json
plain = default_schema().execution_context_class.plain_fields
print(json.dumps({t: sorted(f) for t, f in plain.items()}))
"""


@pytest.fixture(scope="module")
def urls(settings: Settings) -> Iterator[tuple[str, str]]:
    with (
        api_server(settings, extra_env=kinds.SERVER_ENV) as fast,
        api_server(settings, extra_env=kinds.SERVER_ENV, app=APP) as slow,
    ):
        yield fast, slow


def test_the_fast_path_completes_the_kinds_lists_and_objects() -> None:
    env = {**os.environ, **kinds.SERVER_ENV}
    done = subprocess.run(
        [sys.executable, "-c", _PLAIN], env=env, capture_output=True, text=True, check=True
    )
    plain = json.loads(done.stdout.splitlines()[-1])
    for name in ("counts", "scores", "flags", "days", "times", "stages", "tags", "checklist"):
        assert name in plain["Task"], name
    assert "address" in plain["Task"] and "memberIDs" in plain["Project"]
    assert plain["TaskAddress"] == sorted(f.name for f in kinds.ADDRESS)
    assert plain["TaskChecklist"] == ["done", "text"]


def test_a_page_of_every_kind_is_what_graphql_core_answers(
    urls: tuple[str, str], tenant: str
) -> None:
    fast_url, slow_url = urls
    headers = bearer([tenant]) | {"X-Sync-Release": "2"}
    some: dict[str, Any] = {
        "title": "fence",
        "stages": [],
        "address": {"city": "Paris", "doorCodes": []},
        "checklist": [{"text": "paint"}, {"done": True}],
        "projectID": "p1",
    }
    mutations: list[dict[str, Any]] = [
        {"createProject": {"tenantID": tenant, "id": "p1", "project": {"name": "House"}}},
        {"createProject": {"tenantID": tenant, "project": {"name": "x", "memberIDs": ["a"]}}},
        {"createTask": {"tenantID": tenant, "task": AT_BOUNDS}},
        {"createTask": {"tenantID": tenant, "task": some}},
        {"createTask": {"tenantID": tenant, "task": {}}},
        {"createTask": {"tenantID": tenant, "id": "gone", "task": {"title": "x"}}},
    ]
    with httpx2.Client(base_url=fast_url, timeout=60) as http:
        gql = GraphQLClient(http)
        body = gql.execute(_PUSH, {"i": {"tenantID": tenant, "mutations": mutations}}, headers)
        assert body.get("data"), body
        results = body["data"]["pushChanges"]["results"]
        assert {r["status"] for r in results} == {"APPLIED"}, body
        token = results[-1]["item"]["changeToken"]
        deletion = {"deleteTask": {"tenantID": tenant, "id": "gone", "changeToken": token}}
        body = gql.execute(_PUSH, {"i": {"tenantID": tenant, "mutations": [deletion]}}, headers)
        assert body["data"]["pushChanges"]["results"][0]["status"] == "APPLIED", body
        fast = gql.execute(_PAGE, {"t": tenant}, headers)
    with httpx2.Client(base_url=slow_url, timeout=60) as http:
        slow = GraphQLClient(http).execute(_PAGE, {"t": tenant}, headers)
    assert "errors" not in fast, fast
    items = fast["data"]["changes"]["items"]
    assert [i["__typename"] for i in items] == ["Project"] * 2 + ["Task"] * 3 + ["DeletedItem"]
    assert items[2]["counts"] == AT_BOUNDS["counts"] and items[3]["stages"] == []
    assert items[3]["checklist"] == [{"text": "paint", "done": None}, {"text": None, "done": True}]
    assert items[4]["tags"] is None and items[4]["address"] is None
    assert json.dumps(fast, sort_keys=True) == json.dumps(slow, sort_keys=True)
