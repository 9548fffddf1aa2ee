"""Who a change pokes (docs/realtime.md, "Who is poked"): the principals of the
members whose view it changed, from what its transaction wrote where."""

from __future__ import annotations

from collections.abc import Iterable

from api.domain.chain import NO_MAIN, Head, split_stream_key
from api.domain.visibility import is_group, principals_of

# The principals (`api.domain.visibility`) of the streams a change wrote in, or None:
# every member (it wrote an entry of the tenant's main log).
Audience = frozenset[str] | None

# In an audience naming a group's stream: who is in a group is the tenant's roster's.
# A fan-out that has read the roster tells each member by its groups there; one that
# has not (a server's own subscriptions) checks each member outside the audience's
# other principals, one read of its own view, as for UNTOLD.
GROUPED: frozenset[str] = frozenset({"?"})
# In an audience: whose changes are not told (a catch-up's head token, after pokes
# that may have been missed; changes coalesced): each subscription outside the
# audience checks its own view, one read. It holds GROUPED's mark, so that a server
# of the release before (which knew one mark, "?") checks as it did.
UNTOLD: frozenset[str] = GROUPED | {"?!"}


def merged(first: Audience, second: Audience) -> Audience:
    """The audience of two changes told as one poke: whoever either is for."""
    return None if first is None or second is None else first | second


def coalesced(one: tuple[str, Audience], other: tuple[str, Audience]) -> tuple[str, Audience]:
    """Two changes told as one poke (a stream batch's heads of a tenant, a relay's
    pending poke): the newer token, for the newer change's audience. A member the
    older change was for, and the newer not, is never handed the newer token (a
    change outside its view, whose time it tells): the poke is UNTOLD for it, and
    its subscription reads its own view first (as a catch-up's)."""
    (_, older), (token, newer) = sorted((one, other), key=lambda poke: poke[0])
    if newer is None or (older is not None and older <= newer):
        return token, newer
    return token, newer | UNTOLD


def in_audience(sub: str, audience: Audience) -> bool:
    """Whether a poke for `audience` is for the member `sub` (through any of its
    principals: its own stream's, and its groups' when `sub` is a `Viewer`)."""
    return audience is None or not audience.isdisjoint(principals_of(sub))


def to_check(audience: Audience, groups_known: bool = False) -> bool:
    """Whether a member outside `audience` (by `in_audience`) checks its own view
    (one read) before a poke or push: when the audience is UNTOLD; or names a group
    and the member's groups are not known (`groups_known`: its `Viewer` is the
    roster's, read after the change committed)."""
    if audience is None:
        return False
    return audience >= (UNTOLD if groups_known else GROUPED)


def head_audience(head: Head) -> Audience:
    """Whose view the head's transaction changed: every member's when it wrote an
    entry of the tenant's main log (a tenant-wide record's version, or the sentinel
    every member gets) or the tenant never had a restricted record; else the
    principals of the streams it put entries in (`vp`: a restricted record's
    version, its deletion, a LeftView; `of_principals`)."""
    if not head.restricted:
        return None  # a tenant whose records every member sees: as before
    if any(token != NO_MAIN for token in head.main_entry_tokens()):
        return None
    return of_principals(split_stream_key(key)[1] for key in head.stream_put)


def of_principals(principals: Iterable[str]) -> Audience:
    """The audience of changes to the streams of `principals`: with GROUPED when one
    is a group's (who is in a group is the roster's: `to_check`)."""
    audience = frozenset(principals)
    return audience | GROUPED if any(map(is_group, audience)) else audience


def catch_up_audience(head: Head) -> Audience:
    """Whom a catch-up's head token pokes: the head transaction's audience, and the
    others UNTOLD (the changes before it, that pokes may have missed, are not on the
    head)."""
    audience = head_audience(head)
    return None if audience is None else audience | UNTOLD
