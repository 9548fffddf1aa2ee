"""How many of a push's planned writes one transaction holds: the longest prefix of
them whose items fit the room the chain's checks leave, the write that first
restricts a record of its tenant taking one item more: the flag on the tenant's
blob usage item, set in the same transaction as the head's
(`api.storage.stream_writes.StreamWrites.usage_flag`)."""

from __future__ import annotations

from api.service.deciding import Plan


def restricts(plan: Plan) -> bool:
    """Whether its write makes its tenant one with restricted records (as the store
    decides it: stream entries, or a visibility, `api.storage.stream_writes`)."""
    return bool(plan.entries.streams) or plan.visibility is not None


def fitting(group: list[Plan], room: int, restricted: bool) -> list[Plan]:
    """The longest prefix of `group` whose items fit `room`; in a tenant that had no
    restricted record (`restricted`: the head's flag), the first write that
    restricts one takes one item more."""
    fits: list[Plan] = []
    for plan in group:
        first = not restricted and restricts(plan)
        room -= plan.items + first
        restricted = restricted or first
        if room < 0:
            break
        fits.append(plan)
    return fits
