"""Membership as data (contract 6, "Membership as data"): the roles, what a tenant's
access items say of one caller, and who may write a Member record.

A tenant none of whose Member records was ever written is a claim tenant: the
token's `tenants` claim and its roles decide. Its first Member write moves it to
membership as data, for good (until the tenant is deleted): from then on the
caller's live Member record decides, and the claim neither grants nor limits.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from api.domain.errors import NotAMember, RoleForbidden, SyncError

# A member's role in a tenant: each may do what the one after it may.
OWNER, WRITER, READER = "owner", "writer", "reader"
ROLES = (OWNER, WRITER, READER)
# The Member type's `role` field: its enum value is the role in capitals.
ROLE_FIELD = "role"


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

    def access(self, sub: str) -> Access:
        return Access(self.moved, (self.roles or {}).get(sub))


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
