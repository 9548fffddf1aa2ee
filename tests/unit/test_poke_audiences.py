"""Who a poke is for (docs/realtime.md, "Who is poked"): a change in the streams of
some members pokes their subscriptions alone, through the hub, the relay's posts and
the stream's records, merged (never dropped) when changes are told as one."""

from __future__ import annotations

import asyncio
import json
import threading
from typing import Any

from api.domain.audiences import UNTOLD, Audience, coalesced, merged
from api.domain.chain import NO_MAIN
from api.domain.cursor import CursorCodec
from api.domain.membership import OWNER
from api.domain.mutations import Mutation, Verb
from api.domain.visibility import Visibility, member_principal
from api.realtime.poke_posts import audiences_of, post_body
from api.realtime.relay import _Follower
from api.realtime.signals import LiveFeed, TenantSignals
from api.realtime.streams import head_pokes
from api.service import SyncService
from api.storage import keys
from tests.support import family
from tests.support.memory_store import MemoryStore

T1 = "01KAXW0000000000000000001A"
T2 = "01KAXW0000000000000000002A"
T3 = "01KAXW0000000000000000003A"
ALICE_SUB, BOB_SUB = "alice", "bob"
ALICE, BOB = member_principal(ALICE_SUB), member_principal(BOB_SUB)


def test_a_change_in_some_members_streams_pokes_their_subscriptions_alone() -> None:
    async def run() -> None:
        signals = TenantSignals(10)
        alice, bob, carol = (signals.register("t", user) for user in ("alice", "bob", "carol"))
        signals.publish("t", T1, frozenset({ALICE}))
        await asyncio.sleep(0)  # the offers run on the loop
        assert alice.ready.is_set() and await alice.take() == T1
        assert not bob.ready.is_set() and not carol.ready.is_set()
        signals.publish("t", T2, frozenset({ALICE, BOB}))
        await asyncio.sleep(0)
        assert await bob.take() == T2 and await alice.take() == T2
        assert not carol.ready.is_set()
        signals.publish("t", T3)  # a tenant-wide change: every member
        await asyncio.sleep(0)
        assert [await s.take() for s in (alice, bob, carol)] == [T3] * 3

    asyncio.run(run())


def test_changes_told_as_one_poke_are_for_whoever_any_was_for() -> None:
    assert merged(frozenset({ALICE}), frozenset({BOB})) == frozenset({ALICE, BOB})
    assert merged(frozenset({ALICE}), None) is None
    assert merged(None, frozenset({BOB})) is None


def test_changes_told_as_one_poke_hand_the_newer_token_only_to_its_audience() -> None:
    """The newer token is told to the newer change's audience; a member only the
    older change was for checks its own view (UNTOLD), never handed the newer token."""
    shared, private = (T1, frozenset({ALICE, BOB})), (T2, frozenset({ALICE}))
    assert coalesced(shared, private) == (T2, frozenset({ALICE}) | UNTOLD)
    assert coalesced(private, shared) == (T2, frozenset({ALICE}) | UNTOLD)
    assert coalesced((T1, frozenset({ALICE})), (T2, frozenset({ALICE, BOB}))) == (
        T2,
        frozenset({ALICE, BOB}),
    )
    assert coalesced((T1, None), (T2, frozenset({BOB}))) == (T2, frozenset({BOB}) | UNTOLD)
    assert coalesced((T1, frozenset({BOB})), (T2, None)) == (T2, None)


def test_a_relay_post_carries_each_tenants_audience_and_none_for_every_member() -> None:
    body = post_body({"t": (T2, frozenset({BOB, ALICE})), "u": (T1, None)}, catch_up=False)
    message = json.loads(body)
    assert message["pokes"] == {"t": T2, "u": T1}
    assert message["audiences"] == {"t": [ALICE, BOB]}  # "u": every member
    assert audiences_of(message) == {"t": frozenset({ALICE, BOB})}
    # A post of a server from before audiences names none: every member is poked.
    assert audiences_of({"catchUp": False, "pokes": {"t": T1}}) == {}


def _audiences_of_writes() -> tuple[SyncService, list[tuple[str, str, Audience]]]:
    told: list[tuple[str, str, Audience]] = []
    service = SyncService(
        MemoryStore(),
        CursorCodec("secret"),
        on_commit=lambda tenant, token, audience: told.append((tenant, token, audience)),
    )
    return service, told


def _person(
    verb: Verb, entity_id: str | None, token: str | None, visibility: Visibility | None
) -> Mutation:
    fields = {"givenName": "Ann"} if verb != "share" else {}
    return Mutation(
        verb,
        family.PERSON,
        "t",
        entity_id,
        token,
        fields,
        visibility=visibility,
        sets_visibility=verb in ("create", "share"),
    )


