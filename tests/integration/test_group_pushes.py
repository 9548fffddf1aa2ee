"""Silent pushes of a group-shared record's change (contract 3.12, "Groups"; docs/
realtime.md, "Who is poked"): a device of a member in the group is pushed, one of a
member outside it is not, through a server's own rounds (SNS on the local engine)."""

from __future__ import annotations

from typing import Any

import pytest
from starlette.testclient import TestClient

from api.graphql.context import RELEASE_HEADER
from api.settings import Settings
from tests.integration.test_push_audiences import CREATE, MEMBER, _tokens, http, push_settings
from tests.integration.test_silent_pushes import _endpoints, _register, _wait
from tests.support.gql import GraphQLClient, bearer

pytestmark = pytest.mark.slow
__all__ = ["http", "push_settings"]  # the fixtures, from test_push_audiences


def _data(http: TestClient, query: str, variables: dict[str, Any], tenant: str, sub: str) -> Any:
    headers = {**bearer([tenant], sub=sub), RELEASE_HEADER: "4"}  # groups' release
    body = GraphQLClient(http).execute(query, variables, headers=headers)
    assert not body.get("errors"), body
    return body["data"]


def test_a_group_records_change_pushes_only_devices_of_the_groups_members(
    http: TestClient, tenant: str, ddb: Any, push_settings: Settings
) -> None:
    for sub, role, groups in (
        ("olga", "OWNER", []),
        ("bob", "WRITER", ["kids"]),
        ("cat", "WRITER", []),
    ):
        member = {"tenantID": tenant, "id": sub, "member": {"role": role, "groups": groups}}
        _data(http, MEMBER, {"i": member}, tenant, "olga")
    for sub, device in [("bob", "bob-phone"), ("cat", "cat-phone")]:
        assert "errors" not in _register(http, tenant, sub, device)
    arns = _endpoints(ddb, tenant)
    kids = {
        "tenantID": tenant,
        "person": {"givenName": "Kids"},
        "visibility": {"sharedWith": [], "groups": ["kids"]},
    }
    shared = _data(http, CREATE, {"i": kids}, tenant, "olga")["createPerson"]["person"]
    _wait(lambda: _tokens(push_settings, arns)["bob-phone"] != [], "Bob's device's push")
    wide = {"tenantID": tenant, "person": {"givenName": "Everyone"}}
    everyone = _data(http, CREATE, {"i": wide}, tenant, "olga")["createPerson"]["person"]
    _wait(lambda: _tokens(push_settings, arns)["cat-phone"] != [], "Cat's device's push")
    pushed = _tokens(push_settings, arns)
    # The group's change was the only one after bob's device registered: its round
    # pushed him (a token of his own view's, as an UNTOLD device's is: latest_seen).
    assert pushed["bob-phone"] and pushed["bob-phone"][0] <= shared["changeToken"]
    # Never the group's change's token: cat's device is pushed a change of her own
    # view (the group's change is UNTOLD for a member it does not name, whose view is
    # read: latest_seen), within its window.
    assert pushed["cat-phone"] and shared["changeToken"] not in pushed["cat-phone"]
    assert all(token <= everyone["changeToken"] for token in pushed["cat-phone"])
