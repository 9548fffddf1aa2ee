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
# The joins and leaves of one group an access item keeps (within the retention):
# about 27 bytes each (`History`).
MAX_GROUP_CHANGES = 20
_CUT = "*"


class Viewer(str):
    """A caller's `sub` as the request's access read found it: with the groups it is
    in (contract 3.12, "Groups"). It is the sub wherever a sub is asked for; who-sees-
    what's checks (`api.domain.visibility.sees`) read its groups too."""

    groups: tuple[str, ...]
    # The groups it joined or left within the retention, and the tokens of those
    # changes (a `History`'s text; a sync from before the latest re-reads the group).
    changed: Mapping[str, str]
    # The token of its Member record's version the access item reflects (None: none,
    # a claim tenant's): a sync ends before a later one (`api.service.views.own_cut`).
    token: str | None

    def __new__(
        cls,
        sub: str,
        groups: Iterable[str] = (),
        changed: Mapping[str, str] | None = None,
        token: str | None = None,
    ) -> Viewer:
        viewer = super().__new__(cls, sub)
        viewer.groups = tuple(sorted(set(groups)))
        viewer.changed = dict(changed or {})
        viewer.token = token
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


def held_groups(fields: Mapping[str, Any]) -> tuple[str, ...]:
    """The groups a Member record's fields make its member one of: none when they give
    no role (REMOVED, deleted), so a write re-adding him checks each group it lists."""
    return member_groups(fields) if member_role(fields) is not None else ()


def regroups(current: Any, state: Any) -> bool:
    """Whether a Member write from the version `current` (None: none) to `state`
    changes the groups its member is in (a deletion leaves them all)."""
    before = member_groups(current.fields) if current is not None else ()
    after = () if state.deleted else member_groups(state.fields)
    return set(before) != set(after)


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
    token: str | None = None  # its Member record's version the item reflects

    def viewer(self, sub: str) -> Viewer:
        """The caller `sub` with the groups this access gives it (none unless moved)."""
        if not self.moved or self.role is None:
            return Viewer(sub)
        return Viewer(sub, self.groups, self.changed, self.token)

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
    """A Member write's access item's groups joined or left (group, `History`): each
    of `prior`'s tokens within the `retention` at `token`, and for each group its
    fields list `before` or `after` (None: none) but not both, the write's `token`."""
    now = token_ms(token)
    changes: dict[str, History] = {}
    for group, value in prior:
        history = History.parse(value)
        kept = tuple(t for t in history.tokens if not retention.past(token_ms(t), now))
        if kept:
            changes[group] = History(kept, history.cut)
    held, holds = member_groups(before or {}), member_groups(after or {})
    for group in set(held) ^ set(holds):
        changes[group] = changes.get(group, History(())).then(token)
    return tuple(sorted((group, str(history)) for group, history in changes.items()))


@dataclass(frozen=True)
class History:
    """A member's joins and leaves of one group within the retention, ascending (the
    access item's `gt` value: the tokens, space-separated). At most
    MAX_GROUP_CHANGES are kept; `cut`: older ones were dropped (written "*" first),
    so the member's place in the group before the oldest kept one is not known."""

    tokens: tuple[str, ...]
    cut: bool = False

    @classmethod
    def parse(cls, value: str) -> History:
        words = value.split()
        return cls(tuple(sorted(w for w in words if w != _CUT)), _CUT in words)

    def __str__(self) -> str:
        return " ".join(((_CUT,) if self.cut else ()) + self.tokens)

    def then(self, token: str) -> History:
        tokens = (*self.tokens, token)
        if len(tokens) <= MAX_GROUP_CHANGES:
            return History(tokens, self.cut)
        return History(tokens[-MAX_GROUP_CHANGES:], True)

    def was_in(self, now: bool, at: str) -> bool | None:
        """Whether the member was in the group at token `at`, being in it `now` (None:
        not known, `at` is before the history kept)."""
        if self.cut and (not self.tokens or at < self.tokens[0]):
            return None
        return now != (sum(t > at for t in self.tokens) % 2 == 1)

    def seen(self, now: bool, since: str, token: str) -> bool:
        """Whether a device synced up to `since` may have had the group's records
        until `token`: the member was in the group at `since` (or that is not known),
        or joined it after `since` and by `token`."""
        return self.was_in(now, since) is not False or any(since < t <= token for t in self.tokens)


def history_of(sub: str | None, group: str) -> History:
    """A caller's (a `Viewer`'s) joins and leaves of `group` (none for a plain sub)."""
    return History.parse(getattr(sub, "changed", {}).get(group, ""))
