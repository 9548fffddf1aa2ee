"""Groups' rules in the domain (contract 3.12 and 6, "Groups"): who a visibility
naming groups includes, its bound, the bounds of a tenant's groups and of a group's
members, and what a Member write's access item keeps of the groups it joined and
left."""

from __future__ import annotations

import pytest

from api.domain.errors import BadUserInput
from api.domain.membership import (
    MAX_GROUP_MEMBERS,
    MAX_TENANT_GROUPS,
    Access,
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
    assert dict(changes) == {"kids": now, "adults": now}  # chess's is past the retention
    viewer = Access(True, "reader", ("adults",), dict(changes)).viewer("bob")
    assert viewer.groups == ("adults",) and viewer.changed == dict(changes)
    assert Access(False, None, ("adults",)).viewer("bob").groups == ()  # a claim tenant
