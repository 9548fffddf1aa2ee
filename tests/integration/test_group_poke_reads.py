"""A change of a group's record on a server's own subscriptions (contract 3.4.1,
3.12 "Groups"): the group's member is poked by the roster each event's membership
check reads anyway, and a subscriber outside the group reads no access item nor its
view for it. Through the API's WebSocket on DynamoDB Local, the store's Queries
counted."""

from __future__ import annotations

from collections import Counter
from contextlib import ExitStack
from typing import Any

from starlette.testclient import TestClient

from api.domain.membership import OWNER
from api.domain.mutations import Mutation
from api.service import SyncService
from api.storage import keys
from tests.integration.test_group_paths import KIDS as ZEDS_KIDS
from tests.integration.test_group_paths import OLGA, ZED, kids
from tests.integration.test_realtime import _connect, _init, _receive, _subscribe
from tests.integration.test_visibility_leaks import _as, _token_of, _write, service
from tests.support import family

__all__ = ["kids", "service"]  # the fixtures

OUTSIDERS = ["dave", "out1", "out2", "out3"]  # members in no group (dave: the fixture's)


def test_a_groups_change_pokes_its_member_by_the_roster_and_reads_nothing_per_outsider(
    app_client: TestClient, service: SyncService, kids: str, inject: Any
) -> None:
    for sub in OUTSIDERS[1:]:
        fields: dict[str, Any] = {"role": "WRITER", "groups": []}
        member = Mutation("create", family.MEMBER, kids, sub, None, fields)
        service.apply(member, OLGA, OWNER, moved=True)
    first = _write(service, kids, ZED, {"givenName": "everyone"})
    with ExitStack() as stack:
        sockets = {}
        for sub in [OLGA, *OUTSIDERS]:
            ws = sockets[sub] = stack.enter_context(_connect(app_client))
            _init(ws, _as(sub, kids)["Authorization"])
            assert _receive(ws) == {"type": "connection_ack"}
            _subscribe(ws, sub, kids)
            # Its first event (its first read done): the newest change in its view.
            assert _token_of(_receive(ws)) >= first.change_token
        # A tenant-wide change reaches every subscription first: the stream follower
        # has started and made its catch-up (a poke UNTOLD to all, which each checks).
        warm = _write(service, kids, ZED, {"givenName": "warm"})
        for ws in sockets.values():
            assert _token_of(_receive(ws)) == warm.change_token
        reads: Counter[str] = Counter()

        def count(params: dict[str, Any], **_: Any) -> None:
            pk = params["ExpressionAttributeValues"][":pk"]["S"]
            # A member's access read is a Query of Limit 1 of the members' partition.
            access = pk == keys.members_pk(kids) and params.get("Limit") == 1
            reads["access" if access else pk.removeprefix(f"T#{kids}")] += 1

        inject("provide-client-params.dynamodb.Query", count)
        inside = _write(service, kids, ZED, {"givenName": "kids"}, ZEDS_KIDS)
        assert _token_of(_receive(sockets[OLGA])) == inside.change_token
        wide = _write(service, kids, ZED, {"givenName": "Later"})
        for sub, ws in sockets.items():
            # Each outsider's first event is the tenant-wide change's: its feed took
            # the group's token (and dropped it) before.
            assert _token_of(_receive(ws)) == wide.change_token, sub
    print(f"Queries of two changes' pokes, {len(OUTSIDERS)} outsiders: {dict(reads)}")
    assert reads["access"] == 0, dict(reads)
    assert not any(p.startswith("#V#") for p in reads), dict(reads)
