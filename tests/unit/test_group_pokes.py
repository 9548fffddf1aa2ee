"""A change of a group's records on a server's own subscriptions (docs/realtime.md,
"Who is poked"): the roster read after it says who is in the group, so a member of
it is sent its token and one outside it reads nothing; two such changes waiting in
one subscription's slot are checked against its view (the older may be the one in
it), never resolved by the newer's group alone."""

from __future__ import annotations

import asyncio

from api.domain.audiences import of_principals
from api.domain.membership import Roster
from api.domain.visibility import group_principal, member_principal
from api.realtime.signals import LiveFeed, TenantSignals

T0 = "01KAXW0000000000000000000A"
T1 = "01KAXW0000000000000000001A"
T2 = "01KAXW0000000000000000002A"
ROSTER = Roster(
    moved=True,
    roles={"olga": "OWNER", "dave": "OWNER", "zed": "WRITER"},
    groups={"olga": ("kids",)},
)
KIDS = of_principals([member_principal("zed"), group_principal("kids")])
TEENS = of_principals([member_principal("zed"), group_principal("teens")])


def test_a_groups_change_reaches_its_member_by_the_roster_and_no_one_else_reads() -> None:
    views: list[str] = []  # whose view was read (`first_bound`)
    rosters: list[str] = []

    async def seen(tenant: str, after: str | None, user: str) -> str | None:
        views.append(user)
        return None

    async def roster(tenant: str, token: str) -> Roster:
        rosters.append(token)
        return ROSTER

    async def run() -> None:
        feed = LiveFeed(TenantSignals(10), seen, roster=roster)
        olgas, daves = feed.changes("t", T0, "olga"), feed.changes("t", T0, "dave")
        pending = [asyncio.ensure_future(s.__anext__()) for s in (olgas, daves)]
        await asyncio.sleep(0.01)  # both registered, their first reads done
        views.clear()
        feed._signals.publish("t", T1, KIDS)
        done, _ = await asyncio.wait(pending, timeout=1)
        assert [f.result() for f in done] == [T1]  # olga, in kids by the roster
        await asyncio.sleep(0.01)
        assert not pending[1].done() and views == []  # dave: nothing sent, nothing read
        assert rosters == [T1, T1]
        pending[1].cancel()
        await asyncio.gather(pending[1], return_exceptions=True)

    asyncio.run(run())


def test_two_group_changes_waiting_in_a_slot_are_checked_against_the_view() -> None:
    """A kids change, then a teens change, both waiting before olga's feed takes
    either: she is not in teens, but the kids change is in her view; her view is
    read (one read) and she is sent its token, not nothing and not the teens one."""
    views: list[str] = []
    newest: list[str] = []  # the newest change in olga's view (none at first)

    async def seen(tenant: str, after: str | None, user: str) -> str | None:
        views.append(user)
        return next((t for t in newest if after is None or t > after), None)

    async def roster(tenant: str, token: str) -> Roster:
        return ROSTER

    async def run() -> None:
        signals = TenantSignals(10)
        feed = LiveFeed(signals, seen, roster=roster)
        olgas = feed.changes("t", T0, "olga")
        first = asyncio.ensure_future(olgas.__anext__())
        await asyncio.sleep(0.01)  # registered, its first read (nothing) done
        views.clear()
        newest.append(T1)
        ((slot,),) = signals._slots.values()
        slot.offer(T1, KIDS)  # on the loop, one after the other: both wait in the slot
        slot.offer(T2, TEENS)
        assert await asyncio.wait_for(first, 1) == T1
        assert views == ["olga"]

    asyncio.run(run())
