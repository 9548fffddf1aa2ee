"""Groups' rules in the domain (contract 3.12 and 6, "Groups"): who a visibility
naming groups includes, its bound, the bounds of a tenant's groups and of a group's
members, and what a Member write's access item keeps of the groups it joined and
left."""

from __future__ import annotations

import pytest

from api.domain.errors import BadUserInput
from api.domain.membership import (
    MAX_GROUP_CHANGES,
    MAX_GROUP_MEMBERS,
    MAX_TENANT_GROUPS,
    Access,
    History,
    Roster,
    Viewer,
    group_changes,
    groups_refusal,
)
from api.domain.retention import Retention
from api.domain.tokens import next_token
from api.domain.visibility import MAX_SHARED, Visibility, entries_of, principals_of, sees


def test_a_visibility_naming_a_group_includes_its_members_only() -> None:
    kids = Visibility.of("olga", [], ["kids"])
    assert kids.principals() == ("m:olga", "g:kids")
    assert sees(kids, Viewer("bob", ["kids"])) and sees(kids, "olga")
    assert not sees(kids, Viewer("carol", ["adults"])) and not sees(kids, "bob")
    assert principals_of(Viewer("bob", ["kids", "chess"])) == ("m:bob", "g:chess", "g:kids")


def test_members_and_groups_are_twenty_together() -> None:
    Visibility.of("o", [f"m{i}" for i in range(10)], [f"g{i}" for i in range(10)])
    with pytest.raises(BadUserInput, match="20 members and groups"):
        Visibility.of("o", [f"m{i}" for i in range(10)], [f"g{i}" for i in range(MAX_SHARED - 9)])
    with pytest.raises(BadUserInput, match="group names"):
        Visibility.of("o", [], ["not a name"])


def test_a_write_puts_one_entry_for_a_group_whatever_its_size() -> None:
    entries = entries_of(Visibility.of("o", ["bob"]), True, Visibility.of("o", [], ["kids"]))
    assert entries.streams == {"m:o": "record", "g:kids": "record", "m:bob": "left"}
    assert entries.supersedes is False  # the previous audience names no group
    moved = entries_of(Visibility.of("o", [], ["kids"]), True, None)
    assert moved.streams_removed == ("m:o", "g:kids") and moved.supersedes


def test_a_tenants_groups_and_a_groups_members_are_bounded() -> None:
    full = Roster(True, {}, {f"m{i}": (f"g{i}",) for i in range(MAX_TENANT_GROUPS)})
    assert groups_refusal(full, "m0", ("g0",), ("g0", "g1")) is None  # no new name
    refused = groups_refusal(full, "new", (), ("another",))
    assert isinstance(refused, BadUserInput) and "at most 100 groups" in str(refused)
    crowded = Roster(True, {}, {f"m{i}": ("kids",) for i in range(MAX_GROUP_MEMBERS)})
    refused = groups_refusal(crowded, "new", (), ("kids",))
    assert isinstance(refused, BadUserInput) and "500 members" in str(refused)
    assert groups_refusal(crowded, "m0", ("kids",), ("kids",)) is None  # already in
    assert groups_refusal(Roster(), "bob", ("kids",), ()) is None  # leaving is never refused


def test_the_access_item_keeps_each_group_joined_or_left_within_the_retention() -> None:
    retention = Retention()
    day_ms = 86_400_000
    start = 1_700_000_000_000
    old = next_token(start, None)
    recent = next_token(start + retention.seconds * 1000, None)
    now = next_token(start + retention.seconds * 1000 + day_ms, None)
    prior = (("chess", old), ("kids", recent))
    changes = group_changes(prior, {"groups": ["kids"]}, {"groups": ["adults"]}, now, retention)
    # Every join and leave within the retention is kept (chess's is past it).
    assert dict(changes) == {"kids": f"{recent} {now}", "adults": now}
    viewer = Access(True, "reader", ("adults",), dict(changes)).viewer("bob")
    assert viewer.groups == ("adults",) and viewer.changed == dict(changes)
    assert Access(False, None, ("adults",)).viewer("bob").groups == ()  # a claim tenant


def test_a_group_history_says_where_its_member_was_at_a_token() -> None:
    """bob joined kids at t[1], left at t[3], rejoined at t[5]: in it now."""
    t = [next_token(1_700_000_000_000 + i, None) for i in range(7)]
    history = History.parse(f"{t[1]} {t[3]} {t[5]}")
    assert [history.was_in(True, x) for x in t] == [False, True, True, False, False, True, True]
    # Out at t[0] and at every point up to t[0]: nothing of kids seen; after the
    # join at t[1], the device may have had kids' records.
    assert not history.seen(True, t[0], t[0]) and history.seen(True, t[0], t[2])
    assert history.seen(True, t[2], t[4])  # in at t[2], out at t[4]: seen
    # Kept within MAX_GROUP_CHANGES; a history cut does not know what came before.
    long = History(())
    for i in range(MAX_GROUP_CHANGES + 2):
        long = long.then(next_token(1_700_000_000_000 + 10 * i, None))
    assert len(long.tokens) == MAX_GROUP_CHANGES and long.cut
    assert History.parse(str(long)) == long and str(long).startswith("* ")
    assert long.was_in(True, t[0]) is None and long.seen(False, t[0], t[0])
