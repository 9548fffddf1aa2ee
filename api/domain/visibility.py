"""Who sees what inside a tenant (contract 3.12): a record's visibility, the
principals of its audience, whether a caller sees it, who may change it, and which
entries a write of it puts and removes (the main log, the audience's streams).

A record is tenant-wide (visibility None: every member sees it; the default, and
every record written before visibilities), or restricted: its owner and the members
it is shared with see it, and the members of the groups it is shared with (those
whose Member record lists the group, as the caller's access read found them), no one
else (a tenant owner neither). Private: shared with no one. A principal is a string
naming who reads a stream: `m:<sub>` for a member, `g:<group>` for a group.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Literal

from api.domain.errors import BadUserInput, NotFound, RoleForbidden, SyncError
from api.domain.identifiers import is_identifier
from api.domain.membership import OWNER, groups_of

# A restricted record is shared with at most this many members and groups together
# besides its owner: its audience (owner and shared) has at most 21 streams.
MAX_SHARED = 20
_MEMBER = "m:"
_GROUP = "g:"
_MAX_SUB = 256


def member_principal(sub: str) -> str:
    """The principal of a member: the name of its stream."""
    return f"{_MEMBER}{sub}"


def group_principal(group: str) -> str:
    """The principal of a group: the name of its stream."""
    return f"{_GROUP}{group}"


def is_group(principal: str) -> bool:
    return principal.startswith(_GROUP)


def _checked_group(value: object) -> str:
    if not isinstance(value, str) or not is_identifier(value):
        raise BadUserInput("visibility.groups must be group names (an id's characters)")
    return value


def _checked_sub(value: object, name: str) -> str:
    if not isinstance(value, str) or not 0 < len(value) <= _MAX_SUB:
        raise BadUserInput(f"{name} must be a member's id (1-{_MAX_SUB} characters)")
    return value


@dataclass(frozen=True)
class Visibility:
    """A restricted record's audience: its owner, the members it is shared with
    (sorted, distinct, without the owner) and the groups it is shared with (sorted,
    distinct)."""

    owner: str
    shared_with: tuple[str, ...] = ()
    groups: tuple[str, ...] = ()

    @classmethod
    def of(
        cls, owner: object, shared_with: Iterable[object], groups: Iterable[object] = ()
    ) -> Visibility:
        """Checked: ids of members and names of groups, at most MAX_SHARED together
        besides the owner (BAD_USER_INPUT beyond). An owner None is "" here: the
        writer's, or the record's own (`api.service.deciding`)."""
        owner = "" if owner is None else _checked_sub(owner, "visibility.owner")
        shared = {_checked_sub(s, "visibility.sharedWith") for s in shared_with} - {owner}
        named = {_checked_group(g) for g in groups}
        if len(shared) + len(named) > MAX_SHARED:
            raise BadUserInput(
                f"a record is shared with at most {MAX_SHARED} members and groups, "
                f"got {len(shared) + len(named)}"
            )
        return cls(owner, tuple(sorted(shared)), tuple(sorted(named)))

    @property
    def members(self) -> tuple[str, ...]:
        """Every member who sees it: the owner first, then those it is shared with."""
        return (self.owner, *self.shared_with)

    def principals(self) -> tuple[str, ...]:
        """Its audience's streams, the owner's first, the groups' last."""
        return (
            *(member_principal(s) for s in self.members),
            *(group_principal(g) for g in self.groups),
        )

    def includes(self, sub: str, groups: Iterable[str] = ()) -> bool:
        """Whether the member `sub`, in `groups`, is of its audience."""
        if sub == self.owner or sub in self.shared_with:
            return True
        return bool(self.groups) and not set(self.groups).isdisjoint(groups)


def sees(visibility: Visibility | None, sub: str | None) -> bool:
    """Whether the caller `sub` sees a record of this visibility (None: tenant-wide,
    which every member of the tenant sees); a `Viewer` carries its groups."""
    return visibility is None or (sub is not None and visibility.includes(sub, groups_of(sub)))


