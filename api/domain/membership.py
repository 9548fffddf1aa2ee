"""Membership as data (contract 6, "Membership as data"): the roles, what a tenant's
access items say of one caller, and who may write a Member record.

A tenant none of whose Member records was ever written is a claim tenant: the
token's `tenants` claim and its roles decide. Its first Member write moves it to
membership as data, for good (until the tenant is deleted): from then on the
caller's live Member record decides, and the claim neither grants nor limits.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from api.domain.errors import BadUserInput, NotAMember, RoleForbidden, SyncError
from api.domain.identifiers import is_identifier
from api.domain.retention import Retention
from api.domain.tokens import token_ms

# A member's role in a tenant: each may do what the one after it may.
OWNER, WRITER, READER = "owner", "writer", "reader"
ROLES = (OWNER, WRITER, READER)
# The Member type's `role` field: its enum value is the role in capitals.
ROLE_FIELD = "role"
# The Member type's `groups` field (contract 6, "Groups"): the groups a member is in.
GROUPS_FIELD = "groups"
# Bounds of groups: a member's, a tenant's (names its live members list), a group's
# members.
MAX_MEMBER_GROUPS = 10
MAX_TENANT_GROUPS = 100
MAX_GROUP_MEMBERS = 500


class Viewer(str):
    """A caller's `sub` as the request's access read found it: with the groups it is
    in (contract 3.12, "Groups"). It is the sub wherever a sub is asked for; who-sees-
    what's checks (`api.domain.visibility.sees`) read its groups too."""

    groups: tuple[str, ...]
    # The groups it joined or left within the retention, and the token of each's
    # latest change (a sync from before it re-reads the group's stream).
    changed: Mapping[str, str]

    def __new__(
        cls, sub: str, groups: Iterable[str] = (), changed: Mapping[str, str] | None = None
    ) -> Viewer:
        viewer = super().__new__(cls, sub)
        viewer.groups = tuple(sorted(set(groups)))
        viewer.changed = dict(changed or {})
        return viewer


def groups_of(sub: str | None) -> tuple[str, ...]:
    """The groups of a caller: a `Viewer`'s, none for a plain sub."""
    return sub.groups if isinstance(sub, Viewer) else ()


def member_groups(fields: Mapping[str, Any]) -> tuple[str, ...]:
    """The groups a live Member record's fields list (sorted, distinct)."""
    value = fields.get(GROUPS_FIELD)
    if not isinstance(value, list):
        return ()
    return tuple(sorted({g for g in value if isinstance(g, str)}))


def at_least(role: str, needed: str) -> bool:
    return ROLES.index(role) <= ROLES.index(needed)


def require(role: str, needed: str) -> None:
    """FORBIDDEN (reason ROLE) unless `role` is `needed` or above."""
    if not at_least(role, needed):
        raise RoleForbidden(f"your role in this tenant is {role}; this needs {needed}")


def member_role(fields: Mapping[str, Any]) -> str | None:
    """The role a live Member record's fields give (None: none, never stored)."""
    value = fields.get(ROLE_FIELD)
    return value.lower() if isinstance(value, str) and value.lower() in ROLES else None


@dataclass(frozen=True)
class Access:
    """What a tenant's access items say of one caller (one Query, `Store.access`):
    whether the tenant moved to membership as data, and the caller's live Member
    role there (None: it has no live Member record)."""

    moved: bool = False
    role: str | None = None
    groups: tuple[str, ...] = ()
    changed: Mapping[str, str] = field(default_factory=dict)

    def viewer(self, sub: str) -> Viewer:
        """The caller `sub` with the groups this access gives it (none unless moved)."""
        if not self.moved or self.role is None:
            return Viewer(sub)
        return Viewer(sub, self.groups, self.changed)

    def role_of(self, claimed: Callable[[], str]) -> str:
        """The caller's role: its Member record's in a moved tenant (NotAMember without
        one); else what the token's claim gives (`claimed`, NotAMember when the claim
        does not list the tenant)."""
        if not self.moved:
            return claimed()
        if self.role is None:
            raise NotAMember("you are not a member of this tenant")
        return self.role


