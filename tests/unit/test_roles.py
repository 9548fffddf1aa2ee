"""Reading roles from the tenants claim (contract 6)."""

from __future__ import annotations

import pytest

from api.auth import OWNER, READER, WRITER, Principal, _memberships
from api.domain.errors import Forbidden


def test_entries_name_a_tenant_and_optionally_a_role() -> None:
    entries = frozenset({"a", "b:reader", "c:writer", "d:owner", "e:x", "f:reader", "f:writer"})
    assert _memberships(entries) == {
        "a": OWNER,
        "b": READER,
        "c": WRITER,
        "d": OWNER,
        "e:x": OWNER,  # not a role: a tenant id holding ':'
        "f": WRITER,  # named twice: the higher role
    }


def test_a_role_allows_what_the_roles_below_it_allow() -> None:
    p = Principal("s", frozenset({"a", "b", "c"}), roles={"b": WRITER, "c": READER})
    p.require_role("a", OWNER)
    p.require_role("b", WRITER)
    p.require_role("b", READER)
    with pytest.raises(Forbidden):
        p.require_role("b", OWNER)
    with pytest.raises(Forbidden):
        p.require_role("c", WRITER)
    with pytest.raises(Forbidden):
        p.require_role("z", READER)