def principals_of(sub: str) -> tuple[str, ...]:
    """The streams a caller reads besides the main log: a member's own, then its
    groups' (a `Viewer`'s)."""
    return (member_principal(sub), *(group_principal(g) for g in groups_of(sub)))


def visibility_refusal(
    owner: str | None, sub: str | None, role: str | None, current_sees: bool
) -> SyncError | None:
    """Why caller `sub` (role `role`) may not change the visibility of a record owned
    by `owner` (None: written before owners were kept) that it `current_sees`; None
    when it may: its owner, or a tenant OWNER who sees it (a record without owner:
    tenant OWNERs only)."""
    if not current_sees:
        return NotFound("no such record")
    if owner is not None and sub == owner:
        return None
    if role == OWNER:
        return None
    return RoleForbidden("only a record's owner, or a tenant OWNER, may change its visibility")


def delete_refusal(
    visibility: Visibility | None, sub: str | None, role: str | None
) -> SyncError | None:
    """A restricted record is deleted only by its owner or a tenant OWNER who sees it
    (a writer it is shared with may update its fields, not delete it); a tenant-wide
    one by any writer, as before visibilities."""
    if visibility is None or sub == visibility.owner or role == OWNER:
        return None
    return RoleForbidden("only a shared record's owner, or a tenant OWNER, may delete it")


def create_refusal(
    visibility: Visibility | None, sub: str | None, role: str | None
) -> SyncError | None:
    """Only a tenant OWNER may create a record owned by someone else."""
    if visibility is None or visibility.owner == sub or role == OWNER:
        return None
    return RoleForbidden("only a tenant OWNER may create a record owned by another member")


Kind = Literal["record", "left"]


@dataclass(frozen=True)
class Entries:
    """The log entries one write puts and removes (docs/ordering.md, "Who sees what"):
    in the main log, the version (`record`: live, or a deletion) or a LeftView
    sentinel (`left`: the record left the whole tenant's view), or nothing; the
    main entry it removes (the previous version's, when that was tenant-wide); per
    principal of its audience (and each leaving it), the version or a sentinel, at
    the write's token; and the previous version's stream entries it removes (at the
    previous version's token)."""

    main: Kind | None = "record"
    main_removed: bool = True
    streams: Mapping[str, Kind] = field(default_factory=dict)
    streams_removed: tuple[str, ...] = ()
    # A Member write that moves its member into or out of a group (`regroups`): the
    # marker it puts in the member's stream in a tenant with restricted records.
    marker: bool = False

    @property
    def supersedes(self) -> bool:
        """Whether it supersedes an entry of a group's stream (which then expires)."""
        return any(map(is_group, self.streams_removed))

    @property
    def expiring(self) -> bool:
        """Whether an entry it puts or updates expires (a group's superseded entry, a
        marker), with the retention."""
        return self.supersedes or self.marker

    @property
    def stream_items(self) -> int:
        """Transaction items its stream entries take (puts and removals, a marker)."""
        return len(self.streams) + len(self.streams_removed) + self.marker


def entries_of(before: Visibility | None, existed: bool, after: Visibility | None) -> Entries:
    """What a write of a record that was `before` (when it `existed`) and is now
    `after` puts and removes. A deletion keeps the visibility: its version (a
    DeletedItem) goes where the record's versions went."""
    if not existed:
        if after is None:
            return Entries("record", False)
        return Entries(None, False, dict.fromkeys(after.principals(), "record"))
    removed = () if before is None else before.principals()
    if after is None:
        return Entries("record", before is None, {}, removed)
    streams: dict[str, Kind] = dict.fromkeys(after.principals(), "record")
    if before is not None:
        for principal in before.principals():
            streams.setdefault(principal, "left")
    return Entries("left" if before is None else None, before is None, streams, removed)
