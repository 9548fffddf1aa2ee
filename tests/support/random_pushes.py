"""Random pushes applied twice, grouped and one by one, and what they must agree on.

`compare_grouped_with_one_by_one` drives two fresh tenants with the same random
pushes: tenant A gets each push as one `pushChanges` (the service commits it in
as few transactions as it can), tenant B gets the same mutations one per
request, in order. Every result and the final state must be the same, up to the
tokens and times the server chose: a version is named by its place in its
entity's history (the 1st, 2nd, ... version written), which the two tenants
must also agree on.

The mutations are what an outbox holds after a week offline: creates (with and
without ids, some of taken ids), updates and deletes from the current token and
from stale ones, several of one entity in one push, state-based puts, and resends
of earlier entries with their clientMutationID (replays), some of them changed
(a clientMutationID reused for another mutation).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

from tests.support.gql import ITEM_SELECTION, GraphQLClient

PUSH = (
    "mutation($i: PushChangesInput!) { pushChanges(input: $i) { results { "
    "clientMutationID status replayed error { code } "
    f"item {{ {ITEM_SELECTION} }} }} }} }}"
)
IDS = [f"p{i}" for i in range(8)]  # few ids: pushes often touch one entity twice
NAMES = ["Ann", "Bo", "Cy", "Di"]
UNKNOWN_TOKEN = "01ARZ3NDEKTSV4RRFFQ69G5FAV"  # a well-formed token no write made


@dataclass
class _Tenant:
    name: str
    versions: dict[str, list[str]] = field(default_factory=dict)  # id -> tokens, ascending
    new_ids: list[str] = field(default_factory=list)  # server-made ids, in order of creation
    # What a device syncing incrementally holds (a first sync returns no deletions).
    since: str | None = None
    states: dict[str, Any] = field(default_factory=dict)

    def learn(self, item: dict[str, Any] | None) -> None:
        if item is None:
            return
        tokens = self.versions.setdefault(item["id"], [])
        if item["changeToken"] not in tokens:
            tokens.append(item["changeToken"])
            tokens.sort()

    def token(self, entity_id: str, age: int) -> str:
        """The entity's token `age` versions back (0: current); a made-up one if none."""
        tokens = self.versions.get(entity_id)
        if not tokens:
            return UNKNOWN_TOKEN
        return tokens[max(len(tokens) - 1 - age, 0)]

    def normalized_id(self, entity_id: str) -> str:
        """A server-made id as the n-th one this tenant got."""
        if entity_id in IDS:
            return entity_id
        if entity_id not in self.new_ids:
            self.new_ids.append(entity_id)
        return f"new{self.new_ids.index(entity_id)}"

    def normalized(self, item: dict[str, Any] | None) -> Any:
        """An item without what the server chose: its id if server-made, its token."""
        if item is None:
            return None
        entity_id = self.normalized_id(item["id"])
        version = self.versions.get(item["id"], []).index(item["changeToken"])
        fields = {
            k: v
            for k, v in item.items()
            if k not in ("id", "tenantID", "changeToken", "createdAt", "updatedAt")
        }
        return entity_id, version, sorted(fields.items())


@dataclass(frozen=True)
class _Op:
    """A mutation without tokens: which version it is based on is an age."""

    verb: str
    entity_id: str | None
    age: int = 0  # 0: the current token; 1, 2: stale ones
    name: str = "Ann"
    cmid: str | None = None
    assumed_current: bool = True  # puts: assume the state the device saw last

    def entry(self, tenant: _Tenant, states: dict[str, Any]) -> dict[str, Any]:
        base: dict[str, Any] = {"tenantID": tenant.name}
        if self.cmid is not None:
            base["clientMutationID"] = self.cmid
        if self.verb == "create":
            body = {**base, "person": {"givenName": self.name}}
            if self.entity_id is not None:
                body["id"] = self.entity_id
            return {"createPerson": body}
        assert self.entity_id is not None
        base["id"] = self.entity_id
        if self.verb == "put":
            seen = states.get(self.entity_id)
            assumed = seen if self.assumed_current else {"person": {"givenName": "nobody"}}
            state = {"person": {"givenName": self.name, "familyName": "Put"}}
            return {"putPerson": {**base, "assumed": assumed, "state": state}}
        base["changeToken"] = tenant.token(self.entity_id, self.age)
        if self.verb == "delete":
            return {"deletePerson": base}
        return {"updatePerson": {**base, "changes": {"familyName": self.name}}}


@dataclass(frozen=True)
class _Sent:
    """One push entry as each tenant got it (resends repeat it exactly)."""

    op: _Op
    grouped: dict[str, Any]
    one_by_one: dict[str, Any]


