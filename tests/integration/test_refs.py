"""A Ref field (contract 3.2.1) through the API, on the task tracker's Task.projectID
(examples/tasks/catalog.yaml, release 2): a malformed id is BAD_USER_INPUT naming the
field and nothing is written; an id the server has not seen is kept (offline writes
reference records created later); the reference is an id, never the record, so a
member sees a task's projectID without the project it may not see; a deletion of the
project leaves the reference as it was."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx2
import pytest

from api.graphql.context import RELEASE_HEADER
from api.settings import Settings
from tests.support import kinds
from tests.support.gql import GraphQLClient, bearer
from tests.support.servers import api_server

pytestmark = pytest.mark.slow  # a server process of its own

_MEMBER = "mutation($i: CreateMemberInput!) { createMember(input: $i) { member { id } } }"
_PROJECT = (
    "mutation($i: CreateProjectInput!) { createProject(input: $i) { project { id changeToken } } }"
)
_DELETE = "mutation($i: DeleteProjectInput!) { deleteProject(input: $i) { deletedItem { id } } }"
_TASK = "mutation($i: CreateTaskInput!) { createTask(input: $i) { task { id projectID } } }"
_GET_TASK = "query($t: ID!, $id: ID!) { task(tenantID: $t, id: $id) { projectID changeToken } }"
_GET_PROJECT = "query($t: ID!, $id: ID!) { project(tenantID: $t, id: $id) { id } }"
_CHANGES = (
    "query($t: ID!) { changes(tenantID: $t) { items { __typename id ... on Task { projectID } } } }"
)


@pytest.fixture(scope="module")
def url(settings: Settings) -> Iterator[str]:
    with api_server(settings, extra_env=kinds.SERVER_ENV) as server_url:
        yield server_url


def test_a_ref_is_an_id_checked_for_its_form_and_never_reveals_the_record(
    url: str, tenant: str
) -> None:
    with httpx2.Client(base_url=url, timeout=30) as http:
        gql = GraphQLClient(http)

        def call(sub: str, query: str, variables: dict[str, Any]) -> Any:
            headers = bearer([tenant], sub=sub) | {RELEASE_HEADER: "2"}
            return gql.execute(query, {"t": tenant, **variables}, headers=headers)

        def data(sub: str, query: str, variables: dict[str, Any]) -> Any:
            body = call(sub, query, variables)
            assert not body.get("errors"), body
            return body["data"]

        for sub, role in (("alice", "OWNER"), ("bob", "WRITER")):
            data("alice", _MEMBER, {"i": {"tenantID": tenant, "id": sub, "member": {"role": role}}})
        private: dict[str, list[str]] = {"sharedWith": []}
        project = data(
            "alice",
            _PROJECT,
            {
                "i": {
                    "tenantID": tenant,
                    "id": "p1",
                    "project": {"name": "Secret"},
                    "visibility": private,
                }
            },
        )["createProject"]["project"]
        before = data("alice", _CHANGES, {})["changes"]["items"]

        # A malformed id, or a value GraphQL's ID does not take: refused, nothing written.
        for bad, named in (("a#b", "Task.projectID"), ("", "Task.projectID"), (True, "ID")):
            task = {"tenantID": tenant, "task": {"title": "t", "projectID": bad}}
            body = call("alice", _TASK, {"i": task})
            (error,) = body["errors"]
            assert error["extensions"]["code"] == "BAD_USER_INPUT", body
            assert named in error["message"], error
        assert data("alice", _CHANGES, {})["changes"]["items"] == before

        # An id no record holds (yet): kept as written, as an offline device's would be.
        later = {"tenantID": tenant, "id": "t0", "task": {"projectID": "created-later"}}
        assert data("alice", _TASK, {"i": later})["createTask"]["task"]["projectID"] == (
            "created-later"
        )

        # Bob sees the task, shared with him, and its reference: an id, not the
        # project, which stays outside his view.
        shared = {"owner": None, "sharedWith": ["bob"]}
        task = {"tenantID": tenant, "id": "t1", "task": {"title": "plan", "projectID": "p1"}}
        data("alice", _TASK, {"i": task | {"visibility": shared}})
        seen = {i["id"]: i for i in data("bob", _CHANGES, {})["changes"]["items"]}
        assert seen["t1"] == {"__typename": "Task", "id": "t1", "projectID": "p1"}
        assert "p1" not in seen
        # Asked by its id, the project is answered as one that does not exist.
        hidden = call("bob", _GET_PROJECT, {"id": "p1"})
        assert hidden["data"] == {"project": None} and "errors" not in hidden
        assert call("bob", _GET_PROJECT, {"id": "absent"}) == hidden

        # The project deleted: the reference stays as written (no cascade, no null).
        kept = data("alice", _GET_TASK, {"id": "t1"})["task"]
        deletion = {"tenantID": tenant, "id": "p1", "changeToken": project["changeToken"]}
        data("alice", _DELETE, {"i": deletion})
        assert data("alice", _GET_TASK, {"id": "t1"})["task"] == kept
