"""A small GraphQL client for tests, over any httpx-like client (TestClient or httpx)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import httpx2

from api.auth import make_local_token

TEST_AUTH_SECRET = "test-auth-secret-" + "0123456789abcdef" * 3  # long enough for HS512


def bearer(
    tenants: list[str], sub: str = "tester", secret: str = TEST_AUTH_SECRET
) -> dict[str, str]:
    return {"Authorization": f"Bearer {make_local_token(secret, sub, tenants, 3600)}"}


_COMMON = "__typename id tenantID changeToken createdAt updatedAt"
_FIELDS = {
    "Person": "givenName familyName dateOfBirth relationship phoneNumber emailAddress "
    "profileColor occupation",
    "Reminder": "title notes dueAt personID completed",
    "DeletedItem": "type",
}
# Any SynchronizedItem, with every field of its concrete type.
ITEM_SELECTION = _COMMON + "".join(f" ... on {t} {{ {f} }}" for t, f in _FIELDS.items())


def selection(type_name: str) -> str:
    return f"{_COMMON} {_FIELDS[type_name]}"


class GraphQLError(Exception):
    def __init__(self, errors: list[dict[str, Any]]) -> None:
        super().__init__(errors[0]["message"])
        self.errors = errors
        self.code = errors[0].get("extensions", {}).get("code")
        self.extensions = errors[0].get("extensions", {})


@dataclass
class SyncResult:
    items: list[dict[str, Any]] = field(default_factory=list)
    pages: int = 0
    change_token: str | None = None


class GraphQLClient:
    """Calls as a user whose token grants the tenant of each call (or `tenant=`)."""

    def __init__(self, http: Any, path: str = "/graphql") -> None:
        self.http = http
        self.path = path

    def execute(
        self,
        query: str,
        variables: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
        tenant: str | None = None,
    ) -> dict[str, Any]:
        if headers is None:
            tenant = tenant or _tenant_of(variables or {})
            headers = bearer([tenant] if tenant else [])
        # ASCII-escaped JSON, as many clients send it: it can carry any string,
        # even one that is not valid Unicode (an unpaired surrogate).
        payload = json.dumps({"query": query, "variables": variables or {}}).encode()
        response = self.http.post(
            self.path,
            content=payload,
            headers={**headers, "content-type": "application/json"},
        )
        assert response.status_code == 200, response.text
        body: dict[str, Any] = response.json()
        return body

    def data(self, query: str, variables: dict[str, Any] | None = None) -> dict[str, Any]:
        body = self.execute(query, variables)
        if body.get("errors"):
            raise GraphQLError(body["errors"])
        result: dict[str, Any] = body["data"]
        return result

    def create(
        self, tenant: str, type_name: str, fields: dict[str, Any], id: str | None = None
    ) -> dict[str, Any]:
        key = type_name[0].lower() + type_name[1:]
        data = self.data(
            f"mutation($input: Create{type_name}Input!) {{ create{type_name}(input: $input) "
            f"{{ {key} {{ {selection(type_name)} }} }} }}",
            {"input": {"tenantID": tenant, "id": id, key: fields}},
        )
        return data[f"create{type_name}"][key]

    def update(
        self, tenant: str, type_name: str, id: str, token: str, changes: dict[str, Any]
    ) -> dict[str, Any]:
        key = type_name[0].lower() + type_name[1:]
        data = self.data(
            f"mutation($input: Update{type_name}Input!) {{ update{type_name}(input: $input) "
            f"{{ {key} {{ {selection(type_name)} }} }} }}",
            {"input": {"tenantID": tenant, "id": id, "changeToken": token, "changes": changes}},
        )
        return data[f"update{type_name}"][key]

    def delete(self, tenant: str, type_name: str, id: str, token: str) -> dict[str, Any]:
        data = self.data(
            f"mutation($input: Delete{type_name}Input!) {{ delete{type_name}(input: $input) "
            f"{{ deletedItem {{ {selection('DeletedItem')} }} }} }}",
            {"input": {"tenantID": tenant, "id": id, "changeToken": token}},
        )
        return data[f"delete{type_name}"]["deletedItem"]

    def get(self, tenant: str, type_name: str, id: str) -> dict[str, Any] | None:
        key = type_name[0].lower() + type_name[1:]
        data = self.data(
            f"query($t: ID!, $id: ID!) {{ {key}(tenantID: $t, id: $id) "
            f"{{ {selection(type_name)} }} }}",
            {"t": tenant, "id": id},
        )
        return data[key]

    def changes_page(
        self,
        tenant: str,
        since: str | None = None,
        cursor: str | None = None,
        limit: int | None = None,
    ) -> dict[str, Any]:
        data = self.data(
            "query($t: ID!, $since: ID, $cursor: String, $limit: Int) {"
            " changes(tenantID: $t, since: $since, cursor: $cursor, limit: $limit) {"
            f" items {{ {ITEM_SELECTION} }} cursor changeToken }} }}",
            {"t": tenant, "since": since, "cursor": cursor, "limit": limit},
        )
        return data["changes"]

    def sync(self, tenant: str, since: str | None = None, limit: int | None = None) -> SyncResult:
        """Follow cursors to the end, as a client would."""
        result = SyncResult(change_token=since)
        cursor: str | None = None
        while True:
            page = self.changes_page(tenant, since=since, cursor=cursor, limit=limit)
            result.items.extend(page["items"])
            result.pages += 1
            result.change_token = page["changeToken"]
            cursor = page["cursor"]
            if cursor is None:
                return result


def _tenant_of(variables: dict[str, Any]) -> str | None:
    """The tenant a call names: `t`/`tenantID` or `input.tenantID`."""
    for key in ("t", "tenantID"):
        if isinstance(variables.get(key), str):
            return str(variables[key])
    for value in variables.values():
        if isinstance(value, dict) and isinstance(value.get("tenantID"), str):
            return str(value["tenantID"])
    return None


def post_data(base: str, query: str, variables: dict[str, Any], headers: dict[str, str]) -> Any:
    """`data` of one POST to a running server (`api_server`); fails on any error."""
    body = httpx2.post(
        f"{base}/graphql",
        json={"query": query, "variables": variables},
        headers=headers,
        timeout=60,
    ).json()
    assert "errors" not in body, body
    return body["data"]
