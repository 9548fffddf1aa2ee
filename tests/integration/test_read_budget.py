"""A request's reads are bounded whatever its arguments: a page of chosen types reads
the log in full pages (not one Query per entry) and, all the request's fields
together, at most MAX_SCANNED entries beyond their first pages; then it stops with
a cursor that continues where it stopped. Counted in the DynamoDB calls made."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from api.domain.records import Record
from api.domain.tokens import next_token, token_time
from api.service.reading import MAX_SCANNED
from api.settings import Settings
from api.storage.store import DynamoStore
from tests.support import family
from tests.support.gql import GraphQLClient

Inject = Callable[[str, Callable[..., Any]], None]
PEOPLE = MAX_SCANNED + 500
TYPED = (
    "query($t: ID!, $c: String) { changes(tenantID: $t, cursor: $c, limit: 1, "
    "types: [REMINDER]) { items { id } cursor changeToken } }"
)


def _people_then_a_reminder(tenant: str, gql: GraphQLClient) -> None:
    records: list[Record] = []
    token = None
    for i in range(PEOPLE):
        token = next_token(int(time.time() * 1000) - 60_000, token)
        at = token_time(token)
        fields = family.PERSON.normalize_changes({"givenName": f"p{i}"})
        records.append(Record(family.PERSON, tenant, f"p{i:05d}", token, at, at, fields=fields))
    for start in range(0, PEOPLE, 2500):
        DynamoStore().bulk_load(tenant, records[start : start + 2500])
    gql.create(tenant, "Reminder", {"title": "the one"}, id="r1")


def _queries(inject: Inject) -> list[int]:
    calls: list[int] = []
    inject("before-call.dynamodb.Query", lambda **_: calls.append(1))
    return calls


@pytest.mark.slow
def test_a_page_of_chosen_types_reads_in_full_pages_within_a_budget(
    gql: GraphQLClient, tenant: str, inject: Inject, settings: Settings
) -> None:
    _people_then_a_reminder(tenant, gql)
    calls = _queries(inject)
    first = gql.data(TYPED, {"t": tenant})["changes"]
    # 2,500 people before the reminder: the budget stops the page, with a cursor.
    assert first["items"] == [] and first["cursor"] is not None
    assert len(calls) <= 6, len(calls)  # it was one Query per entry read: 2,001
    calls.clear()
    second = gql.data(TYPED, {"t": tenant, "c": first["cursor"]})["changes"]
    assert [i["id"] for i in second["items"]] == ["r1"] and second["cursor"] is None
    assert len(calls) <= 3, len(calls)


@pytest.mark.slow
def test_aliases_share_one_scan_budget(
    gql: GraphQLClient, tenant: str, inject: Inject, settings: Settings
) -> None:
    _people_then_a_reminder(tenant, gql)
    calls = _queries(inject)
    fields = " ".join(
        f"a{i}: changes(tenantID: $t, limit: 1, types: [REMINDER]) {{ items {{ id }} cursor }}"
        for i in range(10)
    )
    body = gql.execute(f"query($t: ID!) {{ {fields} }}", {"t": tenant})
    assert "errors" not in body, body
    # One alias may fill its page from the shared allowance; the others read their
    # first page only: about 2 + 10 * 2 Queries, not 10 * 2,001.
    assert len(calls) <= 30, len(calls)
