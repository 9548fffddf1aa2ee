"""Reads a tenant's stored items directly with boto3, and checks the store's invariants."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from api.storage import keys


def _query_all(ddb: Any, table: str, pk: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    kwargs: dict[str, Any] = {
        "TableName": table,
        "KeyConditionExpression": "pk = :pk",
        "ExpressionAttributeValues": {":pk": {"S": pk}},
        "ConsistentRead": True,
    }
    while True:
        page = ddb.query(**kwargs)
        items.extend(page["Items"])
        if "LastEvaluatedKey" not in page:
            return items
        kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]


@dataclass
class TenantState:
    head: str | None
    head_prev: str | None
    head_entries: int  # log entries the head's transaction wrote
    entities: dict[str, dict[str, Any]]  # id -> raw item
    log: dict[str, dict[str, Any]]  # token -> raw item
    outcomes: dict[str, dict[str, Any]]  # clientMutationID -> raw item
    copies: dict[str, dict[str, Any]]  # sort key -> raw item (T#<tenant>#LATER)

    def tokens(self) -> dict[str, str]:
        """id -> current token of every entity, live or deleted."""
        return {i: item["tok"]["S"] for i, item in self.entities.items()}

    def live_tokens(self) -> dict[str, str]:
        """id -> current token of every live entity: what a first sync returns."""
        return {i: item["tok"]["S"] for i, item in self.entities.items() if "del" not in item}


def tenant_state(ddb: Any, table: str, tenant: str) -> TenantState:
    entities: dict[str, dict[str, Any]] = {}
    outcomes: dict[str, dict[str, Any]] = {}
    for item in _query_all(ddb, table, keys.tenant_pk(tenant)):
        sk = item["sk"]["S"]
        if keys.is_outcome_sk(sk):
            outcomes[sk[len(keys.outcome_sk("")) :]] = item
        else:
            assert keys.is_entity_sk(sk), sk
            entities[item["id"]["S"]] = item
    log = {item["sk"]["S"]: item for item in _query_all(ddb, table, keys.log_pk(tenant))}
    head_item = log.pop(keys.HEAD_SK, None)
    head = None if head_item is None else head_item["tok"]["S"]
    head_prev = None if head_item is None else head_item.get("pv", {}).get("S")
    head_entries = 1 if head_item is None else int(head_item.get("n", {"N": "1"})["N"])
    return TenantState(
        head=head,
        head_prev=head_prev,
        head_entries=head_entries,
        entities=entities,
        log=log,
        outcomes=outcomes,
        copies={item["sk"]["S"]: item for item in _query_all(ddb, table, keys.later_pk(tenant))},
    )


def assert_consistent(state: TenantState) -> None:
    """Exactly one log entry per entity, at its token, equal to it; head = greatest
    token; every link of the chain points below itself; the head's transaction's
    entries link down to the head's `prev`; one copy per live entity, at the key its
    `lr` names, equal to it, and none of a deleted one."""
    assert sorted(state.log) == sorted(state.tokens().values()), "log and entities disagree"
    for item in state.entities.values():
        entry = state.log[item["tok"]["S"]]
        # A deletion's entry expires (exp); its entity item stays (ids are not reused).
        assert ("exp" in entry) == ("del" in entry), f"entry {item['tok']} expiry"
        assert {k: v for k, v in entry.items() if k not in ("pk", "sk", "pv", "exp")} == {
            k: v for k, v in item.items() if k not in ("pk", "sk")
        }
    assert state.head == (max(state.log) if state.log else None)
    for token, entry in state.log.items():
        prev = entry.get("pv", {}).get("S")
        assert prev is None or prev < token, f"entry {token} links to {prev}"
    if state.head is not None:
        link: str | None = state.head
        for _ in range(state.head_entries):
            assert link is not None and link in state.log, "the head's transaction is cut"
            link = state.log[link].get("pv", {}).get("S")
        assert link == state.head_prev
    expected = {
        keys.later_sk(item["ty"]["S"], int(item["lr"]["N"]), i)
        for i, item in state.entities.items()
        if "del" not in item
    }
    assert set(state.copies) == expected, "copies and live entities disagree"
    for sk, copy in state.copies.items():
        entity = state.entities[copy["id"]["S"]]
        assert {k: v for k, v in copy.items() if k not in ("pk", "sk")} == {
            k: v for k, v in entity.items() if k not in ("pk", "sk")
        }, f"copy {sk} is not its entity"
