"""Who sees what (contract 3.12): a record's visibility, who sees it, who may change
it, and the entries a write puts and removes (docs/ordering.md, "Who sees what")."""

from __future__ import annotations

import pytest

from api.domain.errors import BadUserInput, NotFound, RoleForbidden
from api.domain.visibility import (
    MAX_SHARED,
    Entries,
    Visibility,
    create_refusal,
    delete_refusal,
    entries_of,
    sees,
    visibility_refusal,
)


def test_a_visibility_is_checked_and_normalized() -> None:
    vis = Visibility.of("alice", ["carol", "bob", "alice", "bob"])
    assert vis == Visibility("alice", ("bob", "carol"))
    assert vis.principals() == ("m:alice", "m:bob", "m:carol")
    Visibility.of("alice", [f"m{i}" for i in range(MAX_SHARED)])
    with pytest.raises(BadUserInput, match="at most 20"):
        Visibility.of("alice", [f"m{i}" for i in range(MAX_SHARED + 1)])
    with pytest.raises(BadUserInput):
        Visibility.of("", [])
    with pytest.raises(BadUserInput):
        Visibility.of("alice", [7])


def test_who_sees_a_record() -> None:
    private = Visibility("alice")
    shared = Visibility("alice", ("bob",))
    assert sees(None, "anyone") and sees(None, None)
    assert sees(private, "alice") and not sees(private, "bob") and not sees(private, None)
    assert sees(shared, "bob") and not sees(shared, "carol")


def test_who_may_change_delete_or_give_away_a_record() -> None:
    assert visibility_refusal("alice", "alice", "writer", True) is None
    assert visibility_refusal("alice", "olga", "owner", True) is None
    assert isinstance(visibility_refusal("alice", "bob", "writer", True), RoleForbidden)
    assert isinstance(visibility_refusal("alice", "olga", "owner", False), NotFound)
    # A record from before owners were kept: tenant OWNERs only.
    assert isinstance(visibility_refusal(None, "bob", "writer", True), RoleForbidden)
    assert visibility_refusal(None, "olga", "owner", True) is None
    shared = Visibility("alice", ("bob",))
    assert isinstance(delete_refusal(shared, "bob", "writer"), RoleForbidden)
    assert delete_refusal(shared, "alice", "writer") is None
    assert delete_refusal(None, "bob", "writer") is None  # tenant-wide: as before
    assert isinstance(create_refusal(Visibility("bob"), "alice", "writer"), RoleForbidden)
    assert create_refusal(Visibility("bob"), "olga", "owner") is None


def test_the_entries_of_each_change_of_visibility() -> None:
    alice, ab = Visibility("alice"), Visibility("alice", ("bob",))
    # Tenant-wide as before: the main log only.
    assert entries_of(None, False, None) == Entries("record", False)
    assert entries_of(None, True, None) == Entries("record", True)
    # Created private: the owner's stream only.
    assert entries_of(None, False, alice) == Entries(None, False, {"m:alice": "record"})
    # Restricted: the whole tenant gets a LeftView sentinel in the main log.
    assert entries_of(None, True, ab) == Entries(
        "left", True, {"m:alice": "record", "m:bob": "record"}
    )
    # Unshared: bob gets a sentinel, both old stream entries go.
    assert entries_of(ab, True, alice) == Entries(
        None, False, {"m:alice": "record", "m:bob": "left"}, ("m:alice", "m:bob")
    )
    # Shared: the new version in both streams, the old one removed.
    assert entries_of(alice, True, ab) == Entries(
        None, False, {"m:alice": "record", "m:bob": "record"}, ("m:alice",)
    )
    # Made tenant-wide: the main log again, the streams' entries removed.
    assert entries_of(ab, True, None) == Entries("record", False, {}, ("m:alice", "m:bob"))
    # The most one write takes: 21 removed, 42 put.
    old = Visibility.of("o1", [f"a{i}" for i in range(20)])
    new = Visibility.of("o2", [f"b{i}" for i in range(20)])
    assert entries_of(old, True, new).stream_items == 63