def test_a_commit_is_told_with_whose_view_it_changed() -> None:
    """A process's own commit pokes at once (`on_commit`), with its audience: every
    member for a tenant-wide record, its audience's streams for a restricted one, and
    those it leaves too (their LeftView)."""
    service, told = _audiences_of_writes()
    wide = service.apply(_person("create", None, None, None), ALICE_SUB, OWNER).record
    private = Visibility.of(ALICE_SUB, [])
    mine = service.apply(_person("create", None, None, private), ALICE_SUB, OWNER).record
    shared = Visibility.of(ALICE_SUB, [BOB_SUB])
    mine = service.apply(
        _person("share", mine.id, mine.change_token, shared), ALICE_SUB, OWNER
    ).record
    service.apply(_person("share", mine.id, mine.change_token, private), ALICE_SUB, OWNER)
    service.apply(
        _person("share", wide.id, wide.change_token, private), ALICE_SUB, OWNER
    )  # a tenant-wide record made private: every member's view changed
    assert [audience for _, _, audience in told] == [
        None,
        frozenset({ALICE}),
        frozenset({ALICE, BOB}),
        frozenset({ALICE, BOB}),  # Bob's LeftView
        None,
    ]
    assert [token for _, token, _ in told] == sorted(token for _, token, _ in told)


def test_a_followers_pending_poke_hands_no_member_a_token_outside_its_view() -> None:
    """The relay keeps one entry per tenant for a follower: a burst of Alice's private
    change then Bob's is one post of the newest token, for Bob, and UNTOLD for the
    others (Alice's subscription reads her view: Bob's token tells her nothing)."""
    never = threading.Event()  # no post goes out: its senders wait for the reader
    follower = _Follower("f", "http://127.0.0.1:9", b"k", 1.0, never, lambda: (1, 1))
    try:
        follower.offer("t", T1, frozenset({ALICE}))
        follower.offer("t", T2, frozenset({BOB}))
        follower.offer("u", T2, frozenset({BOB}))
        follower.offer("u", T1)  # every member's, older: the token stays, for Bob
        pokes, _ = follower._take()
        assert pokes == {"t": (T2, frozenset({BOB}) | UNTOLD), "u": (T2, frozenset({BOB}) | UNTOLD)}
    finally:
        follower.stop()


def _head_record(tenant: str, token: str, **attributes: Any) -> dict[str, Any]:
    """A stream record of a head as DynamoDB Streams gives it (NEW_IMAGE)."""
    item_keys = {"pk": {"S": keys.log_pk(tenant)}, "sk": {"S": keys.HEAD_SK}}
    image = {**item_keys, "tok": {"S": token}, "n": {"N": "1"}, **attributes}
    return {"eventName": "MODIFY", "dynamodb": {"Keys": item_keys, "NewImage": image}}


def test_a_heads_image_says_whose_view_its_transaction_changed() -> None:
    """From the head's attributes (`vis`, `mt`, `vp`): none in a tenant that never
    restricted a record (every member), a main entry (every member), else the
    streams it put entries in; a batch's records of one tenant merged."""
    only = {"vis": {"BOOL": True}, "mt": {"SS": [NO_MAIN]}}
    records = [
        _head_record("plain", T1),
        _head_record("wide", T1, vis={"BOOL": True}, mt={"SS": [T1]}),
        _head_record("one", T1, **only, vp={"SS": [f"{T1}#{ALICE}"]}),
        _head_record("two", T1, **only, vp={"SS": [f"{T1}#{ALICE}"]}),
        _head_record("two", T2, **only, vp={"SS": [f"{T2}#{BOB}", f"{T2}#{ALICE}"]}),
        _head_record("mixed", T1, **only, vp={"SS": [f"{T1}#{ALICE}"]}),
        _head_record("mixed", T2, vis={"BOOL": True}),  # every token in the main log
    ]
    assert head_pokes(records) == {
        "plain": (T1, None),
        "wide": (T1, None),
        "one": (T1, frozenset({ALICE})),
        "two": (T2, frozenset({ALICE, BOB})),
        "mixed": (T2, None),
    }


def test_a_catch_ups_untold_poke_reaches_a_subscription_only_if_its_view_changed() -> None:
    """A catch-up publishes the head's token UNTOLD to those outside the head's
    audience: each subscription reads its own view first (`first_bound`, the
    service's `latest_seen`) and is sent that change's token, or nothing."""
    views = {"alice": T1, "bob": None}  # what a sync from each one's token would reach
    reads: list[tuple[str, str | None]] = []

    async def seen(tenant: str, after: str | None, user: str) -> str | None:
        reads.append((user, after))
        return views[user] if after is None or (views[user] or "") > after else None

    async def run() -> None:
        signals = TenantSignals(10)
        feed = LiveFeed(signals, seen)
        alices, bobs = feed.changes("t", T1, "alice"), feed.changes("t", T1, "bob")
        pending = [asyncio.ensure_future(s.__anext__()) for s in (alices, bobs)]
        await asyncio.sleep(0.01)  # both registered, their first reads done
        views["alice"] = T2
        signals.publish("t", T3, merged(frozenset({member_principal("carol")}), UNTOLD))
        done, _ = await asyncio.wait(pending, timeout=1)
        assert [f.result() for f in done] == [T2]  # Alice's view changed: her change's token
        assert not pending[1].done()  # Bob's did not: nothing
        assert sorted(reads) == [("alice", T1), ("alice", T1), ("bob", T1), ("bob", T1)]
        pending[1].cancel()
        await asyncio.gather(pending[1], return_exceptions=True)

    asyncio.run(run())