@dataclass(frozen=True)
class Roster:
    """Every live member of a tenant and their roles (one Query of its access
    partition), for realtime's check of many subscribers at once."""

    moved: bool = False
    roles: Mapping[str, str] | None = None
    groups: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    changed: Mapping[str, Mapping[str, str]] = field(default_factory=dict)

    def access(self, sub: str) -> Access:
        return Access(
            self.moved,
            (self.roles or {}).get(sub),
            self.groups.get(sub, ()),
            self.changed.get(sub, {}),
        )

    def members_of(self, group: str) -> set[str]:
        return {sub for sub, groups in self.groups.items() if group in groups}


@dataclass(frozen=True)
class Caller:
    """Who writes, and the role the request found it holds (`Access.role_of`)."""

    sub: str
    role: str


@dataclass(frozen=True)
class MemberGuard:
    """What a transaction holding Member writes also checks: the tenant's marker put
    (`moving`: its first Member write; the marker must be absent), or the writer's
    own access item still giving it the owner role. Two owners removing each other
    at once: the second transaction's check fails, so the tenant keeps an owner."""

    writer: str
    moving: bool


def member_write_refusal(
    caller: Caller | None,
    moved: bool,
    member_id: str,
    role: str | None,
    exists: bool,
) -> SyncError | None:
    """Why `caller` may not write the Member record `member_id` so that it gives
    `role` (None: deleted); None when it may. `moved`: the tenant is one of
    membership as data; `exists`: a record of that id was written before."""
    if caller is None or caller.role != OWNER:
        held = "none" if caller is None else caller.role
        return RoleForbidden(f"only an owner may write Member records; your role is {held}")
    if not moved:
        if member_id != caller.sub or role != OWNER or exists:
            return RoleForbidden(
                "the tenant's first Member record must be your own, with role OWNER"
            )
        return None
    if member_id == caller.sub and role != OWNER:
        return RoleForbidden("an owner may not delete or demote its own Member record")
    return None


def groups_refusal(
    roster: Roster, sub: str, before: tuple[str, ...], after: tuple[str, ...]
) -> SyncError | None:
    """Why the Member record `sub` may not move from the groups `before` to `after`
    in a tenant whose members are `roster` (BAD_USER_INPUT naming Member.groups);
    None when it may: names of an id's characters, at most MAX_TENANT_GROUPS in the
    tenant and MAX_GROUP_MEMBERS in a group it joins."""
    added = set(after) - set(before)
    if not added:
        return None
    if not all(is_identifier(g) for g in added):
        return BadUserInput("Member.groups: a group's name has an id's characters (1-64)")
    others = [groups for member, groups in roster.groups.items() if member != sub]
    names = set(after).union(*others)
    if len(names) > MAX_TENANT_GROUPS:
        return BadUserInput(
            f"Member.groups: a tenant has at most {MAX_TENANT_GROUPS} groups; "
            f"this write would make {len(names)}"
        )
    for group in sorted(added):
        if 1 + sum(group in groups for groups in others) > MAX_GROUP_MEMBERS:
            return BadUserInput(
                f"Member.groups: group {group} already has {MAX_GROUP_MEMBERS} members"
            )
    return None


def group_changes(
    prior: Iterable[tuple[str, str]],
    before: Mapping[str, Any] | None,
    after: Mapping[str, Any] | None,
    token: str,
    retention: Retention,
) -> tuple[tuple[str, str], ...]:
    """A Member write's access item's groups joined or left (group, token): those of
    `prior` within the `retention` at `token`, and each group its fields list
    `before` or `after` (None: none) but not both, at the write's `token`."""
    now = token_ms(token)
    changes = {group: at for group, at in prior if not retention.past(token_ms(at), now)}
    held, holds = member_groups(before or {}), member_groups(after or {})
    changes.update(dict.fromkeys(set(held) ^ set(holds), token))
    return tuple(sorted(changes.items()))