def _random_ops(rng: random.Random, round_: int) -> list[_Op]:
    ops: list[_Op] = []
    for n in range(rng.randint(1, 40)):
        cmid = f"r{round_}-{n}" if rng.random() < 0.6 else None
        entity_id = rng.choice(IDS)
        roll = rng.random()
        if roll < 0.3:
            ops.append(_Op("create", entity_id if rng.random() < 0.8 else None, cmid=cmid))
        elif roll < 0.75:
            age = rng.choice([0, 0, 0, 1, 2])
            ops.append(_Op("update", entity_id, age, rng.choice(NAMES), cmid))
        elif roll < 0.85:
            ops.append(_Op("delete", entity_id, rng.choice([0, 0, 1]), cmid=cmid))
        else:
            fresh = rng.random() < 0.7
            ops.append(_Op("put", entity_id, 0, rng.choice(NAMES), cmid, fresh))
    return ops


def _with_resends(rng: random.Random, fresh: list[_Sent], sent: list[_Sent]) -> list[_Sent]:
    """Resends of earlier entries mixed in: replays when they have a clientMutationID,
    and now and then that id reused for another mutation."""
    push = list(fresh)
    for _ in range(rng.randint(0, 4) if sent else 0):
        earlier = rng.choice(sent)
        if earlier.op.cmid is not None and rng.random() < 0.25:
            earlier = _Sent(earlier.op, _renamed(earlier.grouped), _renamed(earlier.one_by_one))
        push.insert(rng.randint(0, len(push)), earlier)
    return push[:100]


def _renamed(entry: dict[str, Any]) -> dict[str, Any]:
    """The same entry changed a little: another mutation under the same id."""
    ((verb, body),) = entry.items()
    return {verb: _changed(body)}


def _changed(body: dict[str, Any]) -> dict[str, Any]:
    for key in ("person", "changes"):
        if key in body:
            return {**body, key: {**body[key], "occupation": "changed"}}
    if "state" in body:
        return {**body, "mergeFields": True}
    return {**body, "changeToken": UNKNOWN_TOKEN}


def _states(client: GraphQLClient, tenant: _Tenant) -> dict[str, Any]:
    """What a device last saw of each entity, as a put's `assumed` state."""
    synced = client.sync(tenant.name, since=tenant.since)
    for item in synced.items:
        tenant.learn(item)
        if item["__typename"] == "DeletedItem":
            tenant.states[item["id"]] = {"deleted": True}
        else:
            person = {k: item[k] for k in ("givenName", "familyName") if item.get(k)}
            tenant.states[item["id"]] = {"person": person}
    tenant.since = synced.change_token
    return dict(tenant.states)


def _push(client: GraphQLClient, tenant: str, entries: list[dict[str, Any]]) -> list[Any]:
    body = client.execute(PUSH, {"i": {"tenantID": tenant, "mutations": entries}})
    assert "errors" not in body, body
    results: list[Any] = body["data"]["pushChanges"]["results"]
    return results


def _normalized_results(tenant: _Tenant, results: list[Any]) -> list[Any]:
    for result in results:
        tenant.learn(result["item"])
    return [
        (
            r["status"],
            r["error"] and r["error"]["code"],
            r["replayed"],
            tenant.normalized(r["item"]),
        )
        for r in results
    ]


def compare_grouped_with_one_by_one(
    client: GraphQLClient, grouped: str, one_by_one: str, seed: int, rounds: int
) -> dict[str, int]:
    """Apply `rounds` random pushes to both tenants and assert they agree; returns
    how many results of each status the pushes had (to show what was exercised)."""
    rng = random.Random(seed)
    a, b = _Tenant(grouped), _Tenant(one_by_one)
    sent: list[_Sent] = []
    statuses: dict[str, int] = {}
    for round_ in range(rounds):
        states_a, states_b = _states(client, a), _states(client, b)
        assert _final(a, states_a) == _final(b, states_b), f"before round {round_}"
        fresh = [
            _Sent(op, op.entry(a, states_a), op.entry(b, states_b))
            for op in _random_ops(rng, round_)
        ]
        push = _with_resends(rng, fresh, sent)
        sent += fresh
        results_a = _push(client, a.name, [s.grouped for s in push])
        results_b = [r for s in push for r in _push(client, b.name, [s.one_by_one])]
        normalized_a = _normalized_results(a, results_a)
        normalized_b = _normalized_results(b, results_b)
        for n, (entry, one, other) in enumerate(zip(push, normalized_a, normalized_b, strict=True)):
            assert one == other, f"round {round_}, entry {n} ({entry.op}): {one} != {other}"
        for result in results_a:
            statuses[result["status"]] = statuses.get(result["status"], 0) + 1
            statuses["replayed"] = statuses.get("replayed", 0) + bool(result["replayed"])
    assert _final(a, _states(client, a)) == _final(b, _states(client, b))
    return statuses


def _final(tenant: _Tenant, states: dict[str, Any]) -> dict[str, Any]:
    """The tenant's entities, each with its state and how many versions it has had."""
    named = {}
    for entity_id, state in states.items():
        named[tenant.normalized_id(entity_id)] = (state, len(tenant.versions[entity_id]))
    return named
