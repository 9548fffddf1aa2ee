"""The body of a post of pokes between servers (`api.realtime.relay`, its reader's
side; `api.realtime.poke_receiver`, its follower's): each tenant's newest token,
and for a tenant whose changes were each for some members only (records not every
member sees: docs/realtime.md, "Who is poked"), those members' principals.

`{"catchUp": bool, "pokes": {tenant: token}, "audiences": {tenant: [principal]}}`;
a tenant without an audience pokes every member (a post of a server from before
audiences has none: its followers poke every member, as they did).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from api.domain.audiences import Audience

# Principals named for one tenant at most: a change's audience is at most 21
# members' streams, and a post's merged changes are each one's (a follower given
# more pokes every member, as a poke whose audience it does not know).
MAX_PRINCIPALS = 1_000


def post_body(pokes: Mapping[str, tuple[str, Audience]], catch_up: bool) -> bytes:
    audiences = {t: sorted(a) for t, (_, a) in pokes.items() if a is not None}
    tokens = {t: token for t, (token, _) in pokes.items()}
    return json.dumps({"catchUp": catch_up, "pokes": tokens, "audiences": audiences}).encode()


def audiences_of(message: Mapping[str, Any]) -> dict[str, Audience]:
    """The audiences a post names, by tenant (TypeError: not a post's)."""
    named = message.get("audiences", {})
    if not isinstance(named, dict):
        raise TypeError("audiences")
    audiences: dict[str, Audience] = {}
    for tenant_id, principals in named.items():
        if not isinstance(principals, list) or not all(isinstance(p, str) for p in principals):
            raise TypeError("audience")
        audiences[tenant_id] = frozenset(principals) if len(principals) <= MAX_PRINCIPALS else None
    return audiences
